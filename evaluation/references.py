"""Evaluate sentence-level reference attribution on the party-manifesto data.

Per item: precision, recall and F1 of the predicted reference set against the
gold set, averaged over items. An empty prediction has precision 0 (not NaN).
Items with no gold reference have no defined recall: by default they are left
out of the P/R/F1 means and reported apart (how often the method rightly
predicted nothing); ``no_gold="score"`` scores them 1 when nothing is
predicted and 0 otherwise.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wetqa.console import progress_bar
from wetqa.corpus.dataset import data_files

from .attribution import Attributor, select

PUBLISHED_BM25_F1 = {
    "BBB": 0.644,
    "CDA": 0.519,
    "CU": 0.725,
    "D66": 0.658,
    "DENK": 0.467,
    "FVD": 0.646,
    "JA21": 0.669,
    "NSC": 0.800,
}


@dataclass(slots=True)
class RefItem:
    party: str
    index: int
    sentence: str
    candidates: list[str]
    gold: set[int] = field(default_factory=set)


def load_reference_items(folder: str | Path) -> tuple[list[RefItem], list[dict]]:
    """(items, problems): a malformed item or file is recorded, the rest still loads."""
    files = data_files(folder, "*.json", "reference data")
    items: list[RefItem] = []
    problems: list[dict] = []
    for f in files:
        try:
            rows = json.loads(f.read_text(encoding="utf-8-sig"))  # a leading BOM skipped
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append({"file": f.name, "problem": f"not JSON: {exc}"})
            continue
        if not isinstance(rows, list):
            problems.append({"file": f.name, "problem": "expected a list of items"})
            continue
        for i, row in enumerate(rows):
            try:
                paragraphs = row["paragraphs"]
                candidates: list[str] = []
                for p in paragraphs:
                    for s in p:
                        if isinstance(s, str) and s.strip() and s not in candidates:
                            candidates.append(s)
                sentence = row["summarySentence"]
                if not isinstance(sentence, str) or not sentence.strip():
                    raise ValueError("empty summarySentence")
                refs = row.get("references") or []
                missing = [r for r in refs if r not in candidates]
                if missing:
                    raise ValueError(f"{len(missing)} gold reference(s) are not among the candidates")
                items.append(
                    RefItem(row.get("party") or f.stem, i, sentence, candidates, {candidates.index(r) for r in refs})
                )
            except (KeyError, TypeError, ValueError) as exc:
                problems.append({"file": f.name, "item": i, "problem": f"malformed item: {exc}"})
    return items, problems


def prf(predicted: set[int], gold: set[int]) -> tuple[float, float, float]:
    if not predicted:
        return 0.0, 0.0 if gold else 0.0, 0.0
    tp = len(predicted & gold)
    p = tp / len(predicted)
    r = tp / len(gold) if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def _mean(xs: Sequence[float]) -> float:
    return round(statistics.mean(xs), 4) if xs else 0.0


def score_items(
    items: Sequence[RefItem],
    all_scores: Sequence[Sequence[float]],
    threshold: float,
    max_refs: int | None = None,
    no_gold: str = "exclude",
) -> dict:
    per_party: dict[str, list[tuple[float, float, float]]] = {}
    rows = []
    abstain = []
    for item, scores in zip(items, all_scores):
        pred = set(select(scores, threshold, max_refs))
        if not item.gold:
            abstain.append(1.0 if not pred else 0.0)
            if no_gold == "exclude":
                rows.append(
                    {"party": item.party, "index": item.index, "predicted": sorted(pred), "gold": [], "scored": False}
                )
                continue
            p = r = f = 1.0 if not pred else 0.0
        else:
            p, r, f = prf(pred, item.gold)
        per_party.setdefault(item.party, []).append((p, r, f))
        rows.append(
            {
                "party": item.party,
                "index": item.index,
                "predicted": sorted(pred),
                "gold": sorted(item.gold),
                "precision": p,
                "recall": r,
                "f1": f,
                "scored": True,
            }
        )
    scored = [x for v in per_party.values() for x in v]
    return {
        "threshold": threshold,
        "precision": _mean([x[0] for x in scored]),
        "recall": _mean([x[1] for x in scored]),
        "f1": _mean([x[2] for x in scored]),
        "n_items": len(items),
        "n_scored": len(scored),
        "no_gold_items": len(abstain),
        "no_gold_correct_abstentions": sum(abstain),
        "per_party": {
            party: {
                "precision": _mean([x[0] for x in v]),
                "recall": _mean([x[1] for x in v]),
                "f1": _mean([x[2] for x in v]),
                "n": len(v),
                "published_bm25_f1": PUBLISHED_BM25_F1.get(party),
            }
            for party, v in sorted(per_party.items())
        },
        "items": rows,
    }


def compute_scores(
    attributor: Attributor, items: Sequence[RefItem], progress: bool = True
) -> tuple[list[list[float]], list[dict]]:
    """Candidate scores per item; an item the method fails on gets empty scores and a recorded problem."""
    out, problems = [], []
    for item in progress_bar(items, desc=f"attributing ({attributor.name})", unit="item", progress=progress):
        try:
            s = attributor.scores(item.sentence, item.candidates)
            if len(s) != len(item.candidates):
                raise ValueError(f"{len(s)} scores for {len(item.candidates)} candidates")
            out.append(list(s))
        except Exception as exc:  # noqa: BLE001 - one bad item must not lose the others
            problems.append({"party": item.party, "item": item.index, "problem": f"{type(exc).__name__}: {exc}"})
            out.append([0.0] * len(item.candidates))
    return out, problems


def sweep(
    items: Sequence[RefItem], all_scores: Sequence[Sequence[float]], thresholds: Sequence[float], **kw
) -> list[dict]:
    return [
        {
            k: v
            for k, v in score_items(items, all_scores, t, **kw).items()
            if k in ("threshold", "precision", "recall", "f1")
        }
        for t in thresholds
    ]


def plot_pr_curve(points: Sequence[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5), dpi=120)
    ax.plot([p["recall"] for p in points], [p["precision"] for p in points], marker="o", ms=3)
    best = max(points, key=lambda p: p["f1"])
    ax.scatter(
        [best["recall"]],
        [best["precision"]],
        color="red",
        zorder=3,
        label=f"best F1 {best['f1']:.3f} at threshold {best['threshold']:.2f}",
    )
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
