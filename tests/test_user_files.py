"""A user's files are never overwritten, deleted or written beside (issue 29): one owned-folder rule for
every command that writes, and every writing command run, whole and interrupted, inside a folder full
of a user's files."""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wetqa.cli import main
from wetqa.console import EXIT_INTERRUPTED, EXIT_USAGE
from wetqa.io import OutputError, atomic_dir, own_folder

from .conftest import FIXTURES
from .test_corpus_download import bwb  # noqa: F401  (the loopback BWB services, a fixture)

pytestmark = pytest.mark.unit

QUESTIONS = [
    ("1", "Wanneer kan de rechtbank het gezag van een ouder beëindigen?", "Artikel 266"),
    ("2", "Wanneer eindigt het gezag van rechtswege?", "Artikel 266"),
]
# What a user's folder holds: names wetqa writes too, hidden files, temporary-looking names, subfolders.
USER_FILES = {
    "thesis.tex": b"years of work",
    "metrics.json": b'{"mine": true}',
    "scores.jsonl": b'{"id": "mine"}\n',
    "config.json": b'{"my": "settings"}',
    "run-1.jsonl": b'{"id": "1", "answer": "my own"}\n',
    "manifest.json": b'{"name": "my-app"}',
    "index.json": b'{"pages": [1, 2]}',
    "downloads.jsonl": b"my downloads\n",
    "table.md": b"| my | table |\n",
    "qrels.chunk.txt": b"1 0 mine 1\n",
    "BWBR9990001_2024-01-01_10.xml": b"<mijn/>",
    ".hidden": b"secret",
    "notes.tmp": b"scratch",
    ".metrics.json.abc123.tmp": b"scratch that looks like wetqa's",
    ".out.1.mine.tmp/inside.txt": b"a folder named like wetqa's temporaries",
    "sub/deep.txt": b"deep",
    "data/mine.csv": b"1,2\n",
    "runs/mine.txt": b"my runs",
}


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _user_folder(root: Path) -> dict[str, str]:
    for name, data in USER_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return _snapshot(root)


def _survived(root: Path, before: dict[str, str]) -> None:
    after = _snapshot(root)
    changed = [name for name, digest in before.items() if after.get(name) != digest]
    assert not changed, f"user files changed or gone: {changed}"


def _dataset(path: Path) -> Path:
    # With gold answers: the evaluations asked of them score ROUGE-L (a dataset without any is refused for it).
    rows = [
        {
            "id": i,
            "question": q,
            "answer": "De rechtbank beslist.",
            "articles": [{"law_id": "BWBR9990001", "article": a}],
        }
        for i, q, a in QUESTIONS
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, articles_index, fixture_corpus):
    """What the commands read, outside the user's folder: a corpus, an index, a dataset, runs, references."""
    root = tmp_path_factory.mktemp("inputs")
    data = _dataset(root / "d.jsonl")
    for name in ("run-a", "run-b"):
        assert (
            main(["generate", "--dataset", str(data), "--index", str(articles_index), "--out", str(root / name)]) == 0
        )
    refs = root / "refs"
    refs.mkdir()
    cands = ["De rechtbank kan het gezag beëindigen.", "Het gezag eindigt van rechtswege.", "Iets anders."]
    item = {"summarySentence": "Het gezag kan worden beëindigd.", "paragraphs": [cands], "references": [cands[0]]}
    (refs / "A.json").write_text(json.dumps([item]), encoding="utf-8")
    grid = root / "grid.toml"
    grid.write_text(
        f'name = "t"\ndataset = "{data}"\ncorpus = "{fixture_corpus}"\nk = [3]\nruns = 1\nmetrics = ["rouge"]\n'
        '[retrievers.bm25s]\nretriever = "bm25s"\n[generators.extractive]\ngenerator = "extractive"\n',
        encoding="utf-8",
    )
    return {
        "corpus": str(fixture_corpus),
        "index": str(articles_index),
        "data": str(data),
        "runs": [str(root / "run-a"), str(root / "run-b")],
        "refs": str(refs),
        "grid": str(grid),
    }


