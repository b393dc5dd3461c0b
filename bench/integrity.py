"""What the content check of an index costs when it is opened (retrieval/integrity.py).

    python bench/integrity.py [INDEX] [--rounds 7] [--smoke]

Per round, in one process and on the same index (default data/index), median milliseconds of:

- opening the index without any file check (the check replaced by nothing): the reference;
- the check as an open runs it once the large files' verification is remembered (the usual case):
  sizes, the content hash of every file up to 1 MiB, and a look at each larger file;
- the check at the first open after the index was copied or changed (every file hashed, remembered);
- `wetqa index --verify` (every file hashed, nothing remembered used).

The page cache is warm (the index was just read); a cold disk adds the time to read the bytes hashed.
``--smoke``: two rounds on a tiny index of the first dev questions' laws built in a temporary folder
(the figures mean nothing; tests/test_bench.py runs it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("index", nargs="?", help="an index (default data/index; a tiny one with --smoke)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="two rounds on a tiny index built here (seconds)")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    args.index = args.index or str(ROOT / "data" / "index")
    run(args)


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    _smoke.announce()
    args.rounds = 2
    if args.index:
        return run(args)
    with tempfile.TemporaryDirectory(prefix="wetqa-integrity-smoke-") as tmp:
        args.index = str(_smoke.index(Path(tmp)))
        run(args)


def run(args: argparse.Namespace) -> None:
    from wetqa.retrieval import open_index
    from wetqa.retrieval.engines import index as index_module
    from wetqa.retrieval.engines import integrity

    folder = Path(args.index)
    files = json.loads((folder / "index.json").read_text(encoding="utf-8"))["files"]
    total = sum(f["bytes"] for f in files.values())
    small = [f["bytes"] for f in files.values() if f["bytes"] <= integrity.HASH_AT_OPEN]
    record = integrity._record_path(folder)

    def first_open() -> None:
        record.unlink(missing_ok=True)
        integrity.verify_index_files(folder, files)

    real = index_module.verify_index_files
    index_module.verify_index_files = lambda *a, **k: {"ignored": []}
    reference = ms(lambda: open_index(folder, rescore=False), args.rounds)
    index_module.verify_index_files = real
    integrity.verify_index_files(folder, files)  # remembered
    usual = ms(lambda: integrity.verify_index_files(folder, files), args.rounds)
    first = ms(first_open, args.rounds)
    everything = ms(lambda: integrity.verify_index_files(folder, files, everything=True), args.rounds)
    integrity.verify_index_files(folder, files)
    print(
        f"{folder}: {len(files)} files, {total / 2**20:.1f} MB; {len(small)} files up to "
        f"{integrity.HASH_AT_OPEN >> 20} MiB ({sum(small) / 2**20:.1f} MB) hashed at every open"
    )
    print(f"open without any file check (reference)        {reference:8.1f} ms")
    print(f"check at an open, large files remembered       {usual:8.1f} ms ({usual / reference:.2f}x the open)")
    print(f"check at the first open after a copy or change {first:8.1f} ms ({first / reference:.2f}x the open)")
    print(f"wetqa index --verify (every file hashed)       {everything:8.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
