"""Records that flow through generation, and the one interface every backend implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from wetqa.corpus.records import DEFAULT_COLLECTION
from wetqa.corpus.sources import citation_url, document_fields
from wetqa.retrieval import Hit
from wetqa.settings import setting

from .structured import StructuredSentence, marked_text


class GenerationError(RuntimeError):
    """A backend could not produce an answer; the message names the problem."""

    failure = ""  # the kind a subclass is (an upstream failure a server answers in its own way); "" another


class ModelUnavailable(GenerationError, ConnectionError):
    """The model server cannot be reached: a missing component (exit 3), not bad input."""

    failure = "unavailable"


class ContextOverflowError(GenerationError):
    """The prompt does not fit the model's context window (the API answers 400, context_length_exceeded)."""

    failure = "context_overflow"


class UpstreamTimeout(ModelUnavailable):
    """The model server did not answer in time (the API answers 504, upstream_timeout)."""

    failure = "timeout"


# What a backend says went wrong (``Generation.failure``), and the error an answer then raises: one table, so
# that the server tells a timeout from an overflow by its type, never by the words of its message.
FAILURES: dict[str, type[GenerationError]] = {
    "context_overflow": ContextOverflowError,
    "timeout": UpstreamTimeout,
    "unavailable": ModelUnavailable,
}


def failure_of(exc: BaseException) -> str:
    """The failure kind of an error a backend caught (``""``: another)."""
    return exc.failure if isinstance(exc, GenerationError) else ""


def raise_failure(message: str, failure: str = "", unavailable: bool = False):
    """The typed error of a failed generation (its ``failure``; the server's absence: ModelUnavailable)."""
    kind = FAILURES.get(failure) or (ModelUnavailable if unavailable else GenerationError)
    raise kind(message)


class UnsupportedSetting(GenerationError):
    """A per-request setting the backend cannot honour (the API answers 400 naming it)."""

    def __init__(self, setting: str, backend: str, why: str = ""):
        self.setting = setting
        super().__init__(f"{setting} is not supported by the {backend} generator" + (f": {why}" if why else ""))


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first of a request's stop strings (OpenAI's rule: the text returned holds none)."""
    ends = [at for at in (text.find(s) for s in stops) if at >= 0]
    return text[: min(ends)] if ends else text


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
        values = {"temperature": self.temperature, "max_tokens": self.max_tokens, "stop": self.stop,
                  "seed": self.seed, "logprobs": self.logprobs}  # fmt: skip
        return [name for name, value in values.items() if value not in (None, ())]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """The settings every model backend shares (a backend's own settings class adds to them)."""

    model: str = setting(
        "", "model id or local path (a .gguf file for transformers)", output=True, metavar="ID_OR_PATH"
    )
    temperature: float = setting(0.0, "sampling temperature (0: greedy)", minimum=0, output=True)
    top_k: int | None = setting(None, "sample only from the k most likely tokens", minimum=1, output=True)
    max_tokens: int = setting(1000, "most tokens an answer may have", minimum=1, output=True)
    thinking: bool | None = setting(
        None,
        "models with a thinking mode (Qwen3): --no-thinking answers without it (the chat template's "
        "enable_thinking; with openai, sent to a server at --base-url as chat_template_kwargs)",
        output=True,
    )
    structured: bool = setting(
        True,
        "structured answers: JSON sentences, each citing only retrieved DOC ids (constrained decoding); "
        "--no-structured: the ANSWER / DOC IDS text format",
        output=True,
    )


def template_kwargs(settings: ModelSettings) -> dict:
    """What the chat template is given beside the messages (the thinking switch, when set)."""
    return {} if settings.thinking is None else {"enable_thinking": settings.thinking}


# The published sampling of the open models: temperature 0.2, top_k 50, 5000 tokens (capped by the window).
OPEN_MODEL_DEFAULTS = {"temperature": 0.2, "top_k": 50, "max_tokens": 5000}


def check_sampling(backend: Backend, sampling: Sampling) -> None:
    """Raise :class:`UnsupportedSetting` for the first setting given that the backend does not honour."""
    for name in sampling.given():
        if name not in backend.supports:
            raise UnsupportedSetting(name, backend.name)
    backend.refuse(sampling)


@dataclass(slots=True)
class Request:
    """One question with its retrieved chunks and the chat messages built from them."""

    question: str
    hits: list[Hit]
    messages: list[dict]  # OpenAI chat format: [{"role": ..., "content": ...}]
    sampling: Sampling = field(default_factory=Sampling)
    # Structured mode: the JSON schema the answer must follow (its sources an enum of the retrieved DOC
    # ids; generation.structured); None: the text format. ``language`` rebuilds the prompt in the text
    # format when a server refuses the schema.
    schema: dict | None = None
    language: str = "nl"
    # How sure retrieval is that the first hit answers the question (None: not estimated), the signals
    # it rests on, and whether the pipeline abstains (answers that no article in the corpus answers it).
    confidence: float | None = None
    signals: dict = field(default_factory=dict)
    abstain: bool = False
    date: str | None = None  # the day the question is asked of (None: today)
    # A conversation's follow-up: the question as it was read (the last message with the earlier questions: the
    # prompt's and the extractive answer's question), and the context's record (``context`` of the answer).
    asked: str = ""
    context: dict | None = None


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
    # The server refused the request's answer schema (a 400 about response_format): ask again in text.
    rejected_schema: bool = False
    failure: str = ""  # what kind of failure ``error`` is (a key of FAILURES; "": another)


@runtime_checkable
class Backend(Protocol):
    """Turns requests into raw model output (``ANSWER: ... DOC IDS: ...``, or JSON under ``request.schema``).

    A backend declares what it can do (:class:`BackendBase` gives the defaults); the pipeline, the server and
    the runs read these, never probe for them.
    """

    name: str
    supports: frozenset[str]  # the per-request settings of Sampling it honours (any other given is refused)
    structured: bool  # it can hold its output to a request's JSON schema: the pipeline then asks for it
    uses_model: bool  # it runs a language model (the extractive backend does not)
    inline_safe: bool  # cheap enough to run on a server's event loop
    schedules: bool  # it schedules many requests itself (``generate_stream``: vLLM's continuous batching)
    model_name: str  # the model it runs, as a question set's writer records it ("" for none)

    def generate(self, requests: Sequence[Request]) -> list[Generation]: ...

    def generate_stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Generation]]:
        """Each request's generation as it finishes (its index, the generation): a backend that ``schedules``."""
        ...

    def refuse(self, sampling: Sampling) -> None: ...

    def close(self) -> None: ...