COMMANDS = (
    "corpus build",
    "index",
    "generate",
    "eval retrieval",
    "eval generation",
    "eval compare",
    "eval references",
    "eval claims",
    "corpus download",
    "experiment",
)


def _commands(i: dict) -> dict[str, list[str]]:
    """Every command that writes (``--out`` is appended)."""
    return {
        "corpus build": ["corpus", "build", "--source", str(FIXTURES / "bwb"), "--workers", "1", "--no-progress"],
        "index": ["index", "--corpus", i["corpus"], "--retriever", "bm25s", "--no-progress"],
        "generate": ["generate", "--dataset", i["data"], "--index", i["index"]],
        "eval retrieval": ["eval", "retrieval", "--dataset", i["data"], "--index", i["index"]],
        "eval generation": ["eval", "generation", "--runs", i["runs"][0], "--dataset", i["data"], "--metrics", "rouge"],
        "eval compare": ["eval", "compare", *i["runs"], "--dataset", i["data"], "--metrics", "rougeL"],
        "eval references": ["eval", "references", "--data", i["refs"]],
        "eval claims": ["eval", "claims", "--data", str(FIXTURES / "expertqa"), "--no-progress"],
        "corpus download": ["corpus", "download", "BWBR9990001", "--date", "2024-06-01"],
        "experiment": ["experiment", "--config", i["grid"]],
    }


class Interrupt:
    """Counts the files a command opens and renames; ``at`` a call, it is interrupted there: by Ctrl-C
    (KeyboardInterrupt, cleanup runs), or killed outright (``os._exit`` in a child process: no cleanup)."""

    def __init__(self, monkeypatch, at: int | None = None, kill: bool = False):
        self.calls, self.at, self.kill = 0, at, kill
        real_open, real_replace = builtins.open, os.replace

        def counted(real):
            def call(*args, **kwargs):
                self.calls += 1
                if self.calls == self.at:
                    if self.kill:
                        os._exit(137)
                    raise KeyboardInterrupt
                return real(*args, **kwargs)

            return call

        monkeypatch.setattr(builtins, "open", counted(real_open))
        monkeypatch.setattr(os, "replace", counted(real_replace))


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _in_child(argv: list[str], at: int | None, cwd: str, env: dict[str, str], log: str) -> None:  # pragma: no cover
    """In a child of the fork server: the command, in the test's folder and environment, its output in
    ``log``; it dies at call ``at`` (None: it runs whole and writes how many calls it made)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    with pytest.MonkeyPatch.context() as m:
        counter = Interrupt(m, at, kill=True)
        main(argv)
    sys.stdout.flush()
    os.write(fd, f"\ncalls {counter.calls}\n".encode())


def _child(argv: list[str], at: int | None, cache: str, log: Path, limit: float = 300.0) -> tuple[int, int | None]:
    """(exit code, calls made) of the command run in a new process that dies at the ``at``-th call, as
    kill -9 leaves things (None: run whole, to count its calls), its cache folder ``cache``.

    The child comes from multiprocessing's fork server, a fresh single-threaded interpreter, not from a
    fork of this test process: a fork of a process with threads (the loopback BWB server's, BLAS and
    ONNX Runtime pools of earlier tests in this worker) inherits their locks and half-built state, and
    such a child once hung (``eval compare``) and once died of SIGSEGV (``experiment``) before the kill.
    A child that hangs all the same is killed and named instead of waiting for CI's limit."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["wetqa.cli", __name__])
    env = {**os.environ, "WETQA_CACHE": cache}
    child = context.Process(target=_in_child, args=(argv, at, os.getcwd(), env, str(log)))
    child.start()
    child.join(limit)
    if child.exitcode is None:
        child.kill()
        child.join()
        pytest.fail(f"the child of {argv[:2]} killed at call {at} hung for {limit:.0f} s")
    text = log.read_text(errors="replace")
    counted = [int(line.split()[1]) for line in text.splitlines() if line.startswith("calls ")]
    assert child.exitcode in (0, 1, 137), f"the child of {argv[:2]}, exit {child.exitcode}:\n{text[-2000:]}"
    return child.exitcode, counted[-1] if counted else None


