"""LLM judges for G-Eval: who computes the score, kept apart from what is measured.

``OpenAIJudge`` asks any OpenAI-compatible endpoint (or the OpenAI API) for
the score token with ``top_logprobs``; where the server gives no
log-probabilities it samples ``n`` scores instead. ``TransformersJudge`` reads
the next-token distribution of a local model directly. Requests run
concurrently and are retried; answers are cached on disk by (model, prompt,
settings); token usage and cost are logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wetqa.io import read_journal

log = logging.getLogger("wetqa.evaluation.judge")

# USD per million tokens (input, output), for the cost log; unknown models cost 0.
PRICES = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6), "gpt-4": (30.0, 60.0), "gpt-3.5-turbo": (0.5, 1.5)}


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
    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder else None
        self._lock = threading.Lock()
        self._mem: dict[str, dict] = {}
        if self.folder:
            self.folder.mkdir(parents=True, exist_ok=True)
            for rec in read_journal(self.folder / "judge-cache.jsonl"):  # a torn last line is cut off
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
                with open(self.folder / "judge-cache.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")


def _from_cache(v: dict) -> JudgeResult:
    return JudgeResult(v["score"], "cache:" + v["method"], v.get("distribution", {}))


class OpenAIJudge:
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        max_retries: int = 4,
        timeout: float = 60.0,
        samples: int = 10,
        cache_dir: str | Path | None = None,
        use_logprobs: bool = True,
    ):
        import openai

        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key and base_url is None:
            raise ValueError(
                "the G-Eval judge needs OPENAI_API_KEY, or --judge-base-url for a local OpenAI-compatible server"
            )
        self.model = model
        self.base_url = base_url
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", max_retries=max_retries, timeout=timeout
        )
        self.concurrency = max(1, concurrency)
        self.samples = samples
        self.use_logprobs = use_logprobs
        self.cache = DiskCache(cache_dir)
        self.prompt_tokens = 0
        self.completion_tokens = 0
        # Whether the judge ever answered, and why it could not be reached: a judge that never answers
        # is a missing component (exit 3), and once it is known unreachable no more requests are sent.
        self.answered = 0
        self.unreachable: str | None = None

    def _messages(self, prompt: str) -> list[dict]:
        return [{"role": "user", "content": prompt}]

    def _one(self, prompt: str, scale: Sequence[int]) -> JudgeResult:
        key = DiskCache.key(self.model, prompt, list(scale), self.use_logprobs, self.samples)
        if (hit := self.cache.get(key)) is not None:
            self.answered += 1
            return _from_cache(hit)
        if self.unreachable and not self.answered:
            return JudgeResult(None, "error", error=self.unreachable)
        o = self._openai
        try:
            result = None
            if self.use_logprobs:
                resp = self._client.chat.completions.create(
                    model=self.model,
                    messages=self._messages(prompt),
                    max_tokens=2,
                    temperature=0.0,
                    logprobs=True,
                    top_logprobs=20,
                )
                content = resp.choices[0].logprobs.content if resp.choices[0].logprobs else None
                if content:
                    first = next((c for c in content if c.token.strip()), content[0])
                    score, dist = weighted_score({t.token: t.logprob for t in first.top_logprobs}, scale)
                    if score is not None:
                        result = JudgeResult(
                            score, "logprobs", dist, resp.usage.prompt_tokens, resp.usage.completion_tokens
                        )
            if result is None:  # no log-probabilities: the mean of n sampled scores
                resp = self._client.chat.completions.create(
                    model=self.model, messages=self._messages(prompt), max_tokens=5, temperature=1.0, n=self.samples
                )
                vals = [v for c in resp.choices if (v := parse_score(c.message.content, scale)) is not None]
                if not vals:
                    return JudgeResult(None, "samples", error="the judge gave no score on the scale")
                result = JudgeResult(
                    sum(vals) / len(vals), "samples", {}, resp.usage.prompt_tokens, resp.usage.completion_tokens
                )
        except (o.APIConnectionError, o.APITimeoutError) as exc:
            self.unreachable = f"judge unreachable at {self.base_url or 'api.openai.com'}: {exc}"
            return JudgeResult(None, "error", error=self.unreachable)
        except o.APIStatusError as exc:
            return JudgeResult(None, "error", error=f"judge error {exc.status_code}: {getattr(exc, 'message', exc)}")
        self.answered += 1
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.cache.put(key, {"score": result.score, "method": result.method, "distribution": result.distribution})
        return result

    def score(self, prompts: Sequence[str], scale: Sequence[int]) -> list[JudgeResult]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.concurrency) as pool:
            out = list(pool.map(lambda p: self._one(p, scale), prompts))
        price = PRICES.get(self.model, (0.0, 0.0))
        cost = (self.prompt_tokens * price[0] + self.completion_tokens * price[1]) / 1e6
        log.info(
            "judge %s: %d prompt + %d completion tokens so far, cost ~$%.4f",
            self.model,
            self.prompt_tokens,
            self.completion_tokens,
            cost,
        )
        return out

    @property
    def cost_usd(self) -> float:
        price = PRICES.get(self.model, (0.0, 0.0))
        return (self.prompt_tokens * price[0] + self.completion_tokens * price[1]) / 1e6


class TransformersJudge:
    """A local causal LM as judge: exact probabilities of the score tokens after the prompt."""

    def __init__(
        self,
        model: str,
        cache_dir: str | Path | None = None,
        device: str | None = None,
        gguf_file: str | None = None,
        dtype: str = "auto",
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from wetqa.generation.backends.transformers_backend import split_gguf, torch_dtype_for

        model, gguf_file = split_gguf(model, gguf_file)
        kwargs = {"gguf_file": gguf_file} if gguf_file else {}
        self.torch = torch
        # On a GPU when there is one, in bf16/fp16 there (fp32 on a CPU), like the generator backends.
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model, **kwargs)
        dtype_ = torch_dtype_for(dtype, self.device)
        self.lm = AutoModelForCausalLM.from_pretrained(model, dtype=dtype_, **kwargs).eval()
        self.lm.to(self.device)
        self.model = model
        self.cache = DiskCache(cache_dir)
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def _score_ids(self, scale: Sequence[int]) -> dict[int, int]:
        ids = {}
        for s in scale:
            toks = self.tokenizer.encode(str(s), add_special_tokens=False)
            if toks:
                ids[s] = toks[-1]
        return ids

    def score(self, prompts: Sequence[str], scale: Sequence[int]) -> list[JudgeResult]:
        score_ids = self._score_ids(scale)
        out = []
        for prompt in prompts:
            key = DiskCache.key(self.model, prompt, list(scale), "transformers")
            if (hit := self.cache.get(key)) is not None:
                out.append(_from_cache(hit))
                continue
            msgs = [{"role": "user", "content": prompt}]
            if self.tokenizer.chat_template:
                ids = self.tokenizer.apply_chat_template(
                    msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
                )["input_ids"]
            else:
                ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"]
            with self.torch.no_grad():
                logits = self.lm(ids.to(self.device)).logits[0, -1]
            logprobs = self.torch.log_softmax(logits.float(), dim=-1)
            score, dist = weighted_score({str(s): float(logprobs[i]) for s, i in score_ids.items()}, scale)
            self.prompt_tokens += int(ids.shape[1])
            res = JudgeResult(score, "logprobs", dist, int(ids.shape[1]), 0)
            self.cache.put(key, {"score": res.score, "method": res.method, "distribution": res.distribution})
            out.append(res)
        return out
