"""Serving on loopback: throughput, a Pyserini index under load, streaming latency, memory under attack.

    python bench/serve.py [--index DIR] [--seconds 6] [--soak 60] [--only hello,pyserini,stream,uploads] [--smoke]
    python bench/serve.py --only concurrency [--served-index data/index] [--seconds 6]

Each section starts its own server process and loads it from this one (httpx, asyncio):

- hello: the extractive pipeline over bm25s against a FastAPI hello-world in the same server, at
  1, 8 and 64 clients: requests/s, p50/p95 latency, failures, then a soak at 8 clients with the
  server's memory (RSS) sampled. Goal: >= 50% of hello-world, 0 failed, flat memory.
- pyserini: the same over a Pyserini (Lucene) index at 8 and 64 clients, 30 s at 64. Goal: 0 errors
  (the JVM was called from several threads at once before).
- stream: an OpenAI-compatible upstream that emits a token every 20 ms, served through wetqa's
  openai backend with ``stream: true``: time to the first content token against the total time,
  at 1 and 8 clients. The reference is the upstream's own first token and total, measured directly.
- uploads: 4 parallel chunked uploads of 200 MB each: all refused (413), RSS before and after.
- concurrency (issue 55): ``wetqa serve`` over the main job's index (the default pipeline, the reader on) at
  ``--max-concurrency`` 2, 4, 8 and 16, each loaded by 1, 4, 8, 16 and 32 chat clients asking the dev questions
  (their candidates read before anything is timed; after a 429 a client waits its Retry-After, 1 s): answers/s,
  p50 and p95 of the answered, and the 429s. The default ``--max-concurrency`` is the setting with the most
  answers/s over the client counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
SHARED = ROOT.parent / "shared" / "data"
# The 51 dev questions, cycled: distinct questions, so no answer is served from a cache.
QUESTIONS = [
    json.loads(line)["question"]
    for line in (SHARED / "legalqa" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]

SERVER = r"""
import json, sys, uvicorn
from wetqa.generation import PipelineSpec
from wetqa.serve import ServedPipeline, ServerConfig, create_app, served_pipeline_name
from wetqa.serve.server import server_config
spec = json.loads(sys.argv[1])
values = {"index": [spec["index"]], "generator": spec.get("generator", "extractive"), **spec.get("overrides", {})}
pipeline = PipelineSpec.from_values(values)  # what `wetqa serve --index ... --generator ...` builds
app = create_app([ServedPipeline(served_pipeline_name(pipeline), pipeline).load()], ServerConfig(max_concurrency=256))
@app.get("/hello")
async def hello():
    return {"hello": "world"}
config = server_config(app, port=spec["port"])
if spec.get("plain"):  # uvicorn's own h11 protocol, without wetqa's header deadline: the reference
    config = uvicorn.Config(app, host="127.0.0.1", port=spec["port"], http="h11", log_level="warning")
uvicorn.Server(config).run()
"""

UPSTREAM = r"""
import sys, uvicorn
sys.path.insert(0, sys.argv[2])
from tests.serving import TokenUpstream
app = TokenUpstream(words=int(sys.argv[3]), delay=float(sys.argv[4])).app
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start(script: str, *argv: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, *argv], cwd=ROOT)
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs-none", timeout=1)
            return proc
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise SystemExit(f"server on port {port} exited with {proc.returncode}") from None
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=20)


def model_of(url: str) -> str:
    return httpx.get(url + "/v1/models").json()["data"][0]["id"]


async def load(url: str, model: str, concurrency: int, seconds: float, chat: bool) -> dict:
    latencies: list[float] = []
    failures: dict[str, int] = {}
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker(i: int) -> None:
            n = i
            while time.perf_counter() < stop_at:
                t = time.perf_counter()
                try:
                    if chat:
                        question = QUESTIONS[n % len(QUESTIONS)]
                        r = await client.post(
                            "/v1/chat/completions",
                            json={"model": model, "messages": [{"role": "user", "content": question}]},
                        )
                    else:
                        r = await client.get("/hello")
                    problem = None if r.status_code == 200 else f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    problem = type(exc).__name__
                latencies.append(time.perf_counter() - t)
                if problem:
                    failures[problem] = failures.get(problem, 0) + 1
                n += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50": 1000 * statistics.median(latencies),
        "p95": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "n": len(latencies),
        "failed": sum(failures.values()),
        "failures": failures,
    }


