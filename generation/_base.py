"""Records that flow through generation, and the one interface every backend implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from wetqa.retrieval._base import Hit
from wetqa.settings import setting


class GenerationError(RuntimeError):
    """A backend could not produce an answer; the message names the problem."""


class ModelUnavailable(GenerationError, ConnectionError):
    """The model server cannot be reached: a missing component (exit 3), not bad input."""


class ContextOverflowError(GenerationError):
    pass


class UnsupportedSetting(GenerationError):
    """A per-request setting the backend cannot honour (the API answers 400 naming it)."""

    def __init__(self, setting: str, backend: str, why: str = ""):
        self.setting = setting
        super().__init__(f"{setting} is not supported by the {backend} generator" + (f": {why}" if why else ""))


@dataclass(frozen=True, slots=True)
class Sampling:
    """Settings one request may give (an API client's temperature, max_tokens, stop, seed).

    ``None`` (or no stop strings) leaves the backend's own setting. A backend lists what it honours
    in ``supports``; anything else given is refused (:func:`check_sampling`), never silently ignored.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # The N most likely first tokens of the answer with their log-probabilities (an LLM judge reads a
    # score's distribution from them, G-Eval's probability-weighted score).
    logprobs: int | None = None

    def given(self) -> list[str]:
        names = ("temperature", "max_tokens", "stop", "seed", "logprobs")
        return [name for name in names if getattr(self, name) not in (None, ())]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """The settings every model backend shares (a backend's own settings class adds to them)."""

    model: str = setting(
        "", "model id or local path (a .gguf file for transformers)", output=True, metavar="ID_OR_PATH"
    )
    temperature: float = setting(0.0, "sampling temperature (0: greedy)", minimum=0, output=True)
    top_k: int | None = setting(None, "sample only from the k most likely tokens", minimum=1, output=True)
    max_tokens: int = setting(1000, "most tokens an answer may have", minimum=1, output=True)


# The published sampling of the open models: temperature 0.2, top_k 50, 5000 tokens (capped by the window).
OPEN_MODEL_DEFAULTS = {"temperature": 0.2, "top_k": 50, "max_tokens": 5000}


def check_sampling(backend: Backend, sampling: Sampling) -> None:
    """Raise :class:`UnsupportedSetting` for the first setting given that the backend does not honour."""
    supports: frozenset[str] = getattr(backend, "supports", frozenset())
    for name in sampling.given():
        if name not in supports:
            raise UnsupportedSetting(name, backend.name)
    refuse = getattr(backend, "refuse", None)
    if refuse is not None:
        refuse(sampling)


@dataclass(slots=True)
class Request:
    """One question with its retrieved chunks and the chat messages built from them."""

    question: str
    hits: list[Hit]
    messages: list[dict]  # OpenAI chat format: [{"role": ..., "content": ...}]
    sampling: Sampling = field(default_factory=Sampling)
    # How sure retrieval is that the first hit answers the question (None: not estimated), the signals
    # it rests on, and whether the pipeline abstains (answers that no article in the corpus answers it).
    confidence: float | None = None
    signals: dict = field(default_factory=dict)
    abstain: bool = False


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(slots=True)
class Generation:
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    error: str | None = None  # set when this request failed; the batch goes on
    seconds: float = 0.0
    unavailable: bool = False  # the failure is the model server's absence (unreachable, timed out): exit 3
    finish_reason: str = "stop"  # "length" when max_tokens cut the output
    # With Sampling.logprobs: the first non-blank token's most likely alternatives -> log-probability.
    top_logprobs: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """Turns requests into raw model output (expected: ``ANSWER: ... DOC IDS: ...``)."""

    name: str

    def generate(self, requests: Sequence[Request]) -> list[Generation]: ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A backend that can hand out its output as it is produced.

    ``stream`` yields text pieces as they come, then one :class:`Generation` with the whole text and
    the usage. Closing the iterator early (the client went away) stops the work.
    """

    def stream(self, request: Request) -> Iterator[str | Generation]: ...


@runtime_checkable
class AsyncStreamingBackend(Backend, Protocol):
    """A backend whose stream can be read on an event loop (a model server over HTTP).

    A server reads it without a thread per request, and closing it ends the upstream's work at once.
    """

    def astream(self, request: Request) -> AsyncIterator[str | Generation]: ...


@dataclass(slots=True)
class Citation:
    id: str  # stable chunk id
    doc_id: str
    bwb_id: str
    law: str
    article: str
    text: str

    @classmethod
    def from_hit(cls, hit: Hit) -> Citation:
        c = hit.chunk
        return cls(c.id, c.doc_id, c.bwb_id, c.law, c.article, c.text)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "doc_id": self.doc_id,
            "bwb_id": self.bwb_id,
            "law": self.law,
            "article": self.article,
            "text": self.text,
        }


@dataclass(slots=True)
class Answer:
    question: str
    answer: str
    citations: list[Citation]
    retrieved: list[Hit]
    raw: str = ""
    format_ok: bool = True
    dropped_ids: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    unavailable: bool = False  # ``error`` says the model server could not be reached
    finish_reason: str = "stop"
    confidence: float | None = None  # that the first retrieved article answers the question, in [0, 1]
    abstained: bool = False  # no article found: the answer says so and cites nothing
    related: list[Citation] = field(default_factory=list)  # when abstained: the closest articles, not cited

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "abstained": self.abstained,
            "citations": [c.to_json() for c in self.citations],
            "related": [c.to_json() for c in self.related],
            "retrieved": [h.to_json() for h in self.retrieved],
            "format_ok": self.format_ok,
            "dropped_ids": self.dropped_ids,
            "usage": self.usage.to_json(),
            "error": self.error,
        }
