"""Whether to answer: the one place the pipeline decides to abstain, and says why in Dutch.

Retrieval's last stage gives a confidence (fitted, calibrated, capped for questions too short to point at an
article: :mod:`wetqa.retrieval.ranking.confidence`) and the signals it read. :func:`decide` turns them into a
:class:`Decision`; :func:`explanation` is the answer's text when it abstains. Nothing else in the pipeline reads
the signals for this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Why the pipeline abstains ("" when it answers).
NO_HITS = "no_hits"  # nothing was found in the scope asked
LOW_CONFIDENCE = "low_confidence"  # below the threshold: no article of the corpus is likely to answer it


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the decision and its explanation read of retrieval's signals (typed: one reading of the dict)."""

    content_words: int | None  # the question's content words (None: no hits, so no signals)
    named_held: bool  # it names a law the corpus holds ("volgens de Awb"): the corpus cannot lack it
    named_absent: bool  # it names a law the corpus does not hold
    english: bool  # asked in English: Dutch law texts cannot be matched on its words

    @classmethod
    def of(cls, signals: Mapping[str, float]) -> Evidence:
        words = signals.get("content_words")
        return cls(
            content_words=None if words is None else int(words),
            named_held=bool(signals.get("named_held")),
            named_absent=signals.get("law_named") == -1.0,
            english=bool(signals.get("english")),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    abstain: bool
    reason: str = ""  # NO_HITS, LOW_CONFIDENCE or "" (answered)
    threshold: float = 0.0  # the confidence below which it abstains (0: it always answers what it finds)


def decide(
    confidence: float | None,
    fitted_threshold: float | None,
    signals: Mapping[str, float],
    found: bool,
    min_confidence: float | None,
) -> Decision:
    """Abstain when nothing was found, or below ``min_confidence`` (None: the threshold fitted with the
    confidence model; 0: always answer). A question that names a law the corpus holds is answered from that
    law: the corpus cannot lack it."""
    threshold = min_confidence if min_confidence is not None else fitted_threshold or 0.0
    if not found:
        return Decision(True, NO_HITS, threshold)
    low = confidence is not None and confidence < threshold
    if threshold > 0 and low and not Evidence.of(signals).named_held:
        return Decision(True, LOW_CONFIDENCE, threshold)
    return Decision(False, "", threshold)


def too_short(question: str, signals: Mapping[str, float]) -> bool:
    """Whether the question says too little to point at an article: the one abstention that blames the
    question. A full question that finds nothing (in a narrow scope, say) is no such case."""
    from wetqa.retrieval.engines.tokenization import cached_tokens
    from wetqa.retrieval.ranking.confidence import MIN_CONTENT_WORDS

    words = Evidence.of(signals).content_words
    if words is None:  # no hits, so no signals: the question's own words, counted as the signal counts them
        words = len({t for t in cached_tokens(question) if len(t) > 1})
    return words < MIN_CONTENT_WORDS


def explanation(question: str, signals: Mapping[str, float], confidence: float | None, related: Sequence) -> str:
    """The answer's text when the pipeline abstains: why, and the closest articles (``related``: citations,
    offered but not cited)."""
    evidence = Evidence.of(signals)
    if too_short(question, signals):
        lead = "De vraag is te kort of te algemeen om er een wetsartikel bij te zoeken. Stel een volledige vraag."
    else:
        lead = (
            "Ik heb in de wetten van dit corpus geen artikel gevonden dat deze vraag beantwoordt. Het corpus bevat "
            "niet alle Nederlandse wetgeving: de vraag gaat mogelijk over een wet die er niet in staat."
        )
        if evidence.named_absent:
            lead += " De vraag noemt een wet die niet in dit corpus staat."
        if evidence.english:
            lead += " Stel de vraag in het Nederlands: wetqa zoekt in Nederlandse wetteksten."
    if confidence is not None:
        lead += f" (Zekerheid: {confidence:.0%}.)"
    if related:
        lead += "\n\nMogelijk verwant (niet als antwoord aangehaald):\n" + "\n".join(
            f"- {c.law}, {c.article}" for c in related
        )
    return lead
