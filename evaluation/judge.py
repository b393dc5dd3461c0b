"""LLM judges for G-Eval: who computes the score, kept apart from what is measured.

A judge is a generator backend of wetqa's registry (:func:`wetqa.evaluation.llm.model_config`: the
OpenAI API or any OpenAI-compatible server, a local transformers model, ...), so a model is called
one way everywhere. The score is read from the distribution of the answer's first token
(``top_logprobs``), probability-weighted over the scale; where the backend or its server gives no
log-probabilities, ``samples`` scores are sampled and averaged instead. Answers are cached on disk
by (backend, model, prompt, scale, samples); token usage and cost are logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wetqa.generation import (
    Generation,
    GeneratorConfig,
    Request,
    Sampling,
    UnsupportedSetting,
    check_sampling,
    make_backend,
)
from wetqa.io import own_folder, read_journal

log = logging.getLogger("wetqa.evaluation.judge")

# USD per million tokens (input, output), for the cost log; unknown models cost 0.
PRICES = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6), "gpt-4": (30.0, 60.0), "gpt-3.5-turbo": (0.5, 1.5)}
TOP_LOGPROBS = 20  # the most the OpenAI API gives
CACHE_FILE = "judge-cache.jsonl"


@dataclass(slots=True)
class JudgeResult:
    score: float | None
    method: str  # "logprobs", "samples", "cache:<method>"
    distribution: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


class Judge(Protocol):
    model: str

    def score(self, prompts: Sequence[str], scale: Sequence[int]) -> list[JudgeResult]: ...


def weighted_score(token_logprobs: dict[str, float], scale: Sequence[int]) -> tuple[float | None, dict[str, float]]:
    """Probability-weighted mean over the score tokens, renormalised over those tokens."""
    probs: dict[str, float] = {}
    for tok, lp in token_logprobs.items():
        t = tok.strip()
        if t.isdigit() and int(t) in scale:
            probs[t] = probs.get(t, 0.0) + math.exp(lp)
    total = sum(probs.values())
    if total <= 0:
        return None, {}
    dist = {k: v / total for k, v in probs.items()}
    return sum(int(k) * p for k, p in dist.items()), dist


def parse_score(text: str, scale: Sequence[int]) -> int | None:
    for m in re.finditer(r"\d+", text or ""):
        if int(m.group()) in scale:
            return int(m.group())
    return None


class DiskCache:
    """Judge answers by key, in ``judge-cache.jsonl`` of ``folder``: a folder wetqa owns (one of an older
    wetqa holding only that file is adopted), made or checked when the first answer is written, not when
    a judge is set up."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder else None
        self._lock = threading.Lock()
        self._mem: dict[str, dict] = {}
        self._owned = False
        if self.folder:
            for rec in read_journal(self.folder / CACHE_FILE):  # a torn last line is cut off
                self._mem[rec["key"]] = rec["value"]

    @staticmethod
    def key(*parts: object) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        return self._mem.get(key)

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self._mem[key] = value
            if self.folder:
                if not self._owned:  # the file listed as wetqa's: a later run writes beside it again
                    own_folder(self.folder, (CACHE_FILE,), adopt=lambda p: {CACHE_FILE} & {e.name for e in p.iterdir()})
                    self._owned = True
                with open(self.folder / CACHE_FILE, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")


class LLMJudge:
    """A generator backend as judge. Its model is loaded (or its client made) when it first judges."""

    def __init__(self, config: GeneratorConfig, cache_dir: str | Path | None = None, samples: int = 10):
        self.config = config
        self.model = config.model
        self.samples = samples
        self.cache = DiskCache(cache_dir)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._backend = None
        # Whether the judge ever answered, and why it could not be reached: a judge that never answers
        # is a missing component (exit 3), and once it is known unreachable no more requests are sent.
        self.answered = 0
        self.unreachable: str | None = None

    @property
    def backend(self):
        if self._backend is None:
            self._backend = make_backend(self.config)
        return self._backend

    def _logprobs(self) -> bool:
        try:
            check_sampling(self.backend, Sampling(logprobs=TOP_LOGPROBS))
        except UnsupportedSetting:
            return False
        return True

    def score(self, prompts: Sequence[str], scale: Sequence[int]) -> list[JudgeResult]:
        keys = [DiskCache.key(self.config.kind, self.model, p, list(scale), self.samples) for p in prompts]
        out: list[JudgeResult | None] = [_cached(self.cache.get(k)) for k in keys]
        self.answered += sum(r is not None for r in out)  # a cached score was answered once
        fresh = todo = [i for i, r in enumerate(out) if r is None]
        if todo and self._logprobs():
            sampling = Sampling(temperature=0.0, max_tokens=2, logprobs=TOP_LOGPROBS)
            for i, r in zip(todo, self._ask([prompts[i] for i in todo], sampling, scale, 1, _from_logprobs)):
                out[i] = r
        todo = [i for i, r in enumerate(out) if r is None]  # no log-probabilities: the mean of sampled scores
        if todo:
            sampling = Sampling(temperature=1.0, max_tokens=5)
            for i, r in zip(todo, self._ask([prompts[i] for i in todo], sampling, scale, self.samples, _from_samples)):
                out[i] = r
        for i in fresh:
            if (r := out[i]) is not None and r.score is not None:
                self.cache.put(keys[i], {"score": r.score, "method": r.method, "distribution": r.distribution})
        log.info(
            "judge %s: %d prompt + %d completion tokens so far, cost ~$%.4f",
            self.model,
            self.prompt_tokens,
            self.completion_tokens,
            self.cost_usd,
        )
        return [r or JudgeResult(None, "error", error="no score") for r in out]

    def _ask(self, prompts: Sequence[str], sampling: Sampling, scale: Sequence[int], n: int, read) -> list:
        """Each prompt ``n`` times to the backend (one batch), then ``read`` turns its generations into a result.

        Until the judge has answered once, the first prompt goes alone: a judge that cannot be reached is
        asked that once, and the rest get its error without a request of their own.
        """
        requests = [Request("", [], [{"role": "user", "content": p}], sampling) for p in prompts for _ in range(n)]
        head = 0 if self.answered else n
        gens = self._generate(requests[:head]) + self._generate(requests[head:])
        return [read(gens[i * n : (i + 1) * n], scale) for i in range(len(prompts))]

    def _generate(self, requests: Sequence[Request]) -> list[Generation]:
        if not requests:
            return []
        if self.unreachable and not self.answered:
            return [Generation(error=self.unreachable, unavailable=True) for _ in requests]
        gens = self.backend.generate(requests)
        for g in gens:
            self.prompt_tokens += g.usage.prompt_tokens
            self.completion_tokens += g.usage.completion_tokens
            if g.error is None:
                self.answered += 1
            elif g.unavailable and self.unreachable is None:
                self.unreachable = g.error
        return gens

    @property
    def cost_usd(self) -> float:
        price = PRICES.get(self.model, (0.0, 0.0))
        return (self.prompt_tokens * price[0] + self.completion_tokens * price[1]) / 1e6


def _cached(hit: dict | None) -> JudgeResult | None:
    return None if hit is None else JudgeResult(hit["score"], "cache:" + hit["method"], hit.get("distribution", {}))


def _failed(gens) -> JudgeResult | None:
    error = next((g.error for g in gens if g.error), None)
    return None if error is None else JudgeResult(None, "error", error=f"judge: {error}")


def _from_logprobs(gens, scale: Sequence[int]) -> JudgeResult | None:
    """The weighted score of the first token's distribution; None (sample instead) when it has no score token."""
    if (failed := _failed(gens)) is not None:
        return failed
    g = gens[0]
    score, dist = weighted_score(g.top_logprobs, scale)
    if score is None:
        return None
    return JudgeResult(score, "logprobs", dist, g.usage.prompt_tokens, g.usage.completion_tokens)


def _from_samples(gens, scale: Sequence[int]) -> JudgeResult:
    if (failed := _failed(gens)) is not None:
        return failed
    values = [v for g in gens if (v := parse_score(g.text, scale)) is not None]
    if not values:
        return JudgeResult(None, "samples", error="the judge gave no score on the scale")
    usage = (sum(g.usage.prompt_tokens for g in gens), sum(g.usage.completion_tokens for g in gens))
    return JudgeResult(sum(values) / len(values), "samples", {}, *usage)