def _cache_as(tmp_path: Path, name: str) -> str:
    """A copy of the test's cache folder as it is: every run counted or stopped at a call starts from the
    same cache, so a stop at call ``at`` meets what the count met."""
    import shutil

    copy = tmp_path / f"cache-{name}"
    if (tmp_path / "cache").is_dir():
        shutil.copytree(tmp_path / "cache", copy, symlinks=True)
    else:
        copy.mkdir()
    return str(copy)


def _stops(calls: int) -> list[int]:
    """Where a run is stopped: at its first call, a third of the way and two thirds of the way."""
    return sorted({1, calls // 3, (2 * calls) // 3} - {0})


@pytest.mark.parametrize("command", COMMANDS)
def test_every_writing_command_whole_and_interrupted_leaves_a_users_files_alone(
    command,
    inputs,
    tmp_path,
    monkeypatch,
    capsys,
    bwb,  # noqa: F811
):
    home = tmp_path / "home"
    home.mkdir()
    before = _user_folder(home)
    monkeypatch.chdir(home)
    monkeypatch.setenv("WETQA_CACHE", str(tmp_path / "cache"))
    argv = _commands(inputs)[command]
    assert list(_commands(inputs)) == list(COMMANDS)
    # Into the user's folder itself: refused before anything is written.
    assert _run([*argv, "--out", "."]) == EXIT_USAGE, capsys.readouterr()
    assert "wetqa did not write" in capsys.readouterr().err or command in ("corpus build", "index")
    assert _snapshot(home) == before
    # Into new folders beside the user's files: whole, then interrupted by Ctrl-C and killed outright at
    # calls counted beforehand, each stop into a folder of its own (a folder a run has finished leaves the
    # next run nothing to stop in) and then resumed.
    assert _run([*argv, "--out", "results"]) in (0, 1), capsys.readouterr()  # and this process loads what runs use
    _survived(home, before)
    # Ctrl-C: in this process, the calls counted by a run into a new folder.
    with monkeypatch.context() as m:
        m.setenv("WETQA_CACHE", _cache_as(tmp_path, "counted"))
        counter = Interrupt(m)
        assert _run([*argv, "--out", "counted"]) in (0, 1), capsys.readouterr()
    for at in _stops(counter.calls):
        with monkeypatch.context() as m:
            m.setenv("WETQA_CACHE", _cache_as(tmp_path, f"interrupted-{at}"))
            with monkeypatch.context() as stop:
                Interrupt(stop, at)
                assert _run([*argv, "--out", f"interrupted-{at}"]) == EXIT_INTERRUPTED, (at, capsys.readouterr())
            _survived(home, before)
            assert _run([*argv, "--out", f"interrupted-{at}"]) in (0, 1), capsys.readouterr()  # resumed
            _survived(home, before)
    # kill -9: in new processes, the calls counted by one of them.
    code, calls = _child([*argv, "--out", "counted-cold"], None, _cache_as(tmp_path, "cold"), tmp_path / "cold.log")
    assert code in (0, 1) and calls, (code, (tmp_path / "cold.log").read_text())
    for at in _stops(calls):
        cache = _cache_as(tmp_path, f"killed-{at}")
        log = tmp_path / f"killed-{at}.log"
        code, _ = _child([*argv, "--out", f"killed-{at}"], at, cache, log)
        # Not 137: a run that ended before call ``at`` and so tested no kill.
        assert code == 137, f"the child of {argv[:2]} to die at call {at} of {calls}: exit {code}\n{log.read_text()}"
        _survived(home, before)
        with monkeypatch.context() as m:
            m.setenv("WETQA_CACHE", cache)
            assert _run([*argv, "--out", f"killed-{at}"]) in (0, 1), capsys.readouterr()  # resumed or rebuilt
        _survived(home, before)
    capsys.readouterr()


def test_eval_generation_refuses_a_folder_with_a_users_scores_before_writing(inputs, tmp_path, capsys):
    argv = ["eval", "generation", "--runs", inputs["runs"][0], "--dataset", inputs["data"], "--metrics", "rouge"]
    for name in ("scores.jsonl", "metrics.json"):
        mine = tmp_path / name.split(".")[0]
        mine.mkdir()
        (mine / name).write_text('{"mine": true}\n')
        assert main([*argv, "--out", str(mine)]) == EXIT_USAGE
        assert name in capsys.readouterr().err
        assert [p.name for p in mine.iterdir()] == [name] and (mine / name).read_text() == '{"mine": true}\n'


def test_eval_retrieval_never_writes_into_a_users_folder(inputs, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.json").write_text("{}")
    (mine / "qrels.chunk.txt").write_text("mine")
    argv = ["eval", "retrieval", "--dataset", inputs["data"], "--index", inputs["index"], "--out", str(mine)]
    assert main(argv) == EXIT_USAGE
    assert "wetqa did not write" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["metrics.json", "qrels.chunk.txt"]
    assert (mine / "metrics.json").read_text() == "{}" and (mine / "qrels.chunk.txt").read_text() == "mine"


def test_generate_force_never_deletes_a_users_run_file(inputs, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run-1.jsonl").write_text('{"id": "1", "answer": "my own"}\n')
    argv = ["generate", "--dataset", inputs["data"], "--index", inputs["index"], "--out", str(mine)]
    for extra in ([], ["--force"]):
        assert main([*argv, *extra]) == EXIT_USAGE
        assert "run-1.jsonl" in capsys.readouterr().err
        assert [p.name for p in mine.iterdir()] == ["run-1.jsonl"]
        assert (mine / "run-1.jsonl").read_text() == '{"id": "1", "answer": "my own"}\n'


def test_nothing_is_written_into_the_root_or_the_home_folder_itself(inputs, tmp_path, monkeypatch, capsys, bwb):  # noqa: F811
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # empty: only being the home folder forbids it
    for command, argv in _commands(inputs).items():
        assert _run([*argv, "--out", str(home)]) == EXIT_USAGE, command
        assert "home folder" in capsys.readouterr().err, command
        assert not list(home.iterdir()), command
    for path in (Path("/"), home):
        with pytest.raises(OutputError, match="never writes into it"):
            own_folder(path)
        with pytest.raises(OutputError, match="never writes into it"):
            with atomic_dir(path, marker="manifest.json"):
                pass


def test_a_folder_wetqa_made_is_refused_once_a_user_puts_a_file_in_it(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["eval", "retrieval", "--dataset", inputs["data"], "--index", inputs["index"], "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 0  # its own folder: written again
    (out / "my-notes.txt").write_text("mine")
    assert main(argv) == EXIT_USAGE
    assert "my-notes.txt" in capsys.readouterr().err and (out / "my-notes.txt").read_text() == "mine"
    # An index folder wetqa built is not replaced (which would delete the file) either.
    idx = tmp_path / "idx"
    build = ["index", "--corpus", inputs["corpus"], "--retriever", "bm25s", "--out", str(idx), "--no-progress"]
    assert main(build) == 0
    (idx / "my-notes.txt").write_text("mine")
    assert main([*build, "--force"]) == EXIT_USAGE
    assert (idx / "my-notes.txt").read_text() == "mine"


def test_an_older_wetqas_run_folder_is_still_resumed(inputs, tmp_path):
    """A folder made before the list of what wetqa wrote existed: adopted by what the command recognises."""
    from wetqa.io import OWNED

    run = tmp_path / "run"
    argv = ["generate", "--dataset", inputs["data"], "--index", inputs["index"], "--out", str(run)]
    assert main(argv) == 0
    (run / OWNED).unlink()
    assert main(argv) == 0 and (run / OWNED).is_file()


def test_killing_a_build_never_removes_a_users_folder_named_like_its_temporaries(fixture_corpus, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f".idx.{dead.pid}.abc.tmp"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    argv = ["index", "--corpus", str(fixture_corpus), "--retriever", "bm25s", "--out", str(tmp_path / "idx")]
    assert main([*argv, "--no-progress"]) == 0
    assert (mine / "notes.txt").read_text() == "mine"
