"""Uncertainty over questions: paired bootstrap intervals, paired randomization tests, multiple-testing
corrections. Pure functions over per-question scores (one number per question, systems paired by question).

On 51 questions one question is 2 points of Hit@1: a mean alone does not say whether B beats A. The
interval is the percentile bootstrap of the mean (of the paired differences, for a comparison) over
questions resampled with replacement; the p-value is the paired randomization test (each question's
two scores swapped at random: Fisher's test as in Smucker et al., CIKM 2007), both with scipy and a seed,
so a table is reproduced to the digit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from wetqa.console import install_command

# Per-question scores: a list or a numpy array.
Scores = Sequence[float] | np.ndarray
RESAMPLES = 10_000
SEED = 0
# Marks in tables: the corrected p-value below these levels.
MARKS = ((0.01, "‡"), (0.05, "†"))


def _scipy_stats():
    try:
        from scipy import stats
    except ImportError:  # pragma: no cover - scipy comes with the eval extra
        raise RuntimeError(f"confidence intervals and tests need scipy: {install_command('scipy')}") from None
    return stats


def bootstrap_ci(values: Scores, resamples: int = RESAMPLES, seed: int = SEED, level: float = 0.95):
    """The percentile-bootstrap interval of the mean of ``values`` (questions resampled with replacement)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to bootstrap")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])  # every resample has the same mean (scipy would warn and give nan)
    res = _scipy_stats().bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean_difference(x, y, axis):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def randomization_p(a: Scores, b: Scores, resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """Two-sided p-value of the paired randomization test of mean(b) - mean(a) (1.0 when b equals a)."""
    x, y = np.asarray(b, dtype=np.float64), np.asarray(a, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("a paired test needs two score lists of the same non-zero length")
    if np.array_equal(x, y):
        return 1.0
    res = _scipy_stats().permutation_test(
        (x, y),
        _mean_difference,
        permutation_type="samples",
        n_resamples=resamples,
        alternative="two-sided",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(min(1.0, res.pvalue))


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down: the i-th smallest p times (m - i), kept monotonic."""
    adjusted = np.empty(p.size)
    running = 0.0
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (p.size - rank) * p[i]))
        adjusted[i] = running
    return adjusted


# How p-values are adjusted for testing several systems against one baseline.
CORRECTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "holm": _holm,
    "bonferroni": lambda p: np.minimum(1.0, p * p.size),
    "none": lambda p: p,
}
DEFAULT_CORRECTION = "holm"


def correct(p_values: Sequence[float], method: str = DEFAULT_CORRECTION) -> list[float]:
    """p-values adjusted for testing several systems against one baseline (``CORRECTIONS``)."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; choose from {', '.join(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=np.float64)
    return [float(v) for v in CORRECTIONS[method](p)] if p.size else []


def mark(p: float | None) -> str:
    """† for p < 0.05, ‡ for p < 0.01 (after correction); '' otherwise."""
    if p is None:
        return ""
    for level, symbol in MARKS:
        if p < level:
            return symbol
    return ""


LEGEND = "† p < 0.05, ‡ p < 0.01 against the baseline (paired randomization test, {correction} correction)"
