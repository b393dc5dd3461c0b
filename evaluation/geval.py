"""G-Eval for cited answers: coherence, fluency, consistency and relevance.

Prompts written for wetqa: the criterion, the evaluation steps and the score
scale, then the texts. Coherence and fluency judge the answer alone;
consistency and relevance judge it against the question and the gold answer.
The score is the probability-weighted mean over the score tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wetqa.corpus.dataset import QAItem
from wetqa.settings import setting

from .judge import Judge, LLMJudge
from .llm import model_config
from .metrics import Metric, MetricError, Scorer, register


@dataclass(frozen=True, slots=True)
class Criterion:
    name: str
    definition: str
    steps: str
    scale: tuple[int, ...]
    with_reference: bool


CRITERIA = {
    "coherence": Criterion(
        "coherence",
        "Coherence (1-5): the answer is well structured and well organised. Its sentences follow from each other "
        "and together build a clear explanation of the legal rule, without jumps, contradictions or repetition.",
        "1. Read the answer carefully.\n2. Check whether it has a clear line: the rule, then its conditions or exceptions.\n"
        "3. Check whether sentences connect logically and nothing is repeated without reason.\n"
        "4. Give a coherence score from 1 (incoherent) to 5 (fully coherent).",
        (1, 2, 3, 4, 5),
        False,
    ),
    "fluency": Criterion(
        "fluency",
        "Fluency (1-3): the quality of the Dutch: grammar, spelling, word choice and sentence construction.",
        "1. Read the answer.\n2. Note grammatical errors, broken sentences, wrong words or text in another language.\n"
        "3. Give 1 (many problems, hard to read), 2 (some problems, still understandable) or 3 (fluent Dutch).",
        (1, 2, 3),
        False,
    ),
    "consistency": Criterion(
        "consistency",
        "Consistency (1-5): the answer agrees in fact with the reference answer written by a legal expert. "
        "It states no conditions, exceptions or consequences that the reference contradicts or lacks.",
        "1. Read the question and the reference answer and note the legal facts in it.\n"
        "2. Read the answer and check each of its claims against the reference.\n"
        "3. Penalise claims that contradict the reference or are not supported by it.\n"
        "4. Give a consistency score from 1 (mostly inconsistent) to 5 (fully consistent).",
        (1, 2, 3, 4, 5),
        True,
    ),
    "relevance": Criterion(
        "relevance",
        "Relevance (1-5): the answer addresses the question and contains the important information of the "
        "reference answer, without irrelevant or redundant material.",
        "1. Read the question and the reference answer and note what the question asks for.\n"
        "2. Check how much of the important information of the reference the answer contains.\n"
        "3. Penalise material that does not help answer the question.\n"
        "4. Give a relevance score from 1 (irrelevant) to 5 (fully relevant and complete).",
        (1, 2, 3, 4, 5),
        True,
    ),
}


def build_prompt(criterion: Criterion, answer: str, question: str = "", reference: str = "") -> str:
    parts = [
        "You will be given an answer to a question about Dutch law. The texts are in Dutch.",
        "Your task is to rate the answer on one metric. Read these instructions carefully.",
        f"Evaluation criterion:\n{criterion.definition}",
        f"Evaluation steps:\n{criterion.steps}",
    ]
    if criterion.with_reference:
        parts += [f"Question:\n{question}", f"Reference answer:\n{reference}"]
    parts += [
        f"Answer to evaluate:\n{answer}",
        f"Reply with the score only, a single number from {criterion.scale[0]} to {criterion.scale[-1]}.\nScore:",
    ]
    return "\n\n".join(parts)


def geval_scores(
    judge: Judge, pairs: Sequence[tuple[dict, QAItem]], criteria: Sequence[str] = tuple(CRITERIA)
) -> list[dict]:
    """Scores per answer: ``geval_<criterion>`` on its own scale, errors as ``geval_error``."""
    results: list[dict] = [{} for _ in pairs]
    for name in criteria:
        c = CRITERIA[name]
        prompts = [build_prompt(c, rec.get("answer", ""), item.question, item.answer) for rec, item in pairs]
        for out, res in zip(results, judge.score(prompts, c.scale)):
            if res.score is None:
                out["geval_error"] = res.error or "no score"
            else:
                # Normalised to 0..1 so that tables can show all criteria x100 on one footing.
                out[f"geval_{name}"] = (res.score - c.scale[0]) / (c.scale[-1] - c.scale[0])
                out.setdefault("geval_method", res.method)
    return results


@dataclass(frozen=True, slots=True)
class GEvalSettings:
    judge: str | None = setting(
        None,
        "G-Eval judge: a model on --judge-base-url or the OpenAI API, or BACKEND:MODEL of another generator "
        "backend (transformers:PATH for a local model)",
        metavar="MODEL",
    )
    judge_base_url: str | None = setting(None, "OpenAI-compatible server of the judge", metavar="URL")
    judge_concurrency: int | None = setting(
        None, "judge requests under way at once (default: the judge backend's concurrency)", minimum=1
    )
    judge_samples: int = setting(10, "scores sampled per prompt when the judge gives no log-probabilities", minimum=1)


def make_scorer(settings: GEvalSettings, folder: Path | None) -> Scorer:
    if not settings.judge:
        raise MetricError(
            'the geval metric needs a judge: --judge MODEL (judge = "MODEL" in an experiment\'s TOML), '
            "with --judge-base-url for a local OpenAI-compatible server"
        )
    config = model_config(settings.judge, settings.judge_base_url, "judge", concurrency=settings.judge_concurrency)
    return GEvalScorer(LLMJudge(config, folder, settings.judge_samples))


class GEvalScorer:
    """The geval metric's scorer: its judge's scores, and whether the judge was ever reached."""

    def __init__(self, judge: LLMJudge):
        self.judge = judge

    def __call__(self, pairs: Sequence[tuple[dict, QAItem]], corpus) -> list[dict]:
        return geval_scores(self.judge, pairs)

    def unavailable(self) -> str | None:
        """Why the judge never answered, when it could not be reached (a missing component: exit 3)."""
        j = self.judge
        return f"the G-Eval judge ({j.unreachable})" if j.unreachable and not j.answered else None


register(
    Metric(
        name="geval",
        scores=tuple(f"geval_{c}" for c in CRITERIA),
        # Each criterion on its own: a fluency score that failed is retried even when coherence came back.
        complete=tuple(f"geval_{c}" for c in CRITERIA),
        prefixes=("geval_",),
        depends_on=lambda rec, item, corpus, settings: [item.question, item.answer, settings.judge],
        settings=GEvalSettings,
        make_scorer=make_scorer,
        columns=(
            ("COH", "geval_coherence", 1),
            ("FLU", "geval_fluency", 2),
            ("CON", "geval_consistency", 5),
            ("REL", "geval_relevance", 6),
        ),
    )
)