DECLARED = ("name", "supports", "structured", "uses_model", "inline_safe", "schedules", "model_name")


def check_backend(backend) -> None:
    """A backend declares what it can do (:class:`Backend`): one line naming what it does not declare, once,
    where it is handed to a pipeline (it is never probed for it afterwards)."""
    missing = [name for name in DECLARED if not hasattr(backend, name)]
    missing += [name for name in ("generate", "refuse", "close") if not callable(getattr(backend, name, None))]
    if missing:
        raise TypeError(
            f"the backend {type(backend).__name__} does not declare {', '.join(missing)}: subclass "
            "wetqa.generation.BackendBase (its defaults) or declare them"
        )


class BackendBase:
    """The defaults of what a backend declares (:class:`Backend`): a model backend that honours no per-request
    setting, answers in text, runs in a worker thread and is given requests in batches."""

    name: str = ""
    supports: frozenset[str] = frozenset()
    structured: bool = False
    uses_model: bool = True
    inline_safe: bool = False
    schedules: bool = False
    model_name: str = ""

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        raise NotImplementedError

    def generate_stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Generation]]:
        """``(index, Generation)`` as each is ready (a backend that ``schedules`` yields them as they finish)."""
        yield from enumerate(self.generate(requests))

    def refuse(self, sampling: Sampling) -> None:
        """Raise :class:`UnsupportedSetting` for a combination of settings it cannot honour (each alone it can)."""

    def close(self) -> None:
        """Give back what it holds (an engine's processes)."""


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


# A cited text whose version is older than this (before the day asked of) may have changed since.
STALE_AFTER_DAYS = 365


