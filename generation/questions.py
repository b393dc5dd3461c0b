"""``wetqa questions write``: the questions people ask, written per article by a language model.

For each article of a corpus that is in force, a generator backend (vLLM, any OpenAI-compatible server,
transformers) is asked for the situations in which a person needs the article, as questions in everyday
Dutch: the everyday names of its concepts, some informal, some carrying the common misconception. Each
article's answer is parsed leniently (one question a line; ``GEEN: reden`` for an article that states no rule
a person could ask about), checked (:func:`wetqa.retrieval.questions.checked`) and appended to a JSONL question
set (:mod:`wetqa.retrieval.questions`) with its law id, label, version, text hash and writer.

The file is the journal: a killed run resumes where it stopped (a torn last line is cut off), an article
whose text changed since gets new questions (it has another text hash) and an unchanged one keeps its own.
Articles whose model call failed are not written, so the next run asks again.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._base import GenerationError, Request, Sampling

DEFAULT_N = 3
# The units of a corpus that state rules (the preamble does not).
UNITS = ("artikel", "enig-artikel", "bijlage", "tekst", "circulaire.divisie", "verdragtekst")
MAX_ARTICLE_WORDS = 450  # of a long article, its first 450 words: the rule and its first conditions

PROMPT = """Je bent een Nederlandse jurist die weet hoe gewone mensen over het recht praten.
Hieronder staat een artikel uit de Nederlandse wet. Schrijf {n} vragen die iemand stelt in een situatie waarin hij dit artikel nodig heeft.
- Schrijf in alledaags Nederlands, zoals mensen het in een zoekbalk of op een forum typen, niet in de woorden van het artikel.
- Gebruik de alledaagse namen van de begrippen (baas voor werkgever, huisbaas, mijn ex, uitkering, boete, erfenis).
- Wissel af: verschillende situaties die het artikel regelt; minstens één vraag informeel; als er een bekend misverstand over bestaat, één vraag die dat misverstand bevat.
- Elke vraag 5 tot 30 woorden en eindigt op een vraagteken. Noem geen artikelnummer en geen lid.
Als het artikel geen regel bevat waar iemand naar kan vragen (vervallen, alleen definities, een wijziging van een andere wet, de citeertitel, de inwerkingtreding), antwoord dan alleen: GEEN: <reden>.
Geef alleen de vragen, elk op een eigen regel.

