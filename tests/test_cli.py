"""The CLI as a user meets it: one-line errors (JSON with --output json), documented exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wetqa.cli import main
from wetqa.console import EXIT_INTERRUPTED, EXIT_PARTIAL, EXIT_PIPE, EXIT_UNAVAILABLE, EXIT_USAGE

from .conftest import FIXTURES, ROOT


@pytest.fixture(scope="module")
def fixture_index(fixture_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "index"
    assert (
        main(["index", "--corpus", str(fixture_corpus), "--retriever", "bm25s", "--out", str(out), "--no-progress"])
        == 0
    )
    return out


def _err(capsys) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["search", "q", "--index", "I", "--index", "J", "--fusion", "interpolate", "--weights", "a,b"],
            "--weights: expected comma-separated numbers",
        ),
        (["index", "--retriever", "dense", "--batch-size", "0"], "--batch-size: must be >= 1"),
        (["ask", "q", "--generator", "transformers", "--model", "m", "--dtype", "fp16"], "--dtype: invalid choice"),
        (["serve", "--port", "99999"], "--port: a port is 0-65535"),
        (["generate", "--dataset", "d", "--out", "o", "--limit", "-5"], "--limit: must be >= 1"),
        (["index", "--retriever", "bm25s", "--k1", "-5"], "--k1: must be >= 0"),
        (["search", "q", "-k", "0"], "-k: k must be a positive number of hits"),
    ],
)
@pytest.mark.unit
def test_bad_values_are_rejected_in_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == EXIT_USAGE
    assert says in _err(capsys)


@pytest.mark.unit
def test_errors_are_json_with_output_json(capsys, tmp_path):
    code = main(["search", "q", "--index", str(tmp_path / "nowhere"), "--output", "json"])
    assert code == EXIT_USAGE
    out = capsys.readouterr().out
    error = json.loads(out)["error"]
    assert error["type"] == "invalid_input" and "no index at" in error["message"] and "wetqa index" in error["message"]
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "q", "-k", "zero", "--output", "json"])
    assert exit_info.value.code == EXIT_USAGE
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "usage" and "-k: expected a whole number" in error["message"]


@pytest.mark.unit
def test_missing_default_index_names_the_command_that_builds_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("WETQA_HOME", str(tmp_path / "home"))
    assert main(["ask", "Wanneer?"]) == EXIT_USAGE
    line = _err(capsys)
    assert str(tmp_path / "home" / "index") in line and "wetqa index" in line


@pytest.mark.unit
def test_options_that_do_not_apply_are_rejected(capsys, fixture_index):
    assert main(["ask", "Wanneer?", "--index", str(fixture_index), "--temperature", "0.5"]) == EXIT_USAGE
    assert "--temperature does not apply to the extractive generator" in _err(capsys)
    assert main(["ask", "Wanneer?", "--index", str(fixture_index), "--model", "x"]) == EXIT_USAGE
    assert "--model does not apply" in _err(capsys)
    assert (
        main(["ask", "q?", "--index", str(fixture_index), "--generator", "gpt-4o", "--dtype", "float16"]) == EXIT_USAGE
    )
    assert "--dtype does not apply to the openai generator" in _err(capsys)
    assert main(["index", "--retriever", "dense", "--k1", "1.0", "--out", "x"]) == EXIT_USAGE
    assert "do not apply to the dense retriever" in _err(capsys)
    assert main(["search", "q", "--index", str(fixture_index), "--weights", "1"]) == EXIT_USAGE
    assert "--weights applies to --fusion interpolate" in _err(capsys)


@pytest.mark.unit
def test_missing_model_paths_are_named(capsys, tmp_path, bm25s_index, fixture_corpus):
    # A model that is not there is a missing component (exit 3), as the reader's is: the re-scoring model's
    # and a generator's were exit 2 (two defect hunts found the codes differ).
    run = tmp_path / "run-1.jsonl"
    run.write_text('{"id": "1", "answer": "x"}\n')
    assert main(["ask", "q?", "--generator", "transformers", "--model", "/nonexistent/model.gguf"]) == EXIT_UNAVAILABLE
    assert "model not found: /nonexistent/model.gguf" in _err(capsys)
    assert main(["search", "gezag", "--index", str(bm25s_index), "--rescore", "/nonexistent/e5"]) == EXIT_UNAVAILABLE
    assert "dense model not found: /nonexistent/e5" in _err(capsys)
    assert main(["search", "gezag", "--index", str(bm25s_index), "--rerank", "cross-encoder:/nonexistent/ce"]) == 3
    assert "re-ranker not found: /nonexistent/ce" in _err(capsys)
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "1", "question": "q?", "answer": "x"}\n')
    code = main(
        [
            "eval",
            "generation",
            "--runs",
            str(run),
            "--dataset",
            str(data),
            "--metrics",
            "nli",
            "--nli-model",
            "/nonexistent",
            "--corpus",
            str(fixture_corpus),
        ]
    )
    assert code == EXIT_UNAVAILABLE
    assert "NLI model not found: /nonexistent" in _err(capsys)


@pytest.mark.unit
def test_empty_vocabulary_is_an_error_not_no_hits(capsys, tmp_path):
    from wetqa.corpus.records import Chunk

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    chunk = Chunk("X_1", "DOC0001", "X", "2024-01-01", "Wet", "Artikel 1", 1, "de het een")
    (corpus / "chunks.jsonl").write_text(json.dumps(chunk.to_json()) + "\n")
    article = {"law_id": "X", "version_date": "2024-01-01", "law": "Wet", "article": "Artikel 1", "expired": False}
    (corpus / "articles.jsonl").write_text(json.dumps({**article, "text": "de het een"}) + "\n")
    (corpus / "manifest.json").write_text(json.dumps({"corpus_hash": "h", "counts": {}, "options": {"chunking": {}}}))
    assert (
        main(["index", "--corpus", str(corpus), "--retriever", "bm25s", "--out", str(tmp_path / "i"), "--no-progress"])
        == EXIT_USAGE
    )
    assert "no indexable words" in _err(capsys)


@pytest.mark.unit
def test_debug_shows_the_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "wetqa", "--debug", "search", "q", "--index", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode != 0 and "Traceback" in r.stderr


@pytest.mark.unit
def test_closed_pipe_is_quiet(fixture_index):
    # `wetqa search ... | head -c 1`: the reader leaves before the output is written.
    script = (
        f"{sys.executable} -m wetqa search 'wet' --index {fixture_index} -k 50 --output json | head -c 1 >/dev/null;"
        " echo ${PIPESTATUS[0]}"
    )
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.stdout.strip() in {"0", str(EXIT_PIPE)}


@pytest.mark.unit
def test_generate_against_a_dead_server_exits_non_zero(fixture_index, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    # A question the index finds articles for: one it finds none for is answered without the model.
    data.write_text('{"id": "1", "question": "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"}\n')
    argv = [
        "generate",
        "--dataset",
        str(data),
        "--index",
        str(fixture_index),
        "--generator",
        "openai",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--timeout",
        "2",
        "--max-retries",  # a refused connection is retried with back-off (7 s of this test's 14)
        "0",
        "--out",
        str(tmp_path / "run"),
    ]
    # Nothing answered because the model server cannot be reached: a missing component (README: 3).
    assert main(argv) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert "1 answer(s) failed" in err and "cannot reach the model server" in err
    assert main([*argv, "--allow-failures"]) == 0


@pytest.mark.unit
def test_ask_with_an_unreachable_model_server_exits_3(fixture_index, capsys):
    question = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
    argv = ["ask", question, "--index", str(fixture_index), "--generator", "openai", "--model", "m"]
    dead = ["--base-url", "http://127.0.0.1:9/v1", "--timeout", "2", "--max-retries", "0", "--min-confidence", "0"]
    assert main([*argv, *dead]) == 3
    err = capsys.readouterr().err
    assert "cannot reach the model server at http://127.0.0.1:9/v1" in err and len(err.strip().splitlines()) == 1


@pytest.mark.unit
def test_run_records_are_validated_at_the_boundary(tmp_path):
    from wetqa.evaluation.answers import load_run

    run = tmp_path / "run-1.jsonl"
    run.write_text(
        '{"id": "1", "answer": 5}\n{"id": "2", "answer": "ok", "cited_ids": [1, 2]}\n'
        '{"id": "3", "answer": "ok", "cited_ids": ["A_1"]}\n'
    )
    records, problems = load_run(run)
    assert [r["id"] for r in records] == ["3"]
    assert [(p["line"], p["problem"].split(":")[0]) for p in problems] == [(1, "answer"), (2, "cited_ids.0")]


@pytest.mark.unit
def test_eval_generation_exits_non_zero_when_answers_have_no_score(fixture_index, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "1", "question": "Wat is een wet?", "answer": "Een wet."}\n')
    run = tmp_path / "run"
    run.mkdir()
    (run / "run-1.jsonl").write_text('{"id": "1", "answer": "", "cited_ids": [], "error": "connection refused"}\n')
    argv = [
        "eval",
        "generation",
        "--runs",
        str(run),
        "--dataset",
        str(data),
        "--corpus",
        str(fixture_index),
        "--metrics",
        "rouge",
    ]
    assert main(argv) == EXIT_PARTIAL
    captured = capsys.readouterr()
    assert "1 answer(s) have no complete score" in captured.err and "0/1 (incomplete)" in captured.out
    assert main([*argv, "--allow-failures"]) == 0


@pytest.mark.unit
def test_the_servers_api_key_is_not_taken_for_the_generators():
    from wetqa.cli import build_parser
    from wetqa.generation.spec import PipelineSpec

    argv = ["serve", "--api-key", "server-key", "--generator", "openai", "--model", "m", "--base-url", "http://x/v1"]
    spec = PipelineSpec.from_cli_args(build_parser(argv).parse_args(argv))
    assert "server-key" not in json.dumps(spec.to_json())


@pytest.mark.integration
def test_ask_stream_prints_what_ask_prints_as_the_model_writes_it(fixture_index, capsys):
    from .serving import LiveServer, TokenUpstream

    fake = TokenUpstream(words=30)
    question = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
    with LiveServer(fake.app) as upstream:
        argv = ["ask", question, "--index", str(fixture_index), "--generator", "openai", "--model", "tiny"]
        argv += ["--base-url", upstream.url + "/v1"]
        assert main([*argv, "--stream"]) == 0
        streamed = capsys.readouterr().out
        assert main(argv) == 0
        whole = capsys.readouterr().out
    assert streamed == whole and "Bronnen:\n[1] Wet fictief gezag, Artikel 266" in whole
    assert fake.requests[0]["stream"] is True and not fake.requests[1].get("stream")
    assert main([*argv, "--stream", "--output", "json"]) == EXIT_USAGE
    assert "--stream prints text as it comes" in json.loads(capsys.readouterr().out)["error"]["message"]


@pytest.mark.unit
def test_arguments_that_are_not_utf8_are_bad_input(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "wetqa", "ask", b"Wanneer \xff\xfe vervalt het gezag?", "--index", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "not valid UTF-8" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    # With --output json the error is the JSON document on stdout, as every other error (it was text on stderr).
    argv = [sys.executable, "-m", "wetqa", "ask", b"Wanneer \xff vervalt het gezag?", "--output", "json"]
    j = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert j.returncode == EXIT_USAGE and "not valid UTF-8" in json.loads(j.stdout)["error"]["message"], j.stdout


@pytest.mark.unit
def test_progress_bars_are_drawn_only_on_a_terminal(tmp_path, monkeypatch):
    """Issue 40: with stderr redirected to a log file, the bars' carriage returns filled it."""
    import io

    from wetqa.console import progress_bar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_bar(range(3)).disable  # a log file, a pipe
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert not progress_bar(range(3)).disable and progress_bar(range(3), progress=False).disable
    monkeypatch.undo()
    corpus, index = tmp_path / "corpus", tmp_path / "index"
    for argv in (
        ["corpus", "build", "--source", str(FIXTURES / "bwb"), "--out", str(corpus)],
        ["index", "--corpus", str(corpus), "--out", str(index)],
    ):
        r = subprocess.run([sys.executable, "-m", "wetqa", *argv], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert "\r" not in r.stderr and "%|" not in r.stderr, (argv, r.stderr)


@pytest.mark.unit
def test_every_progress_bar_goes_through_the_one_helper():
    """A bar made with tqdm itself would draw into a log file again. The ranking's fitting and reading take
    their ``progress`` from their callers, which ask the same helper (console.shows_progress)."""
    import re

    callers = {"retrieval/fitting/ranking.py", "retrieval/articles/reader.py"}  # progress decided by callers
    found = []
    for folder in ("wetqa", "corpus", "retrieval", "generation", "evaluation", "serve"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "wetqa/console.py" or rel in callers:
                continue
            text = path.read_text(encoding="utf-8")
            found += [
                f"{rel}: {m.group(0)}"
                for m in re.finditer(
                    r"\btqdm\(|from tqdm import|disable_tqdm=not progress\b|show_progress_bar=progress\b", text
                )
            ]
    assert found == []


@pytest.mark.unit
def test_ctrl_c_while_the_parser_is_built_is_one_line(capsys, monkeypatch):
    """Bug: Ctrl-C in the first tenth of a second (building the parser imports every stage's flags) printed a
    Python traceback, exit 130 only by the interpreter's default."""
    import wetqa.cli

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(wetqa.cli, "build_parser", interrupted)
    try:
        code = main(["search", "gezag"])
    except KeyboardInterrupt:  # not caught: fail this test rather than stop the whole session
        pytest.fail("Ctrl-C while the parser was built escaped main()")
    assert code == 130
    assert capsys.readouterr().err == "wetqa: interrupted\n"


@pytest.mark.unit
def test_a_config_that_is_a_folder_is_named(capsys, tmp_path):
    """Bug: `--config FOLDER` said only "[Errno 21] Is a directory: 'FOLDER'"."""
    assert main(["ask", "Wat is gezag?", "--config", str(tmp_path)]) == 2
    assert f"--config {tmp_path} is a folder: name a TOML file" in capsys.readouterr().err
    assert main(["experiment", "--config", str(tmp_path)]) == 2
    assert f"--config {tmp_path} is a folder: name a TOML file" in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize("given", ["", " , "])
def test_an_empty_metric_list_is_refused(given):
    """Bug: `eval generation --metrics ""` scored nothing and exited 0."""
    from wetqa.evaluation.metrics import MetricError
    from wetqa.evaluation.scoring import parse_metrics

    with pytest.raises(MetricError, match="--metrics names no metric"):
        parse_metrics(given)
    assert parse_metrics("rouge, meteor") == ("rouge", "meteor")


@pytest.mark.unit
def test_sigterm_is_an_interruption_that_cleans_up(tmp_path):
    """Bug: SIGTERM (what `kill`, a container's stop and CI send) ended wetqa without its clean-up: no message,
    and an index build's temporary folder stayed beside --out until the next run removed it. (In a process
    of its own: without the fix, SIGTERM would end the test session itself.)"""
    script = f"""
import os, signal, sys, time
from pathlib import Path
import wetqa.cli

def terminated_while_working(argv=None):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal arrives here
    finally:
        Path({str(tmp_path / "cleaned")!r}).touch()  # what a build's `finally` and context managers do
    raise AssertionError("SIGTERM did not stop the work")

before = signal.getsignal(signal.SIGTERM)
wetqa.cli.build_parser = terminated_while_working
code = wetqa.cli.main(["index"])
assert signal.getsignal(signal.SIGTERM) is before, "the process's own handler was not given back"
sys.exit(code)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 143 and r.stderr == "wetqa: terminated\n", (r.returncode, r.stderr)
    assert (tmp_path / "cleaned").exists()


@pytest.mark.unit
def test_a_hub_model_where_the_hub_cannot_be_reached_is_one_line_and_exit_3_at_once(bm25s_index, tmp_path):
    # Without HF_HUB_OFFLINE the hub client spent about a minute in retries before its error (exit 2). A hub
    # that refuses connections (a closed port on loopback) stands for one that cannot be reached.
    import os
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: connections are refused
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") and k.lower() not in proxies}  # fmt: skip
    env |= {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf")}
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "wetqa", "search", "huur", "--index", str(bm25s_index),
         "--rerank", "cross-encoder:org/not-a-model"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "org/not-a-model is not in the Hugging Face cache" in lines[0], done.stderr
    assert "the hub (127.0.0.1) cannot be reached" in lines[0]
    assert time.monotonic() - t0 < 60


@pytest.mark.unit
def test_a_hub_model_is_checked_against_the_hub_only_when_no_cache_holds_it(tmp_path, monkeypatch):
    import socket

    from huggingface_hub import constants

    from wetqa.console import UnavailableError, check_hub_model

    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: connections are refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(UnavailableError, match="org/model is not in the Hugging Face cache"):
        check_hub_model("org/model", "re-ranker")
    (tmp_path / "hub" / "models--org--model").mkdir(parents=True)
    check_hub_model("org/model", "re-ranker")  # in the hub's cache
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "st"))
    (tmp_path / "st" / "org_other").mkdir(parents=True)
    check_hub_model("org/other", "re-ranker")  # in sentence-transformers' own cache
    # A bare name is a hub id too (the hub's first models have no organisation: "gpt2"): a re-ranker named
    # "notamodel" spent the hub client's minute of retries before its error (exit 2).
    with pytest.raises(UnavailableError, match="re-ranker notamodel is not in the Hugging Face cache"):
        check_hub_model("notamodel", "re-ranker")
    # sentence-transformers loads a bare name from its organisation ("all-MiniLM-L6-v2" is
    # sentence-transformers/all-MiniLM-L6-v2, a CrossEncoder's "x" cross-encoder/x): cached there, it is here.
    (tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2").mkdir(parents=True)
    check_hub_model("all-MiniLM-L6-v2", "embedding model")
    (tmp_path / "hub" / "models--cross-encoder--ms-marco-MiniLM-L6-v2").mkdir(parents=True)
    check_hub_model("ms-marco-MiniLM-L6-v2", "re-ranker")
    for ref in ("./org/x", "a/b/c", "~/x", "not a name"):  # not a hub id: the loader's (or a path check's) to judge
        check_hub_model(ref, "dense model")
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    check_hub_model("org/third", "re-ranker")  # through a proxy: the client's to decide
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    check_hub_model("org/third", "re-ranker")  # offline by choice: the client fails at once by itself
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def timeout(*a, **k):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", timeout)
    check_hub_model("org/third", "re-ranker")  # a slow network: the client's timeouts and retries decide


@pytest.mark.unit
def test_a_generator_that_will_not_run_is_not_checked_against_the_hub(monkeypatch):
    # Settings are read before a grid filters its generators: a hub id is checked where it loads, not here.
    from huggingface_hub import constants

    from wetqa.generation.presets import resolve_generator

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert resolve_generator("transformers", model="Qwen/not-cached-here").model == "Qwen/not-cached-here"


SECOND_CTRL_C = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
import argparse
import wetqa.cli as cli

def work(args):
    ThreadPoolExecutor(1).submit(time.sleep, 60)  # a worker busy (a model call) when Ctrl-C comes
    raise KeyboardInterrupt

class Parser:
    def parse_args(self, words):
        return argparse.Namespace(func=work, debug=False, output="text")

cli.build_parser = lambda words: Parser()
cli.run(["anything"])
"""


@pytest.mark.integration
def test_a_second_ctrl_c_while_wetqa_winds_down_ends_it_at_once_and_quietly(tmp_path):
    # A defect hunt: Ctrl-C during `generate`, then another (or `timeout -s INT`, which signals the process
    # and its group) while Python joined the worker threads at exit: a traceback from threading's exit hook,
    # then "terminate called without an active exception" and exit 134 from a native thread left running.
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", SECOND_CTRL_C], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first == "wetqa: interrupted\n", first
    time.sleep(0.3)  # winding down: joining the busy worker
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=30)
    rest = proc.stderr.read()
    assert code == EXIT_INTERRUPTED and rest == "", (code, rest)
    assert time.monotonic() - t0 < 10
