"""METEOR with nltk's ``meteor_score``, Dutch tokens and the Dutch Snowball stemmer.

Variants: ``exact+stem+wordnet`` when WordNet data is available (see
``evaluation.wordnet``; English WordNet rarely matches Dutch words, but it is
the metric as nltk defines it) and ``exact+stem`` otherwise. Every result
names the variant that ran.
"""

from __future__ import annotations

from functools import lru_cache

from .metrics import Metric, register
from .text import dutch_tokens


class _NoWordNet:
    """Stands in for WordNet: no synonyms, so METEOR matches exact words and stems only."""

    @staticmethod
    def synsets(*_args, **_kwargs):
        return []


@lru_cache(maxsize=1)
def _resources(use_wordnet: bool = True):
    from nltk.stem.snowball import SnowballStemmer

    wn = None
    if use_wordnet:
        from .wordnet import load_wordnet

        wn = load_wordnet()
    variant = "exact+stem+wordnet" if wn is not None else "exact+stem"
    return SnowballStemmer("dutch"), (wn or _NoWordNet()), variant


def meteor_variant(use_wordnet: bool = True) -> str:
    return _resources(use_wordnet)[2]


def meteor(prediction: str, reference: str, use_wordnet: bool = True, language: str = "nl") -> float:
    from nltk.translate.meteor_score import meteor_score

    if language == "en":
        from nltk.stem.porter import PorterStemmer

        stemmer, wn, _ = PorterStemmer(), _resources(use_wordnet)[1], None
        hyp, ref = prediction.split(), reference.split()
    else:
        stemmer, wn, _ = _resources(use_wordnet)
        hyp, ref = dutch_tokens(prediction, stem=False), dutch_tokens(reference, stem=False)
    if not hyp or not ref:
        return 0.0
    return float(meteor_score([ref], hyp, stemmer=stemmer, wordnet=wn))


register(
    Metric(
        name="meteor",
        scores=("meteor",),
        complete=("meteor",),
        prefixes=("meteor",),
        depends_on=lambda rec, item, corpus, settings: [item.answer],
        compute=lambda rec, item, corpus: {  # None without a gold answer, as ROUGE-L
            "meteor": meteor(rec.get("answer") or "", item.answer) if item.answer.strip() else None
        },
        columns=(("MET", "meteor", 4),),
        notes=lambda: {"meteor_variant": meteor_variant()},
    )
)
