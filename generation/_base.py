"""Records that flow through generation, and the one interface every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from wetqa.retrieval._base import Hit


class GenerationError(RuntimeError):
    """A backend could not produce an answer; the message names the problem."""


class ContextOverflowError(GenerationError):
    pass


@dataclass(slots=True)
class Request:
    """One question with its retrieved chunks and the chat messages built from them."""

    question: str
    hits: list[Hit]
    messages: list[dict]  # OpenAI chat format: [{"role": ..., "content": ...}]


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


@runtime_checkable
class Backend(Protocol):
    """Turns requests into raw model output (expected: ``ANSWER: ... DOC IDS: ...``)."""

    name: str

    def generate(self, requests: Sequence[Request]) -> list[Generation]: ...


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

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "citations": [c.to_json() for c in self.citations],
            "retrieved": [h.to_json() for h in self.retrieved],
            "format_ok": self.format_ok,
            "dropped_ids": self.dropped_ids,
            "usage": self.usage.to_json(),
            "error": self.error,
        }
