"""One client cannot stall the rest: cached clients' latency with and without a rare-word attacker, and
ordinary chat clients' latency beside clients of long questions.

    python bench/fairness.py [--index data/index] [--clients 8] [--seconds 15] [--smoke]
    python bench/fairness.py --long [--index data/index] [--reader MODEL] [--clients 4] [--memory-questions 500]

A `wetqa serve` process over an index with dense re-scoring (the main job's ``data/index``), with a
passage-vector cache of its own (a fresh ``WETQA_CACHE``). Each of ``--clients`` clients asks one dev
question again and again with ``POST /v1/search`` (k 10; its passages are encoded on its first
request, cached after); one more client, the attacker, asks six random words each found in 3-20
chunks with k 100, so nearly every request of it brings passages nobody has encoded. Printed: the
cached clients' requests/s, p50 and p95 without the attacker, then with it, their ratio, and the
attacker's own figures; ``uptime``'s load before each round (the CPU is shared).

``--long`` (issue 40): ``--clients`` (4) ordinary chat clients, each asking its dev question again and again
(``POST /v1/chat/completions``, the extractive answer), alone, then beside one and two clients that ask new
questions of 2,000 characters of rare words as fast as they are answered (hundreds of tokens to encode, new
candidates to read). Printed: the ordinary clients' p50 and p95 in each round and their ratio to alone (goal
<= 2x), then the server's resident memory before and after ``--memory-questions`` long questions one after
the other (flat: what grows is caches with a bound). The reader is the one given (default: the fetched
EmbeddingGemma, when it is here).

``--abandon`` (issue 55): the slot-holding case. One client (127.0.0.1) sends 16 new questions of 2,000
characters at once to a server at its default ``--max-concurrency`` and disconnects 0.8 s later; an ordinary
client (another address, 127.0.0.2) then asks its dev question, again every 0.1 s while it is refused. Printed:
the ordinary client's p50 alone, its first answer after the burst (and the 429s it met on the way), and their
ratio (goal <= 2x).

``--smoke``: 2-second rounds and 4 clients, to see that the benchmark runs; without ``--index``, over a
tiny index of the first dev questions' laws re-scored by a tiny random model, built in a temporary folder.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.serving import fairness_round, free_port, long_question, long_question_round, rare_words  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def start_server(
    index: str, port: int, cache: str, extra: tuple[str, ...] = (), concurrency: int | None = 64
) -> subprocess.Popen:
    """``wetqa serve`` with a cache of its own, once it answers; ``concurrency`` None: the server's default."""
    env = {**os.environ, "WETQA_CACHE": cache}
    argv = [sys.executable, "-m", "wetqa", "serve", "--index", index, "--port", str(port)]
    argv += ["--max-concurrency", str(concurrency)] if concurrency is not None else []
    argv += list(extra)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}") from None
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def row(name: str, r: dict) -> str:
    extra = f"  {r['failures']}" if r["failures"] else ""
    return (
        f"{name:>26} {r['rps']:8.1f} {1000 * r['p50']:9.0f} {1000 * r['p95']:9.0f} {r['failed']:7d} {r['n']:7d}{extra}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", help="an index with dense re-scoring (default data/index; a tiny one with --smoke)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--smoke", action="store_true", help="2-second rounds, 4 clients")
    ap.add_argument("--long", action="store_true", help="ordinary chat clients beside clients of long questions")
    ap.add_argument("--reader", help="the reader of the --long server (default: the fetched EmbeddingGemma if here)")
    ap.add_argument("--memory-questions", type=int, default=500, help="long questions of the --long memory check")
    ap.add_argument("--abandon", action="store_true", help="a burst of long questions abandoned, then an ordinary one")
    args = ap.parse_args()
    if args.long and args.clients == 8:
        args.clients = 4
    if args.smoke:
        args.clients, args.seconds, args.memory_questions = 4, 2.0, 5
        if args.index is None:
            return smoke(args)
    args.index = args.index or str(ROOT / "data" / "index")
    if args.abandon:
        return run_abandon(args)
    (run_long if args.long else run)(args)