def age_note(citations: Sequence[Citation], day: str | None = None) -> str:
    """One line when an answer rests on a text older than a year (the corpus may hold no later version)."""
    import datetime

    from wetqa.corpus.text import dutch_date

    asked = datetime.date.fromisoformat(day) if day else datetime.date.today()
    old = sorted(
        {c.version_date for c in citations if c.version_date and not c.valid_until}
        & {
            c.version_date
            for c in citations
            if c.version_date and (asked - datetime.date.fromisoformat(c.version_date)).days > STALE_AFTER_DAYS
        }
    )
    if not old:
        return ""
    return (
        f"Let op: de aangehaalde tekst is van {dutch_date(old[0])}, meer dan een jaar oud; de wet kan sindsdien "
        "gewijzigd zijn (controleer de actuele tekst via de link)."
    )


@dataclass(slots=True)
class Citation:
    id: str  # stable chunk id
    doc_id: str
    law_id: str
    law: str
    article: str
    text: str
    version_date: str = ""  # the version of the law the text is from ("" when the corpus does not know)
    valid_until: str = ""  # when the next version started ("": the newest version the corpus holds)
    url: str = ""  # the cited text's official source (its collection's link), as valid on its version date
    collection: str = DEFAULT_COLLECTION  # the source of the law (corpus.sources)

    @classmethod
    def from_hit(cls, hit: Hit) -> Citation:
        c = hit.chunk
        url = citation_url(c.collection, c.law_id, c.article, c.unit, c.version_date)
        return cls(c.id, c.doc_id, c.law_id, c.law, c.article, c.text, c.version_date, c.valid_until, url, c.collection)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "doc_id": self.doc_id,
            **document_fields(self.collection, self.law_id),
            "law": self.law,
            "article": self.article,
            "text": self.text,
            "version_date": self.version_date or None,
            "valid_until": self.valid_until or None,
            "url": self.url,
        }


@dataclass(slots=True)
class StreamedSentence:
    """A sentence of a structured answer, handed out as soon as the model has written it."""

    text: str  # as the model wrote it
    citations: list[Citation]  # its sources (retrieved hits)
    markers: list[int]  # the n of each source's [n] in the answer: its rank among the retrieved hits

    def render(self) -> str:
        """The sentence as it stands in the answer text, with its [n] markers."""
        return marked_text(self.text, self.markers)


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
    failure: str = ""  # what kind of failure ``error`` is (generation's FAILURES; "": another)
    finish_reason: str = "stop"
    confidence: float | None = None  # that the first retrieved article answers the question, in [0, 1]
    abstained: bool = False  # no article found: the answer says so and cites nothing
    related: list[Citation] = field(default_factory=list)  # when abstained: the closest articles, not cited
    date: str | None = None  # the day the question was asked of (its --date / "date"; None: today)
    structured: bool = False  # answered in the structured (JSON) format
    # Structured: the sentences with the DOC ids each cites (all retrieved); the answer text carries them
    # as inline [n] markers, n the rank of the source among the retrieved hits (ALCE's convention).
    sentences: list[StructuredSentence] = field(default_factory=list)
    note: str | None = None  # what the reader should know about the answer (no sources, broken JSON)
    # One line when the answer rests on a text older than a year: the law may have changed since.
    validity_note: str | None = None
    # A conversation's follow-up: the earlier turns read as its context and the question it was searched with
    # (retrieval.conversation.Context.to_json); None for a question read alone.
    context: dict | None = None

    # The answer as people read it ([n] markers, the source list, each sentence's support): the cite stage's
    # record (:func:`.citing.cite`), made once by the pipeline; the CLI, the API and the page read the same.
    cited: Any = field(default=None, repr=False, compare=False)

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
            "structured": self.structured,
            "sentences": [{"sentence": s.text, "sources": list(s.sources)} for s in self.sentences],
            "note": self.note or None,
            "usage": self.usage.to_json(),
            "error": self.error,
            "date": self.date,
            "validity_note": self.validity_note,
            "context": self.context,
            # Each sentence with the citation it rests on and the source sentences that support it (the API's
            # ``sentences``: one cite stage makes both).
            "support": [s.to_json() for s in self.cited.sentences] if self.cited is not None else None,
        }

    def marker(self, doc_id: str) -> int | None:
        """The n of a source's ``[n]`` marker: its rank among the retrieved hits (None: not retrieved)."""
        for n, h in enumerate(self.retrieved, 1):
            if h.chunk.doc_id == doc_id:
                return n
        return None
