"""Corpus build time for the shared 272 laws against a bare lxml parse of the same files, and peak
memory as the corpus grows.

    python bench/corpus_build.py [BWB_DIR] [--scale 20] [--smoke]

Goal: build <= 3x the bare parse and <= 15 s on 2 cores. Memory: each build runs in a process of its
own and its peak resident memory (its own and its workers') is read; the synthetic corpus is the real
files copied --scale times under other BWB ids (so no copy is a duplicate), and memory should stay
flat as the corpus grows.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from lxml import etree

from wetqa.corpus import BuildOptions, build_corpus
from wetqa.corpus.bwb import _parser

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
BWB = (
    Path(sys.argv[1])
    if len(sys.argv) > 1 and not sys.argv[1].startswith("--")
    else (ROOT.parent / "shared" / "data" / "bwb")
)


def bare_parse(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        etree.fromstring(f.read_bytes(), _parser())
    return time.perf_counter() - t


def main(bwb: Path) -> None:
    files = sorted(bwb.glob("*.xml"))
    mb = sum(f.stat().st_size for f in files) / 1e6
    bare_parse(files)  # warm the page cache so both timings read from memory
    bare = min(bare_parse(files) for _ in range(3))
    builds = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            report = build_corpus([bwb], Path(tmp) / "corpus", BuildOptions(), progress=False)
            builds.append(report.seconds)
    build = min(builds)
    print(f"files: {len(files)} ({mb:.1f} MB); articles {report.articles}, words150 chunks {report.chunks}")
    print(f"bare lxml parse (1 process): {bare:.2f} s")
    print(
        f"wetqa corpus build (parse, render, chunk, write; {BuildOptions().workers or 'auto'} workers): {build:.2f} s"
    )
    print(
        f"ratio build/bare: {build / bare:.2f}x (goal <= 3x); build goal <= 15 s: {'met' if build <= 15 else 'MISSED'}"
    )


def peak_build_memory(src: Path, out: Path) -> tuple[float, float, int]:
    """(seconds, peak MB of the build process, peak MB of its largest worker) for a build in a fresh process."""
    import json
    import subprocess

    code = (
        "import json, resource, sys, time; from pathlib import Path;"
        "from wetqa.corpus import BuildOptions, build_corpus;"
        "t = time.perf_counter(); r = build_corpus([Path(sys.argv[1])], Path(sys.argv[2]), BuildOptions(), progress=False);"
        "print(json.dumps({'s': time.perf_counter() - t, 'laws': r.laws,"
        "'self': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,"
        "'children': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))"
    )
    out_json = subprocess.run(
        [sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True, check=True
    ).stdout
    r = json.loads(out_json.strip().splitlines()[-1])
    return r["s"], r["self"], r["children"], r["laws"]


def synthetic(src: Path, dest: Path, scale: int) -> None:
    """The real files ``scale`` times, each copy under its own BWB ids (BWBR9xxxxxx): distinct laws."""
    import re

    dest.mkdir(parents=True)
    for i, f in enumerate(sorted(src.glob("*.xml"))):
        data = f.read_bytes()
        for k in range(scale):
            new = f"BWBR9{k:02d}{i:04d}"  # BWBR + 7 digits, one per copy and law
            (dest / f"{new}{f.name[11:]}").write_bytes(re.sub(rb"BWBR\d{7}", new.encode(), data))


def memory(bwb: Path, scale: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = peak_build_memory(bwb, tmp / "c1")
        synthetic(bwb, tmp / "big", scale)
        big = peak_build_memory(tmp / "big", tmp / "c20")
    for label, (s, own, worker, laws) in (
        (f"{len(list(bwb.glob('*.xml')))} files", base),
        (f"{scale}x synthetic", big),
    ):
        print(
            f"{label:>20}: {laws} laws in {s:.1f} s; peak memory: build process {own:.0f} MB, "
            f"largest worker {worker:.0f} MB"
        )
    # A corpus of a few laws is built without workers (their peak is 0).
    worker = f"{big[2] / base[2]:.2f}" if base[2] else "- (no workers)"
    print(f"peak memory ratio {scale}x / 1x: build process {big[1] / base[1]:.2f}, worker {worker} (flat: about 1)")


def smoke() -> None:
    """The laws of the first dev questions, built the same ways (memory at 2x)."""
    import _smoke

    _smoke.announce()
    with tempfile.TemporaryDirectory() as tmp:
        laws = _smoke.laws(Path(tmp) / "bwb")
        main(laws)
        memory(laws, 2)


if __name__ == "__main__":
    if "--smoke" in sys.argv:
        smoke()
        sys.exit()
    main(BWB)
    if "--scale" in sys.argv:
        memory(BWB, int(sys.argv[sys.argv.index("--scale") + 1]))
