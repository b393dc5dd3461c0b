"""Output folders and journals, tried as an unlucky user would (issue: files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wetqa.cli import main
from wetqa.io import OWNED, atomic_dir, atomic_file, read_journal

from .conftest import BWB_DIR, FIXTURES, ROOT, require_shared


def _mark(path: Path, value: str) -> None:
    """A marker file as wetqa writes them (its format inside)."""
    import json

    path.write_text(json.dumps({"wetqa_format": "test/1", "value": value}))


def _marked(path: Path) -> str:
    import json

    return json.loads(path.read_text())["value"]


def _build(out, *extra) -> int:
    return main(
        [
            "corpus",
            "build",
            "--source",
            str(FIXTURES / "bwb"),
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
            *extra,
        ]
    )


@pytest.mark.unit
def test_out_never_replaces_a_folder_wetqa_did_not_make(tmp_path, capsys):
    mine = tmp_path / "mydata"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert _build(mine) == 2
    assert "is not a corpus wetqa made" in capsys.readouterr().err
    assert (mine / "thesis.tex").read_text() == "years of work"
    # A wetqa corpus is replaced, and an empty folder is fine.
    (tmp_path / "empty").mkdir()
    assert _build(tmp_path / "empty") == 0
    assert _build(tmp_path / "empty") == 0


@pytest.mark.unit
def test_a_folder_holding_a_file_of_the_markers_name_is_not_taken_for_wetqas(fixture_corpus, tmp_path, capsys):
    """A web project with its own manifest.json, a data folder with its own index.json, a run folder's
    config.json of the user's: only a marker wetqa wrote (its format inside) lets wetqa replace a folder."""
    import json

    web = tmp_path / "web"
    (web / "src").mkdir(parents=True)
    (web / "manifest.json").write_text(json.dumps({"name": "my-app", "start_url": "/"}))
    (web / "index.html").write_text("<html></html>")
    assert _build(web) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "not one wetqa wrote" in err
    assert (web / "index.html").exists() and (web / "src").is_dir()

    data = tmp_path / "data"
    data.mkdir()
    (data / "index.json").write_text(json.dumps({"pages": [1, 2]}))
    (data / "keep.csv").write_text("1,2")
    argv = ["index", "--corpus", str(fixture_corpus), "--retriever", "bm25s", "--out", str(data), "--no-progress"]
    assert main(argv) == 2
    assert "index.json" in capsys.readouterr().err and (data / "keep.csv").exists()

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "config.json").write_text(json.dumps({"my": "settings"}))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "1", "question": "Wanneer kan de rechtbank het gezag beëindigen?"}) + "\n")
    index = tmp_path / "idx"
    assert (
        main(["index", "--corpus", str(fixture_corpus), "--retriever", "bm25s", "--out", str(index), "--no-progress"])
        == 0
    )
    capsys.readouterr()
    assert main(["generate", "--dataset", str(questions), "--index", str(index), "--out", str(runs)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert json.loads((runs / "config.json").read_text()) == {"my": "settings"}


@pytest.mark.unit
def test_out_never_replaces_a_file_or_a_parent(tmp_path, capsys, monkeypatch):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    assert _build(notes) == 2
    assert "is a file" in capsys.readouterr().err and notes.read_text() == "keep me"
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "precious.txt").write_text("x")
    monkeypatch.chdir(work)
    assert _build(Path("..")) == 2
    assert "Traceback" not in capsys.readouterr().err and (tmp_path / "precious.txt").exists()


@pytest.mark.unit
def test_index_out_refuses_a_foreign_folder(fixture_corpus, tmp_path, capsys):
    other = tmp_path / "idx"
    other.mkdir()
    (other / "data.csv").write_text("1,2")
    code = main(
        ["index", "--corpus", str(fixture_corpus), "--retriever", "bm25s", "--out", str(other), "--no-progress"]
    )
    assert code == 2 and "is not an index wetqa made" in capsys.readouterr().err
    assert (other / "data.csv").exists()


@pytest.mark.unit
def test_an_output_in_a_folder_that_takes_no_files_is_named_not_its_temporary(tmp_path):
    # sysfs takes no new files, for root too; elsewhere a folder without write permission does the same.
    folder = Path("/sys") if os.geteuid() == 0 else tmp_path / "locked"
    if folder != Path("/sys"):
        folder.mkdir()
        folder.chmod(0o500)
    with pytest.raises(OSError) as caught, atomic_file(folder / "out.json") as fh:  # EACCES, or EROFS
        fh.write("x")
    assert caught.value.filename == str(folder / "out.json")


@pytest.mark.unit
def test_outputs_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        assert _build(tmp_path / "c") == 0
        with atomic_file(tmp_path / "m.json") as fh:
            fh.write("{}")
    finally:
        os.umask(old)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "c" / "manifest.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.unit
def test_stale_temporary_folders_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.{dead.pid}.abc123.tmp"
    stale.mkdir()
    (stale / "big.bin").write_bytes(b"0" * 1000)
    (stale / OWNED).write_text('{"wetqa_format": "owned/1"}\n')  # as wetqa makes its temporary folders
    # A user's folder that merely has such a name is not wetqa's: it stays.
    users = tmp_path / f".out.{dead.pid}.mine.tmp"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    live = tmp_path / f".out.{os.getppid()}.def456.tmp"  # a running process: its build may still be going
    live.mkdir()
    unrelated = tmp_path / ".other.1.x.tmp"
    unrelated.mkdir()
    with atomic_dir(tmp_path / "out", marker="manifest.json") as tmp:
        (tmp / "manifest.json").write_text("{}")
    assert not stale.exists() and live.exists() and unrelated.exists()
    assert (users / "notes.txt").read_text() == "mine"
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.unit
def test_a_failed_swap_keeps_the_old_folder(tmp_path, monkeypatch):
    from wetqa import io

    target = tmp_path / "out"
    with atomic_dir(target, marker="m") as tmp:
        _mark(tmp / "m", "old")
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)  # no renameat2: the two-rename path
    calls = []
    real = os.replace

    def failing(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise OSError("disk went away")
        return real(src, dst)

    monkeypatch.setattr(io.os, "replace", failing)
    with pytest.raises(OSError, match="disk went away"):
        with atomic_dir(target, marker="m") as tmp:
            _mark(tmp / "m", "new")
    assert _marked(target / "m") == "old"  # rolled back
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.unit
def test_the_swap_is_one_exchange_when_the_kernel_offers_it(tmp_path):
    from wetqa import io

    target = tmp_path / "out"
    with atomic_dir(target, marker="m") as tmp:
        _mark(tmp / "m", "one")
    with atomic_dir(target, marker="m") as tmp:
        _mark(tmp / "m", "two")
    assert _marked(target / "m") == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    # On Linux the two folders trade places in one renameat2 call: the path never goes missing.
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    if io._exchange(a, b):
        assert (b / "x").read_text() == "a" and not (a / "x").exists()


@pytest.mark.unit
def test_a_corrupt_line_in_the_middle_is_reported_and_the_rest_kept(tmp_path, capsys):
    path = tmp_path / "run-1.jsonl"
    path.write_text('{"id": "1"}\n{"id": "2", broken\n{"id": "3"}\n{"id": "4"')
    problems: list = []
    records = read_journal(path, problems)
    assert [r["id"] for r in records] == ["1", "3"]
    assert problems == [{"file": str(path), "line": 2, "problem": "not a JSON record; left out"}]
    # Only the torn last line is cut off the file; the corrupt middle line stays for a person to see.
    assert path.read_text() == '{"id": "1"}\n{"id": "2", broken\n{"id": "3"}\n'
    assert "run-1.jsonl:2" in capsys.readouterr().err


@pytest.mark.integration
def test_a_killed_build_leaves_no_workers_and_its_leftovers_go_next_time(tmp_path):
    require_shared()
    out = tmp_path / "corpus"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wetqa",
            "corpus",
            "build",
            "--source",
            str(BWB_DIR),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ],
        cwd=ROOT,
    )
    deadline = time.time() + 60
    children: list[int] = []
    while time.time() < deadline and not children:
        time.sleep(0.2)
        children = _children(proc.pid)
    assert children, "the build started no worker processes"
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(c) for c in children):
        time.sleep(0.2)
    assert not any(_alive(c) for c in children), "workers outlived their killed parent"
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".corpus.")]
    assert leftovers  # the killed build's temporary folder
    assert _build(out) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".corpus.")]


