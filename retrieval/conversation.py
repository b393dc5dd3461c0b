"""A conversation, not a single question: the last user message read in the context of what came before.

People and chat apps send conversations ("Hoeveel uur mag mijn baas mij laten werken?" ... "en als ik 17
ben?"). The earlier turns name the law and the situation; the last one alone often names neither. A
:class:`Conversation` holds the user and assistant turns (system, developer and tool messages are not read);
its :meth:`~Conversation.context` is what retrieval reads beside the last message:

- the earlier user questions (the latest :data:`CONTEXT_TURNS`), whose words and meaning are a second, weaker
  view of the question (candidates and features of the ranking, never one concatenated question);
- the articles cited earlier, recovered from the assistant's own answers: wetqa's citation ids (a chunk's stable
  id: law id, version date, article, part), its source lines (``[1] Burgerlijk Wetboek Boek 1, Artikel 266, ...``)
  and "artikel 5:6 van de Arbeidstijdenwet" mentions in any assistant text, so a client that sends back only
  the text of wetqa's answers still carries them;
- whether the last message changes the subject ("iets anders: ...", or a question that stands alone and
  names its own law): then the context is dropped and the question is read alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ._base import RetrievalError
from .rules import pairs as rule_pairs

MAX_MESSAGES = 40  # a conversation's messages read at most (more: a 400 naming messages)
MAX_CONTEXT_CHARS = 6000  # characters of the earlier turns read at most
CONTEXT_TURNS = 2  # the latest earlier user questions read as context
READ_ROLES = ("user", "assistant")

# A message that says it changes the subject (a soft switch: unless the rest of it points back).
_SOFT_SWITCH = frozenset(w for role, w in rule_pairs("conversation_words.tsv") if role == "soft_switch")
_SWITCH = re.compile(
    r"^\s*("
    + "|".join(re.escape(w) for role, w in rule_pairs("conversation_words.tsv") if role in ("switch", "soft_switch"))
    + r")\b",
    re.IGNORECASE,
)
# Words that point back at what was said before (a follow-up needs its context).
_BACK = frozenset(w for role, w in rule_pairs("conversation_words.tsv") if role == "back")
_OPENERS = frozenset(w for role, w in rule_pairs("conversation_words.tsv") if role == "opener")
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)
# "artikel 5:6", "art. 7:610", "Artikel 266", "artikel 3.12a"
_ARTICLE = re.compile(r"\b(?:artikel|art\.)\s*(\d+[a-z]{0,3}(?:[:.]\d+[a-z]{0,3})*)", re.IGNORECASE)
# A citation id as wetqa gives it (a chunk's stable id: law id, version date, article, part), looked up in the index.
_CHUNK_ID = re.compile(r"\b[A-Za-z][\w.-]*_\d{4}-\d{2}-\d{2}_art[\w.:-]+_\d+\b")


@dataclass(frozen=True, slots=True)
class Turn:
    role: str  # user or assistant
    text: str
    index: int  # its position in the messages as the client sent them


@dataclass(frozen=True, slots=True)
class Mention:
    """An article a turn names: its label and the laws named beside it (ids, resolved against an index
    later), or the law id itself when a citation id gave it."""

    article: str  # "Artikel 5:6" ("" for a citation id: the index's chunk says which)
    law_ids: tuple[str, ...] = ()
    law_text: str = ""  # the words around it that may name its law
    chunk_id: str = ""  # a citation id wetqa gave


@dataclass(frozen=True, slots=True)
class Context:
    """What retrieval reads beside the last message (see the module docstring)."""

    turns: tuple[int, ...]  # the messages read as context (their indexes as the client sent them)
    questions: tuple[str, ...]  # the earlier user questions read, oldest first
    mentions: tuple[Mention, ...] = ()  # the articles earlier turns cite or name
    law_text: str = ""  # the earlier turns' words that may name laws (resolved against an index)

    @property
    def text(self) -> str:
        """The earlier questions as one text (the context view's words and meaning)."""
        return " ".join(self.questions)

    def standalone(self, question: str) -> str:
        """The question as it was searched: the last message with the context it was read in."""
        return f"{question} (eerder: {' / '.join(self.questions)})" if self.questions else question

    def to_json(self, question: str) -> dict:
        return {"turns": list(self.turns), "standalone_question": self.standalone(question),
                "cited": list(dict.fromkeys(m.chunk_id or m.article for m in self.mentions))}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: tuple[Turn, ...]
    ignored: int = 0  # messages not read (system, developer, tool)
    _question_at: int = field(default=-1)

    @classmethod
    def of(cls, messages: Sequence) -> Conversation:
        """From chat messages (dicts or objects with ``role`` and ``content`` text); the last user message is
        the question. Too many messages, or earlier turns too long, is a :class:`ConversationError` naming the
        limit."""
        if len(messages) > MAX_MESSAGES:
            raise ConversationError(f"{len(messages)} messages: a conversation is read up to {MAX_MESSAGES}")
        turns, ignored = [], 0
        for i, m in enumerate(messages):
            role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (m.role, m.content)
            text = content if isinstance(content, str) else " ".join(
                (p.get("text") if isinstance(p, dict) else getattr(p, "text", "")) or "" for p in content or []
            )  # fmt: skip
            if role in READ_ROLES:
                turns.append(Turn(role, text or "", i))
            else:
                ignored += 1
        users = [k for k, t in enumerate(turns) if t.role == "user"]
        if not users:
            raise ConversationError("no user message: the last user message is the question")
        conversation = cls(tuple(turns), ignored, users[-1])
        # Only what is read counts: the turns from the first of the latest CONTEXT_TURNS questions on (a client
        # that sends the whole history is not refused for turns wetqa never reads).
        read = sum(len(t.text) for t in conversation._read_turns())
        if read > MAX_CONTEXT_CHARS:
            raise ConversationError(
                f"the earlier turns read hold {read} characters: a conversation's context is read up to "
                f"{MAX_CONTEXT_CHARS} (start a new conversation, or send shorter turns)"
            )
        return conversation

    def _read_turns(self) -> list[Turn]:
        """The earlier turns read as context: from the first of the latest CONTEXT_TURNS user questions on."""
        earlier = self.earlier
        users = [t for t in earlier if t.role == "user" and t.text.strip()]
        if not users:
            return []
        first = users[-CONTEXT_TURNS:][0].index
        return [t for t in earlier if t.index >= first]

    @classmethod
    def single(cls, question: str) -> Conversation:
        return cls((Turn("user", question, 0),), 0, 0)

    @property
    def question(self) -> str:
        return self.turns[self._question_at].text

    @property
    def earlier(self) -> tuple[Turn, ...]:
        return self.turns[: self._question_at]

    def context(self, law_names=None) -> Context | None:
        """The context the question is read in, or None: a single question, or one that changes the subject
        (``law_names``: an index's :class:`~.dutch.LawNames`, to tell a question that names its own law)."""
        earlier = self.earlier
        users = [t for t in earlier if t.role == "user" and t.text.strip()]
        if not users or switches_topic(self.question, earlier, law_names):
            return None
        read = users[-CONTEXT_TURNS:]
        after = self._read_turns()
        mentions = tuple(m for t in after for m in mentions_of(t.text))
        return Context(
            turns=tuple(t.index for t in after),
            questions=tuple(" ".join(t.text.split()) for t in read),
            mentions=tuple(dict.fromkeys(mentions)),
            law_text=" ".join(t.text for t in after),
        )


class ConversationError(RetrievalError):
    """A conversation wetqa does not read (over a limit, or without a question): a 400 naming ``messages``."""


def contexts_of(items: Sequence, retriever) -> list[Context | None]:
    """The conversation context of each dataset item (a ``QAItem`` whose ``messages`` hold a conversation; None
    for a single question), read against the retriever's law names (an articles pipeline's)."""
    law_names = retriever.features.law_names if retriever.features is not None else None
    return [Conversation.of(item.messages).context(law_names) if item.messages else None for item in items]


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 2]