def row(clients: int, name: str, r: dict) -> str:
    extra = f"  {r['failures']}" if r["failures"] else ""
    return (
        f"{clients:7d} {name:>10} {r['rps']:8.1f} {r['p50']:8.1f} {r['p95']:8.1f} {r['failed']:6d} {r['n']:7d}{extra}"
    )


HEADER = f"{'clients':>7} {'endpoint':>10} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'failed':>6} {'total':>7}"


def section_hello(index: str, seconds: float, soak: float, warm: float = 1.0) -> None:
    port = 8791
    proc = start(SERVER, json.dumps({"index": index, "port": port}), port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        model = model_of(url)
        asyncio.run(load(url, model, 4, warm, True))  # warm-up
        print(f"\n== hello: {model} (server pid {proc.pid}, {os.cpu_count()} cores shared by server and clients)")
        print(HEADER)
        for c in (1, 8, 64):
            hello = asyncio.run(load(url, model, c, seconds, False))
            chat = asyncio.run(load(url, model, c, seconds, True))
            print(row(c, "hello", hello))
            print(row(c, "wetqa", chat))
            print(f"{'':7} {'ratio':>10} {chat['rps'] / hello['rps']:8.1%} of hello-world (goal >= 50%)")
        plain_port = 8796
        plain = start(SERVER, json.dumps({"index": index, "port": plain_port, "plain": True}), port=plain_port)
        try:
            for c in (1, 8):
                ours = asyncio.run(load(url, model, c, seconds, False))
                theirs = asyncio.run(load(f"http://127.0.0.1:{plain_port}", model, c, seconds, False))
                print(
                    f"{c:7d} hello-world with the header deadline: {ours['rps']:.0f} req/s, uvicorn's plain h11 "
                    f"{theirs['rps']:.0f} ({ours['rps'] / theirs['rps']:.1%})"
                )
        finally:
            stop(plain)
        if soak > 0:
            samples = [rss_mb(proc.pid)]
            failed = total = 0
            end = time.time() + soak
            while time.time() < end:
                r = asyncio.run(load(url, model, 8, min(10.0, end - time.time()), True))
                failed += r["failed"]
                total += r["n"]
                samples.append(rss_mb(proc.pid))
            print(
                f"soak {soak:.0f} s at 8 clients: {total} requests, {failed} failed; server RSS MB "
                + " -> ".join(f"{s:.0f}" for s in samples)
            )
    finally:
        stop(proc)


async def answered_load(url: str, model: str, clients: int, seconds: float) -> dict:
    """``clients`` chat clients for ``seconds``, each waiting ``Retry-After`` (1 s) after a 429 as the openai
    clients do: answers/s, p50 and p95 (ms) of the answered, and how many 429s."""
    latencies: list[float] = []
    refused = 0
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def worker(i: int) -> None:
            nonlocal refused
            n = i
            while time.perf_counter() < stop_at:
                t = time.perf_counter()
                r = await client.post("/v1/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": QUESTIONS[n % len(QUESTIONS)]}]})  # fmt: skip
                if r.status_code == 429:
                    refused += 1
                    await asyncio.sleep(1.0)
                    continue
                latencies.append(time.perf_counter() - t)
                n += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        elapsed = time.perf_counter() - t0
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "refused": refused,
            "p50": 1000 * statistics.median(latencies) if latencies else float("nan"),
            "p95": 1000 * latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan")}  # fmt: skip


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def section_concurrency(index: str, seconds: float, settings=(2, 4, 8, 16), clients=(1, 4, 8, 16, 32)) -> None:
    print(f"\n== concurrency: wetqa serve --index {index} ({os.cpu_count()} cores shared by server and clients)")
    print(f"{'max-conc':>8} {'clients':>7} {'answers/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'429':>6}")
    totals = {}
    for setting in settings:
        port = free_port()
        argv = [sys.executable, "-m", "wetqa", "serve", "--index", index, "--port", str(port),
                "--max-concurrency", str(setting)]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(1200):
                try:
                    httpx.get(url + "/health", timeout=1)
                    break
                except httpx.HTTPError:
                    if proc.poll() is not None:
                        raise SystemExit(f"the server exited with {proc.returncode}") from None
                    time.sleep(0.1)
            model = model_of(url)
            for q in QUESTIONS:  # every question's candidates read once: what is timed is serving, not reading
                httpx.post(url + "/v1/chat/completions", timeout=600,
                           json={"model": model, "messages": [{"role": "user", "content": q}]})  # fmt: skip
            totals[setting] = 0.0
            for c in clients:
                r = asyncio.run(answered_load(url, model, c, seconds))
                totals[setting] += r["rps"]
                print(f"{setting:8d} {c:7d} {r['rps']:9.1f} {r['p50']:8.0f} {r['p95']:8.0f} {r['refused']:6d}")
        finally:
            stop(proc)
    best = max(totals, key=lambda k: totals[k])
    print("answers/s summed over the client counts: " + ", ".join(f"{k}: {v:.1f}" for k, v in totals.items())
          + f"; most at --max-concurrency {best}")  # fmt: skip


