"""The one-shot prompt, written for wetqa, in Dutch (default) and English.

Every prompt shares the same instructions and worked example before the
question-specific part, so engines with prefix caching (vLLM) reuse them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from wetqa.retrieval import Hit

from ._base import Request
from .structured import answer_schema

# The worked example's chunks, shared by both languages (the law text stays Dutch), and its answer in
# each format.
_EXAMPLE_CHUNKS = """[DOC0101] Burgerlijk Wetboek Boek 4, Artikel 55
1. Minderjarigen die de leeftijd van zestien jaren hebben bereikt, kunnen een uiterste wilsbeschikking maken.

[DOC0102] Burgerlijk Wetboek Boek 1, Artikel 233
Minderjarigen zijn zij die de leeftijd van achttien jaren niet hebben bereikt.

[DOC0103] Wet op de kansspelen, Artikel 1
Het is verboden gelegenheid te geven tot het mededingen naar prijzen of premies."""
_EXAMPLE_SENTENCES = (
    (
        "Een minderjarige mag een uiterste wilsbeschikking, zoals een testament, maken zodra hij de leeftijd van "
        "zestien jaar heeft bereikt.",
        ["DOC0101"],
    ),
    ("Minderjarig is wie nog geen achttien jaar oud is.", ["DOC0102"]),
)
_EXAMPLE_TEXT = "ANSWER: " + " ".join(s for s, _ in _EXAMPLE_SENTENCES) + "\nDOC IDS: DOC0101, DOC0102"
_EXAMPLE_JSON = json.dumps(
    {"answer": [{"sentence": s, "sources": ids} for s, ids in _EXAMPLE_SENTENCES]}, ensure_ascii=False
)

SYSTEM_NL = (
    "Je bent een zorgvuldige Nederlandse juridische assistent. Je beantwoordt vragen over Nederlandse wetgeving "
    "uitsluitend op basis van de meegegeven wetsartikelen en je vermeldt precies op welke artikelen je antwoord steunt."
)
_TASK_NL = """Beantwoord de vraag met behulp van de wetsartikelen hieronder. Elk artikel begint met zijn DOC-ID.
Niet elk artikel is relevant: gebruik alleen de artikelen die de vraag echt beantwoorden.
Geef een volledig antwoord in het Nederlands, in eigen zinnen maar dicht bij de tekst van de wet, met alle voorwaarden die de wet noemt."""
_FORMAT_NL = {
    "text": """Antwoord precies in deze vorm, zonder iets ervoor of erna:
ANSWER: <het antwoord>
DOC IDS: <de DOC-ID's van de gebruikte artikelen, gescheiden door komma's>""",
    "json": """Antwoord in JSON, precies in deze vorm, zonder iets ervoor of erna: de zinnen van het antwoord, elke zin met de DOC-ID's van de artikelen waarop hij steunt.
{"answer": [{"sentence": "<een zin>", "sources": ["<DOC-ID>"]}]}""",
}
_EXAMPLE_NL = "Voorbeeld\n\nVraag: Wanneer mag een minderjarige van zestien jaar een testament maken?"
_NO_SOURCES_NL = 'Er is geen wetsartikel gevonden: laat "sources" leeg.'

SYSTEM_EN = (
    "You are a careful legal assistant for Dutch law. You answer questions about Dutch legislation using only the "
    "law articles provided, and you state exactly which articles your answer rests on."
)
_TASK_EN = """Answer the question using the law articles below. Each article starts with its DOC ID.
Not every article is relevant: use only the articles that really answer the question.
Give a complete answer in Dutch, in your own sentences but close to the text of the law, with every condition the law sets."""
_FORMAT_EN = {
    "text": """Answer in exactly this form, with nothing before or after:
ANSWER: <the answer>
DOC IDS: <the DOC IDs of the articles used, separated by commas>""",
    "json": """Answer in JSON, in exactly this form, with nothing before or after: the sentences of the answer, each with the DOC IDs of the articles it rests on.
{"answer": [{"sentence": "<a sentence>", "sources": ["<DOC ID>"]}]}""",
}
_EXAMPLE_EN = "Example\n\nQuestion: When may a sixteen-year-old minor make a will?"
_NO_SOURCES_EN = 'No law article was found: leave "sources" empty.'


def _instructions(task: str, formats: dict[str, str], example: str, now: str, fmt: str) -> str:
    answer = _EXAMPLE_JSON if fmt == "json" else _EXAMPLE_TEXT
    return f"{task}\n{formats[fmt]}\n\n{example}\n\n{_EXAMPLE_CHUNKS}\n\n{answer}\n\n{now}"


INSTRUCTIONS_NL = _instructions(_TASK_NL, _FORMAT_NL, _EXAMPLE_NL, "Nu de echte vraag.", "text")
INSTRUCTIONS_EN = _instructions(_TASK_EN, _FORMAT_EN, _EXAMPLE_EN, "Now the real question.", "text")
STRUCTURED_NL = _instructions(_TASK_NL, _FORMAT_NL, _EXAMPLE_NL, "Nu de echte vraag.", "json")
STRUCTURED_EN = _instructions(_TASK_EN, _FORMAT_EN, _EXAMPLE_EN, "Now the real question.", "json")

LANGUAGES = {"nl": (SYSTEM_NL, INSTRUCTIONS_NL, "Vraag"), "en": (SYSTEM_EN, INSTRUCTIONS_EN, "Question")}
# The structured prompt per language, and what it adds when there is no article to cite.
STRUCTURED = {"nl": (STRUCTURED_NL, _NO_SOURCES_NL), "en": (STRUCTURED_EN, _NO_SOURCES_EN)}


def format_chunk(hit: Hit) -> str:
    c = hit.chunk
    return f"[{c.doc_id}] {c.law}, {c.article}\n{c.text}"


def build_messages(question: str, hits: Sequence[Hit], language: str = "nl", structured: bool = False) -> list[dict]:
    """The chat messages: instructions and worked example (the answer format's), question, chunks."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown prompt language {language!r}; use nl or en")
    system, instructions, q_label = LANGUAGES[language]
    chunks = "\n\n".join(format_chunk(h) for h in hits)
    if structured:
        instructions, no_sources = STRUCTURED[language]
        chunks = chunks or no_sources
    user = f"{instructions}\n\n{q_label}: {question}\n\n{chunks}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_request(question: str, hits: Sequence[Hit], language: str = "nl", structured: bool = False) -> Request:
    """A request in the text format, or (``structured``) with the JSON schema whose sources are the hits' ids."""
    schema = answer_schema([h.chunk.doc_id for h in hits]) if structured else None
    messages = build_messages(question, hits, language, structured)
    return Request(question=question, hits=list(hits), messages=messages, schema=schema, language=language)


def as_text(request: Request) -> Request:
    """The same request in the text format (for a server that refused the answer schema)."""
    question = request.asked or request.question
    return replace(request, messages=build_messages(question, request.hits, request.language), schema=None)


def render_plain(messages: Sequence[dict]) -> str:
    """The prompt as one string (for logs and for models without a chat template)."""
    return "\n\n".join(m["content"] for m in messages)
