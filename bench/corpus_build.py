"""Corpus build time for the shared 272 laws against a bare lxml parse of the same files.

    python bench/corpus_build.py [BWB_DIR]

Goal: build <= 3x the bare parse and <= 15 s on 2 cores.
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
BWB = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "bwb"


def bare_parse(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        etree.fromstring(f.read_bytes(), _parser())
    return time.perf_counter() - t


def main() -> None:
    files = sorted(BWB.glob("*.xml"))
    mb = sum(f.stat().st_size for f in files) / 1e6
    bare_parse(files)  # warm the page cache so both timings read from memory
    bare = min(bare_parse(files) for _ in range(3))
    builds = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            report = build_corpus([BWB], Path(tmp) / "corpus", BuildOptions(), progress=False)
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


if __name__ == "__main__":
    main()
