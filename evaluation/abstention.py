"""Abstention: how often a run declined to answer, its metrics over answered and over all questions,
and the risk-coverage curve of its confidence.

Risk at coverage c: of the c share of questions answered with the highest confidence, the share whose
answer rests on a wrong article (an answer's citations hit no gold article; for an abstained question,
its first retrieved article, which an answer would have rested on, is not a gold one). A confidence
that ranks well gives a curve that rises from low risk at low coverage to the full run's risk at 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def zeroed(rows: Sequence[dict], keys: frozenset[str]) -> list[dict]:
    """The rows with every score of an abstained answer set to 0 (the metrics "over all questions")."""
    return [{**r, **{k: 0.0 for k in r if k in keys and r[k] is not None}} if r.get("abstained") else r for r in rows]


def answered_only(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if not r.get("abstained")]


def risk_coverage(confidence: Sequence[float], correct: Sequence[bool]) -> list[dict]:
    """Points (coverage, risk, threshold) at every coverage step, most confident answered first."""
    pairs = sorted(zip(confidence, correct), key=lambda p: -p[0])
    out, wrong = [], 0
    for n, (conf, ok) in enumerate(pairs, 1):
        wrong += not ok
        out.append({"coverage": round(n / len(pairs), 4), "risk": round(wrong / n, 4), "threshold": round(conf, 4)})
    return out


def at_coverages(points: Sequence[dict], coverages: Sequence[float] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)) -> list[dict]:
    """The table of the curve at round coverages."""
    table = []
    for c in coverages:
        best = min(points, key=lambda p: abs(p["coverage"] - c), default=None)
        if best is not None:
            table.append({"coverage": c, "risk": best["risk"], "threshold": best["threshold"]})
    return table


def plot_risk_coverage(points: Sequence[dict], path: Path, title: str) -> Path | None:
    """The curve as a PNG (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot([p["coverage"] for p in points], [p["risk"] for p in points], color="#154273")
    ax.set_xlabel("coverage (share of questions answered, most confident first)")
    ax.set_ylabel("risk (share answered on a wrong article)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, max(0.05, max((p["risk"] for p in points), default=0) * 1.1))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