def switches_topic(question: str, earlier: Iterable[Turn] = (), law_names=None) -> bool:
    """Whether the last message changes the subject: it says so ("iets anders: ..."), or it stands alone (at
    least six words of content, nothing pointing back, not opened by "en"/"maar") and names a law that no
    earlier turn named."""
    said = _SWITCH.match(question)
    if said:
        rest = _WORD.findall(question[said.end() :].lower())
        if said.group(1).lower() not in _SOFT_SWITCH or not any(w in _BACK for w in rest):
            return True
        return False  # "Nog een vraag: geldt dat ook ...?": it says so, but points back
    words = [w for w in _WORD.findall(question.lower())]
    if not words or words[0] in _OPENERS or any(w in _BACK for w in words):
        return False
    if len(content_words(question)) < 6:
        return False
    if law_names is None:
        return False
    named = law_names.named(question)
    if not named:
        return False
    before = set().union(*(law_names.named(t.text) for t in earlier)) if earlier else set()
    return not (named & before)


def mentions_of(text: str) -> list[Mention]:
    """The articles a text names: citation ids (their law id known) and "artikel X" with the words around it
    (a law named in the same line or sentence)."""
    out: list[Mention] = []
    for chunk_id in _CHUNK_ID.findall(text):
        out.append(Mention("", (), "", chunk_id))
    for piece in re.split(r"(?<=[.;!?])(?<![Aa]rt\.)\s+|\n", text):  # sentences ("art. 5" does not end one)
        for number in _ARTICLE.findall(piece):
            out.append(Mention(f"Artikel {number.rstrip('.')}", (), piece))
    return out


def resolve(context: Context, index, law_names) -> tuple[list[int], set[str]]:
    """(the ranked articles of the index the context cites, the laws it cites or names): an "artikel X" is
    found in the laws named beside it, else in the laws the earlier turns name."""
    import numpy as np

    from .engines.versions import article_label

    named_anywhere = law_names.named(context.law_text) if law_names is not None else set()
    articles: list[int] = []
    laws: set[str] = set(named_anywhere)
    from .engines.store import ChunkStore

    if not isinstance(index.chunks, ChunkStore):  # an articles index keeps its chunks in SQLite
        return articles, laws
    rows_of = index.chunks.article_rows
    chunk_article = np.asarray(index.chunk_article)
    for m in context.mentions:
        if m.chunk_id:  # a citation id: its chunk in the index says which article and law
            row = index.chunks.row_of(m.chunk_id)
            if row is None or not 0 <= row < len(chunk_article) or int(chunk_article[row]) < 0:
                continue
            articles.append(int(chunk_article[row]))
            laws.add(index.chunks.rows([row])[0].law_id)
            continue
        candidates = list(m.law_ids) or sorted(law_names.named(m.law_text) if law_names is not None else set())
        for law_id in (candidates or sorted(named_anywhere))[:3]:
            live = [r for r, expired, until in rows_of(law_id, article_label(m.article)) if not expired and not until]
            found = [int(chunk_article[r]) for r in live if 0 <= r < len(chunk_article)]
            found = [x for x in found if x >= 0]
            if found:
                articles.append(found[0])
                laws.add(law_id)
                break
    return list(dict.fromkeys(articles)), laws
