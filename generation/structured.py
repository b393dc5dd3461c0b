"""Structured answers: JSON sentences, each with the DOC ids of the retrieved articles it rests on.

The model is held (by the engine's constrained decoding) to :func:`answer_schema`::

    {"answer": [{"sentence": "...", "sources": ["DOC0226", ...]}, ...]}

where a source can only be one of the DOC ids the prompt showed, so an answer cannot cite what was
not retrieved. The parser still checks every id (a server that ignores the schema may write anything)
and recovers the complete sentences of JSON that was cut off or broken; :class:`SentenceStream` hands
sentences out as soon as their object closes, for streaming.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# ALCE judges at most three citations per sentence; more would only be cut off there.
MAX_SOURCES = 3
# Bounds that keep a small model from repeating itself until max_tokens: a sentence of at most about
# 60 words (a long sentence of law), at most 8 of them. Without them SmolLM2 looped inside a sentence
# ("zijn deze vraag, zijn deze vraag, ...") and no sentence was ever closed.
MAX_SENTENCES = 8
MAX_SENTENCE_CHARS = 400
SCHEMA_NAME = "wetqa_answer"
# No whitespace between JSON tokens, for the engines on llguidance (vLLM's guidance backend, the
# transformers processor; xgrammar ignores the key and vLLM is told per request): a small model
# otherwise fills its answer with new lines until max_tokens (SmolLM2 did, 3 of 51 answers).
COMPACT = {"whitespace_flexible": False}
# JSON-schema keywords OpenAI's strict mode refuses (string lengths, engine options); the OpenAI API
# gets the schema without them, every other engine with them.
UNPORTABLE = ("minLength", "maxLength", "x-guidance")


def answer_schema(doc_ids: Sequence[str]) -> dict:
    """The JSON schema of an answer whose sources are exactly ``doc_ids`` (each at most once in the enum).

    With no ids the sources must be empty: the model answers without sources. Only keywords that
    vLLM's xgrammar and guidance and llguidance compile are used (no ``uniqueItems``: duplicates are
    dropped when parsing); :func:`portable` leaves out what OpenAI's strict mode refuses.
    """
    ids = list(dict.fromkeys(doc_ids))
    sources: dict = {"type": "array", "items": {"type": "string", "enum": ids}, "minItems": 1, "maxItems": MAX_SOURCES}
    if not ids:
        sources = {"type": "array", "items": {"type": "string"}, "maxItems": 0}
    sentence = {
        "type": "object",
        "properties": {"sentence": {"type": "string", "maxLength": MAX_SENTENCE_CHARS}, "sources": sources},
        "required": ["sentence", "sources"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"answer": {"type": "array", "items": sentence, "minItems": 1, "maxItems": MAX_SENTENCES}},
        "required": ["answer"],
        "additionalProperties": False,
        "x-guidance": COMPACT,
    }


def portable(schema):
    """``schema`` without the keywords OpenAI's strict mode refuses (:data:`UNPORTABLE`)."""
    if isinstance(schema, dict):
        return {k: portable(v) for k, v in schema.items() if k not in UNPORTABLE}
    if isinstance(schema, list):
        return [portable(v) for v in schema]
    return schema


def schema_ids(schema: dict | None) -> list[str]:
    """The DOC ids a schema of :func:`answer_schema` allows (empty for another schema)."""
    try:
        items = schema["properties"]["answer"]["items"]["properties"]["sources"]["items"]  # type: ignore[index]
        return list(items.get("enum", []))
    except (KeyError, TypeError):
        return []


@dataclass(frozen=True, slots=True)
class StructuredSentence:
    """One sentence of a structured answer and the DOC ids it cites, as the model wrote them."""

    text: str
    sources: tuple[str, ...] = ()


