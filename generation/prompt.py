"""The one-shot prompt, written for wetqa, in Dutch (default) and English.

Every prompt shares the same instructions and worked example before the
question-specific part, so engines with prefix caching (vLLM) reuse them.
"""

from __future__ import annotations

from collections.abc import Sequence

from wetqa.retrieval._base import Hit

from ._base import Request

# The worked example's chunks and answer, shared by both languages (the law text stays Dutch).
_EXAMPLE_BODY = """[DOC0101] Burgerlijk Wetboek Boek 4, Artikel 55
1. Minderjarigen die de leeftijd van zestien jaren hebben bereikt, kunnen een uiterste wilsbeschikking maken.

[DOC0102] Burgerlijk Wetboek Boek 1, Artikel 233
Minderjarigen zijn zij die de leeftijd van achttien jaren niet hebben bereikt.

[DOC0103] Wet op de kansspelen, Artikel 1
Het is verboden gelegenheid te geven tot het mededingen naar prijzen of premies.

ANSWER: Een minderjarige mag een uiterste wilsbeschikking, zoals een testament, maken zodra hij de leeftijd van zestien jaar heeft bereikt. Minderjarig is wie nog geen achttien jaar oud is.
DOC IDS: DOC0101, DOC0102"""

SYSTEM_NL = (
    "Je bent een zorgvuldige Nederlandse juridische assistent. Je beantwoordt vragen over Nederlandse wetgeving "
    "uitsluitend op basis van de meegegeven wetsartikelen en je vermeldt precies op welke artikelen je antwoord steunt."
)
INSTRUCTIONS_NL = f"""Beantwoord de vraag met behulp van de wetsartikelen hieronder. Elk artikel begint met zijn DOC-ID.
Niet elk artikel is relevant: gebruik alleen de artikelen die de vraag echt beantwoorden.
Geef een volledig antwoord in het Nederlands, in eigen zinnen maar dicht bij de tekst van de wet, met alle voorwaarden die de wet noemt.
Antwoord precies in deze vorm, zonder iets ervoor of erna:
ANSWER: <het antwoord>
DOC IDS: <de DOC-ID's van de gebruikte artikelen, gescheiden door komma's>

Voorbeeld

Vraag: Wanneer mag een minderjarige van zestien jaar een testament maken?

{_EXAMPLE_BODY}

Nu de echte vraag."""

SYSTEM_EN = (
    "You are a careful legal assistant for Dutch law. You answer questions about Dutch legislation using only the "
    "law articles provided, and you state exactly which articles your answer rests on."
)
INSTRUCTIONS_EN = f"""Answer the question using the law articles below. Each article starts with its DOC ID.
Not every article is relevant: use only the articles that really answer the question.
Give a complete answer in Dutch, in your own sentences but close to the text of the law, with every condition the law sets.
Answer in exactly this form, with nothing before or after:
ANSWER: <the answer>
DOC IDS: <the DOC IDs of the articles used, separated by commas>

Example

Question: When may a sixteen-year-old minor make a will?

{_EXAMPLE_BODY}

Now the real question."""

LANGUAGES = {"nl": (SYSTEM_NL, INSTRUCTIONS_NL, "Vraag"), "en": (SYSTEM_EN, INSTRUCTIONS_EN, "Question")}


def format_chunk(hit: Hit) -> str:
    c = hit.chunk
    return f"[{c.doc_id}] {c.law}, {c.article}\n{c.text}"


def build_messages(question: str, hits: Sequence[Hit], language: str = "nl") -> list[dict]:
    if language not in LANGUAGES:
        raise ValueError(f"unknown prompt language {language!r}; use nl or en")
    system, instructions, q_label = LANGUAGES[language]
    chunks = "\n\n".join(format_chunk(h) for h in hits)
    user = f"{instructions}\n\n{q_label}: {question}\n\n{chunks}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_request(question: str, hits: Sequence[Hit], language: str = "nl") -> Request:
    return Request(question=question, hits=list(hits), messages=build_messages(question, hits, language))


def render_plain(messages: Sequence[dict]) -> str:
    """The prompt as one string (for logs and for models without a chat template)."""
    return "\n\n".join(m["content"] for m in messages)
