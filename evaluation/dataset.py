"""The legal QA dataset: questions with gold answers and gold articles."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


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
    bwb_id: str
    article: str  # label as written: "Artikel 266"
    law: str = ""

    @property
    def key(self) -> str:
        return article_key(self.bwb_id, self.article)


def article_key(bwb_id: str, article: str) -> str:
    """How an article is matched to gold: bwb id + label (gold does not name a version)."""
    return f"{bwb_id}|{' '.join(article.split())}"


@dataclass(slots=True)
class QAItem:
    id: str
    question: str
    answer: str = ""
    articles: list[GoldArticle] = field(default_factory=list)
    paper_chunk_ids: list[str] = field(default_factory=list)

    @property
    def gold_keys(self) -> set[str]:
        return {a.key for a in self.articles}


def load_dataset(path: str | Path) -> list[QAItem]:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset not found: {path}")
    items: list[QAItem] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not a JSON line ({exc.msg})") from None
            if not isinstance(row, dict) or not str(row.get("question", "")).strip():
                raise DatasetError(f"{where}: each line needs a non-empty 'question'")
            qid = str(row.get("id", lineno))
            if qid in seen:
                raise DatasetError(f"{where}: duplicate question id {qid!r}")
            seen.add(qid)
            try:
                gold = [GoldArticle(a["bwb_id"], a["article"], a.get("law", "")) for a in row.get("articles", [])]
            except (KeyError, TypeError):
                raise DatasetError(f"{where}: 'articles' must be a list of {{bwb_id, article}} objects") from None
            items.append(
                QAItem(
                    id=qid,
                    question=row["question"].strip(),
                    answer=row.get("answer", "") or "",
                    articles=gold,
                    paper_chunk_ids=list(row.get("paper_chunk_ids", [])),
                )
            )
    if not items:
        raise DatasetError(f"{path}: no questions")
    return items
