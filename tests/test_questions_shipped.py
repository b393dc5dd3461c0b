"""The shipped question set against the questions wetqa is evaluated on (real data beside the project)."""

from __future__ import annotations

import pytest

from wetqa.retrieval.questions import asked_in, near_copies, shipped

from .conftest import ROOT, SHARED

pytestmark = pytest.mark.integration


def test_the_shipped_set_copies_no_evaluation_question():
    """The shipped questions were written by writers who never saw an evaluation question, and packing dropped
    what came near one anyway: none is a near copy (word Jaccard >= .6) of a question wetqa is evaluated on."""
    from wetqa.corpus.dataset import load_dataset

    assert (SHARED / "legalqa" / "dev.jsonl").is_file()  # the benchmark's questions are checked too, never skipped
    sets = sorted((ROOT / "bench" / "data").glob("*.jsonl")) + sorted((SHARED / "legalqa").glob("*.jsonl"))
    asked = asked_in([item for path in sets for item in load_dataset(path)])
    assert len(asked) > 500
    qset = shipped()
    assert qset is not None
    written = [q for row in qset.rows for q in row.questions]
    assert len(written) > 20000
    copies = near_copies(written, asked)
    assert not copies, [(written[i], asked[j], round(x, 2)) for i, (j, x) in list(copies.items())[:5]]


def test_the_shipped_vectors_are_of_the_shipped_questions():
    """The written questions' vectors ship beside them (retrieval/questions.reader.npz): a set changed without
    its vectors made again would leave its new questions to be read as they come, and the cost back."""
    from wetqa.retrieval.articles.reader import QUESTIONS_DIM, shipped_pack_path
    from wetqa.retrieval.models.vector_pack import VectorPack

    path = shipped_pack_path()
    assert path is not None, "no retrieval/questions.reader.npz: make it with scripts/pack_reader_vectors.py"
    pack = VectorPack(path)
    written = list(dict.fromkeys(q for row in shipped().rows if row.article for q in row.questions))
    found, vectors = pack.lookup(written)
    assert found.all(), f"{int((~found).sum())} written questions have no vector"
    assert len(pack) == len(written) and pack.dim == QUESTIONS_DIM
    assert abs(float((vectors[:100] ** 2).sum(axis=1).mean()) - 1.0) < 1e-3