def section_pyserini(corpus: Path, work: Path, seconds: float, long: float = 30.0) -> None:
    from wetqa.retrieval import build_index

    index = work / "pyserini"
    t0 = time.perf_counter()
    build_index(corpus, "bm25", index, progress=False)
    print(f"\n== pyserini: Lucene index of the corpus built in {time.perf_counter() - t0:.1f} s")
    port = 8792
    proc = start(SERVER, json.dumps({"index": str(index), "port": port}), port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        model = model_of(url)
        asyncio.run(load(url, model, 4, min(1.0, long), True))  # warm-up (the JVM's first searches are slow)
        print(HEADER)
        for c, s in ((8, seconds), (64, long)):
            r = asyncio.run(load(url, model, c, s, True))
            print(row(c, "wetqa", r) + f"   ({s:.0f} s; goal: 0 failed)")
        print(f"server RSS {rss_mb(proc.pid):.0f} MB")
    finally:
        stop(proc)


async def stream_once(client: httpx.AsyncClient, path: str, body: dict) -> tuple[float, float, int]:
    """(seconds to the first content token, seconds to the end, content events) of one streamed answer."""
    t0 = time.perf_counter()
    first = None
    pieces = 0
    async with client.stream("POST", path, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                pieces += 1
                if first is None:
                    first = time.perf_counter() - t0
    return (first if first is not None else float("nan")), time.perf_counter() - t0, pieces


async def stream_load(url: str, path: str, model: str, clients: int, rounds: int) -> list[tuple[float, float, int]]:
    out: list[tuple[float, float, int]] = []
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def worker(i: int) -> None:
            for n in range(rounds):
                question = QUESTIONS[(i * rounds + n) % len(QUESTIONS)]
                body = {"model": model, "stream": True, "messages": [{"role": "user", "content": question}]}
                out.append(await stream_once(client, path, body))

        await asyncio.gather(*(worker(i) for i in range(clients)))
    return out


def section_stream(index: str, words: int = 150, rounds: int = 3) -> None:
    up_port, port = 8793, 8794
    delay = 0.02
    upstream = start(UPSTREAM, str(up_port), str(ROOT), str(words), str(delay), port=up_port)
    spec = {
        "index": index,
        "port": port,
        "generator": "openai",
        "overrides": {"model": "tiny-upstream", "base_url": f"http://127.0.0.1:{up_port}/v1", "timeout": 120.0},
    }
    proc = start(SERVER, json.dumps(spec), port=port)
    url, up_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{up_port}"
    try:
        model = model_of(url)
        print(f"\n== stream: an upstream emitting a token every {1000 * delay:.0f} ms (~{words + 10} tokens)")
        print(f"{'clients':>7} {'path':>18} {'first token ms':>15} {'total ms':>9} {'first/total':>11} {'events':>7}")
        for clients in (1, 8):
            for name, target, path, m in (
                ("upstream directly", up_url, "/v1/chat/completions", "tiny-upstream"),
                ("through wetqa", url, "/v1/chat/completions", model),
            ):
                runs = asyncio.run(stream_load(target, path, m, clients, rounds=rounds if clients == 1 else rounds - 1))
                first = statistics.median(r[0] for r in runs)
                total = statistics.median(r[1] for r in runs)
                events = statistics.median(r[2] for r in runs)
                print(
                    f"{clients:7d} {name:>18} {1000 * first:15.0f} {1000 * total:9.0f} {first / total:11.1%} {events:7.0f}"
                )
    finally:
        stop(proc)
        stop(upstream)


async def oversized_upload(url: str, megabytes: int) -> str:
    async def body():
        block = b"x" * (1 << 20)
        for _ in range(megabytes):
            yield block

    async with httpx.AsyncClient(timeout=120) as client:
        try:
            r = await client.post(
                url + "/v1/chat/completions", content=body(), headers={"Content-Type": "application/json"}
            )
            return f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:  # the server may close the connection after its 413
            return type(exc).__name__


def section_uploads(index: str, megabytes: int = 200) -> None:
    port = 8795
    proc = start(SERVER, json.dumps({"index": index, "port": port}), port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        before = rss_mb(proc.pid)
        peak = before

        async def run() -> list[str]:
            nonlocal peak
            tasks = [asyncio.create_task(oversized_upload(url, megabytes)) for _ in range(4)]
            while not all(t.done() for t in tasks):
                peak = max(peak, rss_mb(proc.pid))
                await asyncio.sleep(0.05)
            return [t.result() for t in tasks]

        t0 = time.perf_counter()
        results = asyncio.run(run())
        after = rss_mb(proc.pid)
        ok = httpx.post(
            url + "/v1/chat/completions",
            json={"model": model_of(url), "messages": [{"role": "user", "content": QUESTIONS[0]}]},
        ).status_code
        print(
            f"\n== uploads: 4 parallel chunked {megabytes} MB bodies -> {results} in {time.perf_counter() - t0:.1f} s; "
            f"server RSS {before:.0f} MB before, peak {peak:.0f}, after {after:.0f} "
            f"({peak / before:.2f}x); next request HTTP {ok}"
        )
    finally:
        stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", help="a bm25s index to serve (default: built here from ../shared/data/bwb)")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--soak", type=float, default=60.0)
    ap.add_argument("--only", default="hello,pyserini,stream,uploads")
    ap.add_argument("--served-index", default=str(ROOT / "data" / "index"), help="the concurrency section's index")
    ap.add_argument("--smoke", action="store_true", help="every section over two laws, for a fraction of a second")
    args = ap.parse_args()
    sections = set(args.only.split(","))
    if sections == {"concurrency"}:
        return section_concurrency(args.served_index, args.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        from wetqa.corpus import BuildOptions, build_corpus

        laws = SHARED / "bwb"
        if args.smoke:
            import _smoke

            _smoke.announce("every section, two laws, short loads")
            laws, args.seconds, args.soak = _smoke.laws(work / "bwb"), 0.3, 0.5
        build_corpus([laws], corpus, BuildOptions(), progress=False)
        index = args.index
        if not index:
            from wetqa.retrieval import build_index

            build_index(corpus, "bm25s", work / "idx", progress=False)
            index = str(work / "idx")
        if "hello" in sections:
            section_hello(index, args.seconds, args.soak, warm=min(1.0, args.seconds))
        if "pyserini" in sections:
            section_pyserini(corpus, work, args.seconds, long=args.seconds if args.smoke else 30.0)
        if "stream" in sections:
            section_stream(index, *((20, 2) if args.smoke else ()))
        if "uploads" in sections:
            section_uploads(index, 5 if args.smoke else 200)
        if "concurrency" in sections:
            section_concurrency(args.served_index, args.seconds)


if __name__ == "__main__":
    main()
