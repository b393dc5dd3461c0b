"""The legal QA dataset: questions with gold answers and gold articles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

from wetqa.io import text_lines


class DatasetError(ValueError):
    pass


def data_files(path: str | Path, pattern: str, what: str) -> list[Path]:
    """The files matching ``pattern`` in a folder, or the one file named; FileNotFoundError naming ``what`` if none."""
    path = Path(path)
    files = sorted(path.glob(pattern)) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no {what} ({pattern}) at {path}")
    return files


@dataclass(frozen=True, slots=True)
class GoldArticle:
    law_id: str
    article: str  # label as written: "Artikel 266"
    law: str = ""

    @property
    def key(self) -> str:
        return article_key(self.law_id, self.article)


def article_key(law_id: str, article: str) -> str:
    """How an article is matched to gold: document id + label (gold does not name a version)."""
    return f"{law_id}|{' '.join(article.split())}"


@dataclass(slots=True)
class QAItem:
    id: str
    question: str
    answer: str = ""
    articles: list[GoldArticle] = field(default_factory=list)
    paper_chunk_ids: list[str] = field(default_factory=list)
    laws: list[str] = field(default_factory=list)  # law-level gold (a question without gold articles)
    # A conversation whose last user message is the question (a follow-up is read in its context): the chat
    # messages as given, [] for a single question.
    messages: list[dict] = field(default_factory=list)

    @property
    def gold_keys(self) -> set[str]:
        return {a.key for a in self.articles}

    def asks(self, question: object) -> bool:
        """Whether a run's recorded question is this item's (its words; spacing is no other question). A record
        without one (an older wetqa's, a user's own run) is taken to be."""
        return not isinstance(question, str) or question.split() == self.question.split()


class _GoldRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")
    law_id: StrictStr = Field(min_length=1)
    article: StrictStr = Field(min_length=1)
    law: StrictStr | None = ""

    @model_validator(mode="before")
    @classmethod
    def _collection_named_id(cls, data):
        """``law_id``, or the name a collection's own data gives it (a BWB benchmark says ``bwb_id``)."""
        if isinstance(data, dict) and "law_id" not in data:
            from .sources import id_fields

            named = next((k for k in id_fields() if k in data), None)
            if named is not None:
                return {**data, "law_id": data[named]}
        return data


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: StrictStr
    content: StrictStr


class _QARecord(BaseModel):
    """One dataset line as it must be: checked at the boundary, so later code can trust the types."""

    model_config = ConfigDict(extra="ignore")
    id: StrictStr | StrictInt | None = None
    # A single question, or a conversation (``messages``: chat messages, the last user message the question).
    question: StrictStr | None = Field(default=None, min_length=1)
    messages: list[_Message] = []
    answer: StrictStr | None = ""
    articles: list[_GoldRecord] = []
    # Law-level gold, for a question a law answers rather than one article of it (``wetqa fit``: the right law
    # first, and whether an index that lacks it should answer at all).
    laws: list[StrictStr] = []
    paper_chunk_ids: list[StrictStr] = []


def first_problem(exc: ValidationError) -> str:
    """One line naming the first invalid field, e.g. ``articles.0.law_id: Input should be a valid string``."""
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err.get("loc", ())) or "record"
    return f"{where}: {err.get('msg', 'invalid value')}"


def _lines(path: Path):
    try:
        yield from text_lines(path)  # an invalid byte is named with its line
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


def load_dataset(path: str | Path) -> list[QAItem]:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset not found: {path}")
    items: list[QAItem] = []
    seen: set[str] = set()
    for lineno, line in _lines(path):
        where = f"{path}:{lineno}"
        if not line.strip():
            continue
        try:
            row = _QARecord.model_validate_json(line)
        except ValidationError as exc:
            if exc.errors()[0].get("type", "").startswith("json"):
                raise DatasetError(f"{where}: not a JSON object line") from None
            raise DatasetError(f"{where}: {first_problem(exc)}") from None
        if row.messages:
            users = [m for m in row.messages if m.role == "user"]
            if not users:
                raise DatasetError(f"{where}: messages: no user message (the last user message is the question)")
            if row.question is not None and row.question.strip() != users[-1].content.strip():
                raise DatasetError(f"{where}: question: not the last user message of messages")
            row.question = users[-1].content
        if row.question is None:
            raise DatasetError(f"{where}: question: a question or messages is required")
        if not row.question.strip():
            raise DatasetError(f"{where}: question: must not be blank")
        qid = str(row.id if row.id is not None else lineno)
        if qid in seen:
            raise DatasetError(f"{where}: duplicate question id {qid!r}")
        seen.add(qid)
        items.append(
            QAItem(
                id=qid,
                question=row.question.strip(),
                answer=row.answer or "",
                articles=[GoldArticle(a.law_id, a.article, a.law or "") for a in row.articles],
                paper_chunk_ids=list(row.paper_chunk_ids),
                laws=list(row.laws),
                messages=[{"role": m.role, "content": m.content} for m in row.messages],
            )
        )
    if not items:
        raise DatasetError(f"{path}: no questions")
    return items
