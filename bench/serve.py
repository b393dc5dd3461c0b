"""Serving throughput on loopback: the extractive preset against a FastAPI hello-world.

    python bench/serve.py [INDEX_DIR] [--soak 60]

One server process holds both endpoints (the wetqa app plus ``GET /hello``);
this process loads it with 1, 8 and 64 concurrent clients (httpx, asyncio)
for a few seconds each, prints requests/s, p50/p95 latency and failures,
then runs a soak at 8 clients and samples the server's memory (RSS).
Goal: wetqa >= 50% of the hello-world rate; 0 failed requests; flat memory.
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
import sys, uvicorn
from wetqa.serve import create_app, make_served_pipeline
app = create_app([make_served_pipeline([sys.argv[1]], "extractive").load()], max_concurrency=256)
@app.get("/hello")
async def hello():
    return {"hello": "world"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def load(url: str, concurrency: int, seconds: float, chat: bool) -> dict:
    latencies: list[float] = []
    failures = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker(i: int) -> None:
            nonlocal failures
            n = i
            while time.perf_counter() < stop:
                t = time.perf_counter()
                try:
                    if chat:
                        r = await client.post(
                            "/v1/chat/completions",
                            json={
                                "model": MODEL,
                                "messages": [{"role": "user", "content": QUESTIONS[n % len(QUESTIONS)]}],
                            },
                        )
                    else:
                        r = await client.get("/hello")
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - t)
                failures += not ok
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
        "failed": failures,
    }


MODEL = ""


def main() -> None:
    global MODEL
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="?")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--soak", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index
        if not index:
            from wetqa.corpus import BuildOptions, build_corpus
            from wetqa.retrieval import build_index

            build_corpus([SHARED / "bwb"], Path(tmp) / "corpus", BuildOptions(), progress=False)
            build_index(Path(tmp) / "corpus", "bm25s", Path(tmp) / "idx", progress=False)
            index = str(Path(tmp) / "idx")
        port = 8791
        proc = subprocess.Popen([sys.executable, "-c", SERVER, index, str(port), str(ROOT)])
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    MODEL = httpx.get(url + "/v1/models").json()["data"][0]["id"]
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            asyncio.run(load(url, 4, 1.0, True))  # warm-up
            print(f"server pid {proc.pid}, model {MODEL}, {os.cpu_count()} cores shared by server and clients")
            print(f"{'clients':>7} {'endpoint':>10} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'failed':>6}")
            for c in (1, 8, 64):
                hello = asyncio.run(load(url, c, args.seconds, False))
                chat = asyncio.run(load(url, c, args.seconds, True))
                for name, r in (("hello", hello), ("wetqa", chat)):
                    print(f"{c:7d} {name:>10} {r['rps']:8.1f} {r['p50']:8.1f} {r['p95']:8.1f} {r['failed']:6d}")
                print(f"{'':7} {'ratio':>10} {chat['rps'] / hello['rps']:8.1%} of hello-world (goal >= 50%)")
            if args.soak > 0:
                samples = [rss_mb(proc.pid)]
                failed = total = 0
                end = time.time() + args.soak
                while time.time() < end:
                    r = asyncio.run(load(url, 8, min(10.0, end - time.time()), True))
                    failed += r["failed"]
                    total += r["n"]
                    samples.append(rss_mb(proc.pid))
                print(
                    f"soak {args.soak:.0f} s at 8 clients: {total} requests, {failed} failed; server RSS MB "
                    + " -> ".join(f"{s:.0f}" for s in samples)
                )
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