def _sentence_of(text: str) -> StructuredSentence | None:
    """A sentence object's JSON -> a sentence (None when it is not one: no text, wrong types)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("sentence"), str) or not obj["sentence"].strip():
        return None
    sources = obj.get("sources", [])
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list):
        sources = []
    return StructuredSentence(obj["sentence"].strip(), tuple(str(s) for s in sources if isinstance(s, (str, int))))


class SentenceStream:
    """The sentences of a growing JSON answer, each handed out once its object has closed.

    A scanner keeps the nesting depth outside strings (escapes respected); an object that opens at
    depth 3 (answer object > sentence list > sentence object) is parsed when it closes. What surrounds
    the JSON (a Markdown fence, text) is skipped, and a broken object is passed over, never raised.
    """

    def __init__(self) -> None:
        self.raw = ""
        self.sentences: list[StructuredSentence] = []
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._start: int | None = None

    def feed(self, piece: str) -> list[StructuredSentence]:
        self.raw += piece
        raw, out = self.raw, []
        for i in range(self._pos, len(raw)):
            ch = raw[i]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
                if ch == "{" and self._depth == 3:
                    self._start = i
            elif ch in "}]":
                if ch == "}" and self._depth == 3 and self._start is not None:
                    sentence = _sentence_of(raw[self._start : i + 1])
                    if sentence is not None:
                        out.append(sentence)
                    self._start = None
                self._depth = max(0, self._depth - 1)
        self._pos = len(raw)
        self.sentences += out
        return out


def looks_structured(raw: str) -> bool | None:
    """Whether output is JSON (True), text (False), or cannot be told yet (None: only space so far).

    A server that ignores ``response_format`` answers in text; its stream is then read as text.
    """
    lead = raw.lstrip()
    if lead.startswith("```"):
        lead = lead[3:].lstrip("json").lstrip()
        if not lead:
            return None
    if not lead:
        return None
    return lead.startswith("{")


@dataclass(slots=True)
class StructuredOutput:
    """A structured answer parsed: its sentences with their sources among the retrieved ids."""

    sentences: list[StructuredSentence]
    cited: list[str]  # retrieved ids cited by any sentence, in order of first mention
    dropped: list[str] = field(default_factory=list)  # ids cited that were not retrieved
    format_ok: bool = True  # the whole output was JSON of the schema's shape
    problem: str | None = None  # what was wrong with it, when it was not


def _whole(raw: str) -> tuple[list[StructuredSentence] | None, str | None]:
    """The sentences of a complete answer object, or (None, what is wrong)."""
    text = raw.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    if fence:
        text = fence.group(1)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at character {exc.pos})"
    items = obj.get("answer") if isinstance(obj, dict) else None
    if not isinstance(items, list):
        return None, 'JSON without an "answer" list'
    sentences = [_sentence_of(json.dumps(item)) for item in items]
    if any(s is None for s in sentences):
        return None, 'an "answer" item is not a sentence with sources'
    return [s for s in sentences if s is not None], None


def _number(doc_id: str) -> int | None:
    m = re.search(r"(\d+)\s*$", doc_id)
    return int(m.group(1)) if m else None


class SourceResolver:
    """Sources as written -> retrieved DOC ids: exactly, or by their number (``DOC226`` for ``DOC0226``,
    as the text parser matches them); anything else is dropped and counted."""

    def __init__(self, retrieved_doc_ids: Sequence[str]):
        self.known = set(retrieved_doc_ids)
        self.by_number: dict[int, str] = {}
        for d in retrieved_doc_ids:
            n = _number(d)
            if n is not None:
                self.by_number.setdefault(n, d)
        self.dropped: list[str] = []

    def resolve(self, sentence: StructuredSentence) -> StructuredSentence:
        ids: list[str] = []
        for source in sentence.sources:
            n = _number(source)
            doc = source if source in self.known else (self.by_number.get(n) if n is not None else None)
            if doc is None:
                if source not in self.dropped:
                    self.dropped.append(source)
            elif doc not in ids:
                ids.append(doc)
        return StructuredSentence(sentence.text, tuple(ids))


def parse_structured(raw: str, retrieved_doc_ids: Sequence[str]) -> StructuredOutput:
    """Sentences and sources of a structured answer; never raises.

    Invalid JSON keeps the sentences that were complete (``format_ok`` False, ``problem`` says why).
    Sources are matched by :class:`SourceResolver`.
    """
    sentences, problem = _whole(raw or "")
    if sentences is None:
        sentences = SentenceStream().feed(raw or "") if raw else []
    resolver = SourceResolver(retrieved_doc_ids)
    resolved = [resolver.resolve(s) for s in sentences]
    cited = list(dict.fromkeys(d for s in resolved for d in s.sources))
    return StructuredOutput(resolved, cited, resolver.dropped, format_ok=problem is None, problem=problem)


_END = re.compile(r"([.!?:;]+[\"')\]]*)\s*$")


def with_markers(sentence: str, numbers: Sequence[int]) -> str:
    """``sentence`` with ``[n]`` markers before its closing punctuation, as ALCE writes them ("... [1][3].")."""
    if not numbers:
        return sentence
    marks = "".join(f"[{n}]" for n in numbers)
    m = _END.search(sentence)
    if m is None:
        return f"{sentence.rstrip()} {marks}"
    return f"{sentence[: m.start()].rstrip()} {marks}{m.group(1)}"


def marked_text(text: str, numbers: Sequence[int]) -> str:
    """A structured sentence as it stands in the answer: every sentence in it carries its markers.

    A model's "sentence" may hold two; ALCE's rule judges each sentence the splitter finds against its
    own markers, so each gets the sources of the item it belongs to.
    """
    try:
        from .sentences import split_sentences

        parts = split_sentences(text) or [text]
    except ImportError:  # syntok (the serve and eval extras) is not installed: the item stays one sentence
        parts = [text]
    return " ".join(with_markers(part, numbers) for part in parts)
