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
