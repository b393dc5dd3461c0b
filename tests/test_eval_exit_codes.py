"""What `wetqa eval` exits with when nothing (or not everything) could be scored, and the rest of the
CLI's one-line answers to bad input (issue 29)."""

from __future__ import annotations

import json
import socket

import pytest

from wetqa.cli import main
from wetqa.console import EXIT_OK, EXIT_PARTIAL, EXIT_UNAVAILABLE

QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "qa.jsonl"
    row = {"id": "1", "question": QUESTION, "answer": "De rechtbank kan het gezag beëindigen.", "articles": []}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def _run(tmp_path, name: str, lines: list[str]):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "run-1.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


@pytest.mark.unit
@pytest.mark.parametrize(
    "lines",
    [
        [json.dumps({"id": "x1", "answer": "De rechtbank beslist."})],  # a question the dataset does not have
        [],  # an empty run file
        [json.dumps({"id": "1", "answer": 42})],  # an answer that is not text
    ],
    ids=["ids not in the dataset", "empty run file", "answer is a number"],
)
def test_eval_generation_with_nothing_scored_exits_1(lines, tmp_path, dataset, fixture_corpus, capsys):
    run = _run(tmp_path, "run", lines)
    argv = ["eval", "generation", "--runs", str(run), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    assert main([*argv, "--metrics", "rouge"]) == EXIT_PARTIAL
    err = capsys.readouterr().err
    assert "no answer" in err or "no complete score" in err, err
    # --allow-failures keeps 0 for answers that failed, never when the runs held nothing to score.
    assert main([*argv, "--metrics", "rouge", "--allow-failures"]) == EXIT_PARTIAL


@pytest.mark.unit
def test_eval_generation_counts_lines_it_could_not_score_as_failures(tmp_path, dataset, fixture_corpus, capsys):
    run = _run(tmp_path, "run", [json.dumps({"id": "1", "answer": "De rechtbank beslist."}), "kapot"])
    argv = ["eval", "generation", "--runs", str(run), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    assert main([*argv, "--metrics", "rouge"]) == EXIT_PARTIAL
    assert "run-1.jsonl" in capsys.readouterr().err
    assert main([*argv, "--metrics", "rouge", "--allow-failures"]) == EXIT_OK


@pytest.mark.integration
def test_an_unreachable_geval_judge_exits_3(tmp_path, dataset, fixture_corpus, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = _run(tmp_path, "run", [json.dumps({"id": "1", "answer": "De rechtbank beslist."})])
    argv = ["eval", "generation", "--runs", str(run), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    argv += ["--metrics", "geval", "--judge", "m", "--judge-base-url", f"http://127.0.0.1:{port}/v1"]
    assert main(argv) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "cannot reach" in err, err


def _subcommand_paths(parser, prefix=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommand_paths(sub, (*prefix, name))


@pytest.mark.unit
def test_every_commands_help_is_printed(capsys):
    """`wetqa eval --help` crashed on the "95%" of a help text (a 66-line traceback, exit 1)."""
    from wetqa.cli import build_parser

    paths = [(), *_subcommand_paths(build_parser(None))]
    assert ("eval", "compare") in paths and len(paths) > 15
    for path in paths:
        with pytest.raises(SystemExit) as done:
            main([*path, "--help"])
        assert done.value.code == 0, path
        assert "usage: wetqa" in capsys.readouterr().out, path


def _limited(max_bytes: int):
    """A child process that may not write files larger than ``max_bytes``: as a disk that fills up."""
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG) instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


@pytest.mark.unit
def test_a_full_disk_is_one_line_and_exit_2_for_every_build(fixture_corpus, articles_index, tmp_path, dataset):
    import subprocess
    import sys

    from .conftest import FIXTURES, ROOT

    commands = {
        "index articles": ["index", "--corpus", str(fixture_corpus), "--out", str(tmp_path / "a"), "--no-progress"],
        "index bm25s": [
            "index",
            "--corpus",
            str(fixture_corpus),
            "--retriever",
            "bm25s",
            "--out",
            str(tmp_path / "b"),
            "--no-progress",
        ],
        "corpus build": [
            "corpus",
            "build",
            "--source",
            str(FIXTURES / "bwb"),
            "--out",
            str(tmp_path / "c"),
            "--no-progress",
        ],
        "generate": [
            "generate",
            "--dataset",
            str(dataset),
            "--index",
            str(articles_index),
            "--out",
            str(tmp_path / "g"),
        ],
    }
    for name, argv in commands.items():
        proc = subprocess.run(
            [sys.executable, "-m", "wetqa", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=_limited(600),
            env={**__import__("os").environ, "WETQA_CACHE": str(tmp_path / "cache")},
            timeout=120,
        )
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (name, proc.stderr[-800:])
        assert len(err) == 1 and "internal error" not in err[0], (name, err)
        assert "space" in err[0] or "too large" in err[0], (name, err)


def _serve_config(*flags: str):
    from wetqa.cli import build_parser
    from wetqa.serve.cli import server_config

    return server_config(build_parser(["serve"]).parse_args(["serve", *flags]))


@pytest.mark.unit
@pytest.mark.parametrize(
    "flags",
    [
        ("--host", ""),
        ("--host", "  "),
        ("--header-timeout", "inf"),
        ("--body-timeout", "inf"),
        ("--request-timeout", "inf"),
        ("--timeout-keep-alive", "inf"),
    ],
)
def test_serve_refuses_an_empty_host_and_endless_timeouts(flags, capsys):
    """`--host ''` listened on every interface and printed http://:PORT; `--header-timeout inf` turned the
    slowloris guard off."""
    from wetqa.console import UsageError

    with pytest.raises((SystemExit, UsageError)) as refused:
        _serve_config(*flags)
    if isinstance(refused.value, SystemExit):
        assert refused.value.code == 2
        message = capsys.readouterr().err
    else:
        message = str(refused.value)
    assert flags[0] in message or "address" in message, message
    assert _serve_config("--host", "0.0.0.0", "--header-timeout", "5").host == "0.0.0.0"


@pytest.mark.unit
def test_eval_generation_names_a_missing_run_folder_and_a_garbage_config(tmp_path, dataset, capsys):
    from wetqa.console import EXIT_USAGE

    argv = ["eval", "generation", "--dataset", str(dataset), "--metrics", "rouge", "--runs"]
    assert main([*argv, str(tmp_path / "nonexistent")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not found" in err and "nonexistent" in err and "which corpus" not in err, err
    run = _run(tmp_path, "run", [json.dumps({"id": "1", "answer": "De rechtbank beslist."})])
    (run / "config.json").write_text("{not json", encoding="utf-8")
    assert main([*argv, str(run)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert str(run / "config.json") in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.unit
def test_loading_wordnet_prints_no_warning_of_nltk(tmp_path):
    import warnings

    from wetqa.evaluation.wordnet import DEBIAN_WORDNET, load_wordnet

    if not (DEBIAN_WORDNET / "data.noun").is_file():
        pytest.skip("Debian's WordNet is not installed (scripts/test.sh installs it)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_wordnet(tmp_path / "nltk_data") is not None
    assert not [w for w in caught if issubclass(w.category, UserWarning)], [str(w.message) for w in caught]