def smoke(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import _smoke

    _smoke.announce("a tiny index re-scored by a tiny random model")
    with tempfile.TemporaryDirectory(prefix="wetqa-fairness-smoke-") as tmp:
        args.index = str(_smoke.index(Path(tmp), rescore=True))
        (run_long if args.long else run)(args)


def run(args: argparse.Namespace) -> None:
    from wetqa.retrieval import read_index_meta
    from wetqa.retrieval.engines.store import STORE, ChunkStore

    if not (read_index_meta(args.index).get("rescore") or {}).get("model"):
        raise SystemExit(f"{args.index} has no dense re-scoring: build one with `wetqa index --rescore MODEL`")
    questions = [json.loads(line)["question"] for line in DEV.read_text(encoding="utf-8").splitlines() if line]
    questions = questions[: args.clients]
    words = rare_words(ChunkStore(Path(args.index) / STORE))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wetqa-fairness-") as cache:
        proc = start_server(args.index, port, cache)
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.perf_counter()
            for q in questions:  # each cached client's passages encoded once, before anything is timed
                httpx.post(url + "/v1/search", json={"query": q, "k": 10}, timeout=600).raise_for_status()
            print(
                f"{args.index}: {len(questions)} cached clients (passages encoded in "
                f"{time.perf_counter() - t0:.1f} s), {len(words)} attack words; {os.cpu_count()} cores shared by "
                f"server and clients; rounds of {args.seconds:g} s"
            )
            print(f"{'':>26} {'req/s':>8} {'p50 ms':>9} {'p95 ms':>9} {'failed':>7} {'total':>7}")
            load_before = load_average()
            alone = asyncio.run(fairness_round(url, questions, args.seconds))
            print(row("cached, alone", alone["cached"]) + f"   (load {load_before})")
            load_before = load_average()
            attacked = asyncio.run(fairness_round(url, questions, args.seconds, words))
            print(row("cached, attacker running", attacked["cached"]) + f"   (load {load_before})")
            print(row("the attacker (k 100)", attacked["attacker"]))
            ratio = attacked["cached"]["p50"] / alone["cached"]["p50"]
            print(f"cached clients' p50 with the attacker / without: {ratio:.2f}x (goal <= 2x)")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_long(args: argparse.Namespace) -> None:
    import random

    from wetqa.retrieval.articles.reader import DEFAULT_READER, reader_present
    from wetqa.retrieval.engines.store import STORE, ChunkStore

    questions = [json.loads(line)["question"] for line in DEV.read_text(encoding="utf-8").splitlines() if line]
    questions = questions[: args.clients]
    words = rare_words(ChunkStore(Path(args.index) / STORE))
    reader = args.reader or (DEFAULT_READER if reader_present(DEFAULT_READER) else "none")
    extra = ("--reader", str(_models_path(reader)))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wetqa-fairness-long-") as cache:
        proc = start_server(args.index, port, cache, extra)
        url = f"http://127.0.0.1:{port}"
        try:
            for q in questions:  # each ordinary client's candidates read once, before anything is timed
                body = {"model": httpx.get(url + "/v1/models").json()["data"][0]["id"],
                        "messages": [{"role": "user", "content": q}]}  # fmt: skip
                httpx.post(url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
            print(f"{args.index}: {len(questions)} ordinary chat clients, reader {reader}; {os.cpu_count()} cores "
                  f"shared by server and clients; rounds of {args.seconds:g} s")  # fmt: skip
            print(f"{'':>26} {'req/s':>8} {'p50 ms':>9} {'p95 ms':>9} {'failed':>7} {'total':>7}")
            rounds = {}
            for n in (0, 1, 2):
                load_before = load_average()
                r = asyncio.run(long_question_round(url, questions, args.seconds, words, n))
                rounds[n] = r
                label = "ordinary, alone" if n == 0 else f"ordinary, {n} long client(s)"
                print(row(label, r["ordinary"]) + f"   (load {load_before})")
                if n:
                    print(row(f"the {n} long client(s)", r["long"]))
            for n in (1, 2):
                ratio = rounds[n]["ordinary"]["p50"] / rounds[0]["ordinary"]["p50"]
                print(f"ordinary p50 with {n} long client(s) / alone: {ratio:.2f}x (goal <= 2x)")
            rng = random.Random(7)
            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
            before = rss_mb(proc.pid)
            for i in range(args.memory_questions):
                body = {"model": model, "messages": [{"role": "user", "content": long_question(words, rng)}]}
                httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
                if i + 1 == args.memory_questions // 2:
                    middle = rss_mb(proc.pid)
            after = rss_mb(proc.pid)
            half = middle if args.memory_questions > 1 else before
            print(f"server RSS before / after {args.memory_questions // 2} / after {args.memory_questions} long "
                  f"questions: {before:.0f} / {half:.0f} / {after:.0f} MB")  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def run_abandon(args: argparse.Namespace) -> None:
    import random
    import socket

    from wetqa.retrieval.articles.reader import DEFAULT_READER, reader_present
    from wetqa.retrieval.engines.store import STORE, ChunkStore

    question = json.loads(DEV.read_text(encoding="utf-8").splitlines()[0])["question"]
    words = rare_words(ChunkStore(Path(args.index) / STORE))
    reader = args.reader or (DEFAULT_READER if reader_present(DEFAULT_READER) else "none")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wetqa-fairness-abandon-") as cache:
        # The server's default --max-concurrency: the case is what a user who sets nothing gets.
        proc = start_server(args.index, port, cache, ("--reader", str(_models_path(reader))), concurrency=None)
        url = f"http://127.0.0.1:{port}"
        ordinary = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=600)
        try:
            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]

            def ask(client: httpx.Client, text: str) -> httpx.Response:
                return client.post(url + "/v1/chat/completions",
                                   json={"model": model, "messages": [{"role": "user", "content": text}]})  # fmt: skip

            ask(ordinary, question).raise_for_status()  # its candidates read once, before anything is timed
            alone = []
            for _ in range(10):
                t0 = time.perf_counter()
                ask(ordinary, question).raise_for_status()
                alone.append(time.perf_counter() - t0)
            p50 = statistics.median(alone)
            rng = random.Random(11)
            socks = []
            for _ in range(16):  # the burst: raw sockets, closed without reading
                body = json.dumps(
                    {"model": model, "messages": [{"role": "user", "content": long_question(words, rng)}]}
                ).encode()
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
                socks.append(sock)
            time.sleep(0.8)
            for sock in socks:
                sock.close()
            t0 = time.perf_counter()
            refused = 0
            while True:
                r = ask(ordinary, question)
                if r.status_code != 429:
                    break
                refused += 1
                time.sleep(0.1)
            first = time.perf_counter() - t0
            print(f"{args.index}: reader {reader}; 16 questions of 2,000 characters sent by one client and abandoned "
                  f"after 0.8 s; {os.cpu_count()} cores shared by server and clients (load {load_average()})")  # fmt: skip
            print(f"ordinary client p50 alone {1000 * p50:.0f} ms; its first answer after the burst {1000 * first:.0f} ms "
                  f"({refused} refusals on the way, status {r.status_code}); ratio {first / p50:.2f}x (goal <= 2x)")  # fmt: skip
        finally:
            ordinary.close()
            proc.terminate()
            proc.wait(timeout=30)


def _models_path(reader: str) -> str:
    """The reader as the server (with a cache of its own) finds it: a fetched model by its folder."""
    from wetqa.retrieval.articles.reader import resolve_reader

    return resolve_reader(reader) if reader != "none" else "none"


if __name__ == "__main__":
    main()