{law}, {article}{heading}
{text}"""

_SKIP_FORM = re.compile(r"^\W*GEEN\b", re.IGNORECASE)
_SKIP_WORDS = {
    "vervallen": "vervallen",
    "definitie": "definities",
    "wijzig": "wijzigingsbepaling",
    "citeertitel": "citeertitel",
    "aangehaald": "citeertitel",
    "inwerking": "inwerkingtreding",
    "overgang": "overgangsrecht",
    "aanhef": "aanhef",
}
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|vraag\s*\d*\s*:)\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Article:
    """An article to write questions for, as the corpus holds it."""

    law_id: str
    law: str
    article: str
    title: str
    version_date: str
    text: str

    @property
    def hash(self) -> str:
        from wetqa.retrieval.questions import text_hash

        return text_hash(self.text)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.law_id, " ".join(self.article.split()), self.hash)


def corpus_articles(corpus: Path, laws: Sequence[str] = ()) -> Iterator[Article]:
    """The articles in force of a corpus (``articles.jsonl``), of the laws given (all when none)."""
    from wetqa.corpus.build import read_manifest
    from wetqa.io import read_jsonl

    read_manifest(corpus)  # a folder that is not a corpus is named as such
    wanted = set(laws)
    for rec in read_jsonl(Path(corpus) / "articles.jsonl"):
        if rec.get("expired") or rec.get("valid_until") or (rec.get("unit") or "artikel") not in UNITS:
            continue
        law_id = rec.get("law_id") or ""
        if wanted and law_id not in wanted:
            continue
        yield Article(law_id, rec.get("law") or law_id, rec["article"], rec.get("title") or "",
                      rec.get("version_date") or "", rec.get("text") or "")  # fmt: skip


def prompt(article: Article, n: int) -> list[dict]:
    """The chat messages that ask for ``n`` questions about one article."""
    words = article.text.split()
    text = article.text if len(words) <= MAX_ARTICLE_WORDS else " ".join(words[:MAX_ARTICLE_WORDS]) + " [...]"
    heading = f" ({article.title})" if article.title else ""
    content = PROMPT.format(n=n, law=article.law, article=article.article, heading=heading, text=text)
    return [{"role": "user", "content": content}]


def parse(text: str) -> tuple[list[str], str]:
    """(the questions of a model's answer, the reason it gave for none): one question a line, bullets and
    numbers taken off; ``GEEN: reden`` says the article has none."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and _SKIP_FORM.match(lines[0]) and not lines[0].rstrip().endswith("?"):
        # "GEEN: reden", "GEEN - reden", "Geen vragen: ..."; not a question that begins with "Geen"
        reason = lines[0].lower()
        return [], next((v for k, v in _SKIP_WORDS.items() if k in reason), "technisch")
    out = []
    for line in lines:
        line = _BULLET.sub("", line).strip().strip('"“”').strip()
        # A line may hold two questions ("...? En ...?"): each ending in its own question mark.
        for part in re.findall(r"[^?]*\?", line):
            part = part.strip().strip('"“”').strip()
            if part:
                out.append(" ".join(part.split()))
    return out, ""


def _done(path: Path) -> set[tuple[str, str, str]]:
    """The articles (law id, label, text hash) a question set file holds already; a file that is not a
    question set is refused (wetqa appends only to its own)."""
    from wetqa.io import read_journal
    from wetqa.retrieval.questions import row_from_json

    if not path.exists():
        return set()
    if not path.is_file():
        raise GenerationError(f"--out {path} is not a file")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b" or path.suffix == ".gz":
        raise GenerationError(f"--out {path} is compressed: wetqa appends to plain JSON lines; give a .jsonl --out")
    # Every whole line is read as a question row before anything is written: a file that is not wetqa's own is
    # refused untouched. Only then is a torn last record (an interrupted run's) cut by read_journal.
    *whole, tail = data.split(b"\n")
    done = set()
    for n, raw in enumerate(whole, 1):
        if not raw.strip():
            continue
        try:
            done.add(row_from_json(json.loads(raw), f"{path}:{n}").key)
        except ValueError as exc:
            raise GenerationError(
                f"--out {path} is not a question set wetqa writes ({exc}); give another --out"
            ) from None
    if tail.strip():
        try:  # a whole row whose newline is missing (an editor took it): kept, and given its newline
            row = row_from_json(json.loads(tail), f"{path}:{len(whole) + 1}")
        except ValueError:
            row = None
        if row is not None:
            done.add(row.key)
            with open(path, "ab") as fh:
                fh.write(b"\n")
        elif not done:
            raise GenerationError(f"--out {path} is not a question set wetqa writes (no whole row); give another --out")
    read_journal(path)  # cuts a torn tail (an interrupted run's), if any
    return done


def write_questions(
    corpus: Path,
    out: Path,
    backend,
    n: int = DEFAULT_N,
    laws: Sequence[str] = (),
    limit: int | None = None,
    batch_size: int = 8,
    writer: str = "",
    temperature: float | None = 0.7,
    max_tokens: int = 400,
    progress: bool = True,
) -> dict:
    """Questions for every article in force of ``corpus`` not yet in ``out`` (by its text's hash), appended to
    ``out`` a batch at a time; returns what was done."""
    from wetqa.console import progress_bar
    from wetqa.io import refuse_inside_built
    from wetqa.retrieval.questions import ArticleQuestions, checked

    out = Path(out)
    refuse_inside_built(out, None)
    if not backend.uses_model:
        raise GenerationError("writing questions needs a language model: give --generator (vllm, openai, transformers)")
    done = _done(out)
    articles = list(corpus_articles(corpus, laws))
    if laws and not articles:
        raise GenerationError(f"no article in force of {', '.join(laws)} in {corpus}")
    todo = [a for a in articles if a.key not in done]
    if limit is not None:
        todo = todo[:limit]
    supports = backend.supports
    sampling = Sampling(
        temperature=temperature if "temperature" in supports else None,
        max_tokens=max_tokens if "max_tokens" in supports else None,
    )
    writer = writer or backend.model_name or backend.name
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, Any] = {"articles": len(articles), "done_before": len(articles) - len([a for a in articles if a.key not in done]),
              "written": 0, "skipped": 0, "failed": 0, "questions": 0, "dropped": 0}  # fmt: skip
    first_error = None
    t0 = time.perf_counter()
    with progress_bar(total=len(todo), progress=progress, unit="article", desc="writing questions") as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            gens = backend.generate([Request("", [], prompt(a, n), sampling) for a in batch])
            rows = []
            for a, g in zip(batch, gens):
                if g.error:
                    counts["failed"] += 1
                    first_error = first_error or g.error
                    continue
                questions, skip = parse(g.text)
                kept, dropped = checked(questions)
                counts["dropped"] += len(dropped)
                base: dict[str, Any] = {"law_id": a.law_id, "article": a.article, "version_date": a.version_date,
                        "text_hash": a.hash, "writer": writer}  # fmt: skip
                if kept:
                    rows.append(ArticleQuestions(**base, questions=tuple(kept)))
                    counts["written"] += 1
                    counts["questions"] += len(kept)
                elif skip:  # the writer said why the article has none (GEEN: reden)
                    rows.append(ArticleQuestions(**base, skip=skip))
                    counts["skipped"] += 1
                else:  # no question survived the checks (cut short, an article number in each): asked again next run
                    counts["failed"] += 1
                    first_error = first_error or f"{a.law_id} {a.article}: no question passed the checks"
            if rows:
                with open(out, "a", encoding="utf-8") as fh:
                    fh.write("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rows))
                    fh.flush()
                    os.fsync(fh.fileno())
            bar.update(len(batch))
    counts["seconds"] = round(time.perf_counter() - t0, 1)
    counts["out"] = str(out)
    if first_error:
        counts["first_error"] = first_error
    return counts