def _children(pid: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"\nPPid:\t{pid}\n" in text:
            out.append(int(status.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:\t")[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _index_into(corpus, out) -> int:
    return main(["index", "--corpus", str(corpus), "--retriever", "bm25s", "--out", str(out), "--no-progress"])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.unit
def test_a_build_never_replaces_a_wetqa_folder_of_another_kind(fixture_corpus, tmp_path, capsys):
    # A defect hunt's data loss: `wetqa index --out CORPUS` replaced the corpus with an index (exit 0), and
    # `corpus build --out INDEX` the index with a corpus; every file in them was wetqa's, so the owned-folder
    # rule let them go.
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, corpus)
    before = _tree(corpus)
    assert _index_into(corpus, corpus) == 2
    err = capsys.readouterr().err
    assert "is a corpus wetqa built, not an index" in err and len(err.strip().splitlines()) == 1, err
    assert _tree(corpus) == before
    index = tmp_path / "index"
    assert _index_into(corpus, index) == 0
    indexed = _tree(index)
    assert _build(index) == 2
    assert "is an index wetqa built, not a corpus" in capsys.readouterr().err
    assert _tree(index) == indexed
    assert _index_into(corpus, index) == 0 and _build(corpus) == 0  # each kind still replaces its own
    # A folder wetqa made to hold others (data/ holding corpus/ and index/) is not replaced by either.
    home = tmp_path / "home"
    assert _build(home / "corpus") == 0 and _index_into(home / "corpus", home / "index") == 0
    held = _tree(home)
    assert _index_into(home / "corpus", home) == 2
    assert "not an index" in capsys.readouterr().err
    assert _build(home) == 2 and _tree(home) == held


@pytest.mark.unit
def test_a_folder_an_older_wetqa_built_is_known_by_its_marker(fixture_corpus, tmp_path, capsys):
    # Folders built before the kind was recorded: their list of files has no kind, their marker tells.
    import json
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, corpus)
    (corpus / OWNED).write_text(
        json.dumps({"wetqa_format": "owned/1"})
        + "\n"
        + "".join(json.dumps(e.name) + "\n" for e in corpus.iterdir() if e.name != OWNED)
    )
    before = _tree(corpus)
    assert _index_into(corpus, corpus) == 2
    assert "not an index" in capsys.readouterr().err and _tree(corpus) == before
    assert _build(corpus) == 0  # a corpus it is


@pytest.mark.unit
def test_no_other_output_is_written_into_a_folder_wetqa_built(bm25s_index, fixture_corpus, tmp_path, capsys):
    # `eval retrieval --out INDEX` added its metrics and runs to the index, which then failed to open as
    # damaged ("metrics.json was written by its build but index.json does not list it").
    import shutil

    dataset = tmp_path / "q.jsonl"
    dataset.write_text(
        '{"id": "1", "question": "Wanneer eindigt het gezag?", "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 266"}]}\n'
    )
    for built in (bm25s_index, fixture_corpus):
        target = tmp_path / built.name
        shutil.copytree(built, target)
        before = _tree(target)
        code = main(["eval", "retrieval", "--dataset", str(dataset), "--index", str(bm25s_index), "--out", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and "wetqa built" in err and "writes no other output into it" in err, err
        assert _tree(target) == before
    assert main(["search", "gezag", "--index", str(tmp_path / bm25s_index.name)]) == 0


@pytest.mark.unit
def test_a_corpus_file_that_is_not_utf8_and_an_out_under_a_file_are_named(fixture_corpus, tmp_path, capsys):
    # A defect hunt: the codec's bare "'utf-8' codec can't decode byte 0xac in position 0", naming no file,
    # and "[Errno 20] Not a directory: '.../notes.txt/sub'".
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, corpus)
    lines = (corpus / "chunks.jsonl").read_bytes().splitlines(keepends=True)
    (corpus / "chunks.jsonl").write_bytes(b"".join(lines[:2]) + b"\xac" + b"".join(lines[2:]))
    assert _index_into(corpus, tmp_path / "idx") == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"wetqa: error: {corpus / 'chunks.jsonl'}:3: not UTF-8 text (0xac at byte 1 of the line); save it as UTF-8"
    ), err
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    assert _index_into(fixture_corpus, notes / "sub") == 2
    err = capsys.readouterr().err.strip()
    assert err == f"wetqa: error: cannot make {notes / 'sub'}: {notes} is a file, not a folder", err
    assert notes.read_text() == "keep me"


@pytest.mark.unit
def test_no_output_is_made_inside_a_folder_wetqa_built(fixture_corpus, bm25s_index, tmp_path, capsys):
    # The review of the rule above: an output *below* a built folder was listed in it and made there
    # (`eval retrieval --out INDEX/eval`: the index then failed to open as damaged, and a rebuild deleted the
    # eval folder without a word; `index --out CORPUS/idx`, deleted by the next corpus build).
    import shutil

    corpus, index = tmp_path / "corpus", tmp_path / "index"
    shutil.copytree(fixture_corpus, corpus)
    shutil.copytree(bm25s_index, index)
    before = {"corpus": _tree(corpus), "index": _tree(index)}
    dataset = tmp_path / "q.jsonl"
    dataset.write_text(
        '{"id": "1", "question": "Wanneer eindigt het gezag?", "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 266"}]}\n'
    )
    for argv in (
        ["eval", "retrieval", "--dataset", str(dataset), "--index", str(index), "--out", str(index / "eval")],
        ["generate", "--dataset", str(dataset), "--index", str(index), "--out", str(index / "runs" / "a")],
        ["index", "--corpus", str(corpus), "--retriever", "bm25s", "--out", str(corpus / "idx"), "--no-progress"],
        [
            "corpus",
            "build",
            "--source",
            str(FIXTURES / "bwb"),
            "--out",
            str(index / "c"),
            "--workers",
            "1",
            "--no-progress",
        ],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is inside" in err and "wetqa built" in err and len(err.strip().splitlines()) == 1, err
    assert {"corpus": _tree(corpus), "index": _tree(index)} == before
    assert main(["search", "gezag", "--index", str(index)]) == 0
