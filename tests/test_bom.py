"""A file of the user's saved as "UTF-8 with BOM" (a Windows editor's default) is read as the same file
without it, whichever command reads it: the settings TOML, ExpertQA claims, sentence-level reference data, a
run of answers, a TREC run and its qrels. (The datasets and wetqa's own journals were fixed before.)"""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from wetqa.evaluation.answers import load_run
from wetqa.evaluation.compare import _read_qrels, _read_trec
from wetqa.evaluation.expertqa import load_claims
from wetqa.evaluation.references import load_reference_items
from wetqa.io import read_toml

pytestmark = pytest.mark.unit

CLAIMS = {
    "question": "Mag dat?",
    "metadata": {"field": "Law"},
    "answers": {"gpt4": {"answer_string": "Ja [1].", "claims": [{"claim_string": "Ja.", "evidence": ["[1] x"]}]}},
}
REFERENCES = [{"id": "1", "sentence": "Ja.", "candidates": ["a", "b"], "gold": [0]}]


def _reads(read, tmp_path: Path, name: str, text: str):
    plain, bom = tmp_path / "plain" / name, tmp_path / "bom" / name
    for path, prefix in ((plain, b""), (bom, codecs.BOM_UTF8)):
        path.parent.mkdir()
        path.write_bytes(prefix + text.encode())
    return read(plain), read(bom)


@pytest.mark.parametrize(
    "name,text,read",
    [
        ("wetqa.toml", 'k = "3"\n[retrieval]\nindex = "x"\n', read_toml),
        ("claims.jsonl", json.dumps(CLAIMS) + "\n", load_claims),
        ("refs.json", json.dumps(REFERENCES), load_reference_items),
        ("run.jsonl", json.dumps({"id": "q1", "answer": "Ja.", "cited_ids": []}) + "\n", load_run),
        ("run.trec", "q1 Q0 d1 1 2.5 mine\n", lambda p: (_read_trec(p, problems := []), problems)),
        ("qrels.txt", "q1 0 d1 1\n", _read_qrels),
    ],
)
def test_a_file_saved_with_a_bom_reads_as_without_it(tmp_path, name, text, read):
    plain, bom = _reads(read, tmp_path, name, text)
    assert plain and bom == plain
