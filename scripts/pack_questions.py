"""Pack the questions writers wrote per article into the question set wetqa ships.

    .venv/bin/python scripts/pack_questions.py WRITERS_DIR [--out retrieval/questions.jsonl.gz]

WRITERS_DIR holds what the writing round produced (docs/questions.md says how it was run):
- ``keys.json``: each article id of the batches -> its law id, label, version date and text hash;
- ``skipped_auto.json``: the articles left out before writing, with the reason (citation titles, entry into
  force, amending clauses, preambles);
- ``out/bNNN.jsonl``: per batch, one line per article: ``{"id", "questions": [...]}`` or ``{"id", "skip"}``;
- ``regs/keys.json`` and ``regs/out/rNNN.jsonl`` (when there): the questions about whole regulations (what each
  is for), one line per regulation, packed as rows without an article (keyed by the regulation's id and version).

``--more DIR`` (repeatable): a later round that wrote more questions for articles of the first round's batches
(``DIR/*.jsonl``, lines ``{"id", "questions": [...]}`` by the same ids): added to each article's own, checked and
deduplicated with them, the article's writer then naming both batches (``helper:b001+c004``).

Every question is checked (:func:`wetqa.retrieval.questions.checked`: Dutch, a question, no article number,
4-45 words) and deduplicated (within an article, and across the set: a question written for two articles says
nothing about either); the report (stdout, JSON) counts articles, questions, skips by reason and by law.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from wetqa.retrieval.questions import SKIP_REASONS, ArticleQuestions, QuestionSet, checked, normalised

ROOT = Path(__file__).resolve().parent.parent


def _more(rounds: list[Path], written: dict, report: dict) -> None:
    """Add the questions of later rounds (by article id) to what the first round wrote, in place."""
    for folder in rounds:
        if not folder.is_dir():
            raise SystemExit(f"pack_questions: --more {folder}: no such folder")
        for out in sorted(folder.glob("*.jsonl")):
            for line in out.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line) if line.strip() else None
                except ValueError:
                    rec = "not JSON"
                if rec is None:
                    continue
                if not isinstance(rec, dict):
                    report["dropped"]["a line that is not a JSON object"] += 1
                    continue
                if rec.get("id") not in written:
                    report["dropped"]["a later round's article the first round did not write"] += 1
                    continue
                batch, first = written[rec["id"]]
                if first.get("skip") or not isinstance(rec.get("questions"), list):
                    continue  # an article the first round skipped stays skipped; questions must be a list
                own = {normalised(q) for q in first.get("questions") or []}
                added = []
                for q in rec["questions"]:
                    if isinstance(q, str) and normalised(q) not in own:
                        own.add(normalised(q))
                        added.append(q)
                written[rec["id"]] = (
                    f"{batch}+{out.stem}",
                    {**first, "questions": [*(first.get("questions") or []), *added]},
                )
                report["more"] += len(added)


def pack(folder: Path, against: list[Path] | None = None, more: list[Path] | None = None) -> tuple[QuestionSet, dict]:
    keys = json.loads((folder / "keys.json").read_text(encoding="utf-8"))
    rows: list[ArticleQuestions] = []
    report: dict = {"dropped": Counter(), "skips": Counter(), "by_law": defaultdict(Counter), "more": 0}
    seen_where: dict[str, str] = {}
    written: dict[str, tuple[str, dict]] = {}
    for out in sorted((folder / "out").glob("b*.jsonl")):
        for line in out.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                report["dropped"]["a line that is not JSON"] += 1
                continue
            if rec.get("id") in keys:
                written[rec["id"]] = (out.stem, rec)
    _more(more or [], written, report)
    # Questions written for two articles are dropped from both: count first, then keep.
    counts = Counter(n for _, rec in written.values() for n in {normalised(q) for q in rec.get("questions") or []})
    for aid, (batch, rec) in sorted(written.items()):
        key = keys[aid]
        base = {"law_id": key["law_id"], "article": key["article"], "version_date": key["version_date"],
                "text_hash": key["text_hash"][:16], "writer": f"helper:{batch}"}  # fmt: skip
        law = key.get("law") or key["law_id"]
        skip = rec.get("skip")
        if skip:
            reason = skip if skip in SKIP_REASONS else "technisch"
            rows.append(ArticleQuestions(**base, skip=reason))
            report["skips"][reason] += 1
            report["by_law"][law][f"skip:{reason}"] += 1
            continue
        seen: set[str] = set()
        own = [q for q in rec.get("questions") or [] if not (normalised(q) in seen or seen.add(normalised(q)))]
        unique = [q for q in own if counts[normalised(q)] == 1]
        report["dropped"]["written for two articles"] += len(own) - len(unique)
        kept, dropped = checked(unique)
        for d in dropped:
            report["dropped"][d.split(":")[0]] += 1
        for q in kept:
            seen_where.setdefault(normalised(q), aid)
        if kept:
            rows.append(ArticleQuestions(**base, questions=tuple(kept)))
            report["by_law"][law]["articles"] += 1
            report["by_law"][law]["questions"] += len(kept)
        else:
            report["dropped"]["an article left without questions"] += 1
    for key in json.loads((folder / "skipped_auto.json").read_text(encoding="utf-8")):
        reason = key["skip"]
        rows.append(ArticleQuestions(key["law_id"], key["article"], key["version_date"], key["text_hash"][:16],
                                     writer="rule", skip=reason))  # fmt: skip
        report["skips"][reason] += 1
        report["by_law"][key.get("law") or key["law_id"]][f"skip:{reason}"] += 1
    regulations = _regulations(folder / "regs", report)
    rows += regulations
    rows = _cleaned(rows, against or [], report)
    names = {k["law_id"]: k.get("law") or k["law_id"] for k in keys.values()}
    for counts in report["by_law"].values():
        counts.pop("articles", None), counts.pop("questions", None)
    for r in rows:
        if r.article and r.questions:
            report["by_law"][names.get(r.law_id, r.law_id)]["articles"] += 1
            report["by_law"][names.get(r.law_id, r.law_id)]["questions"] += len(r.questions)
    regulations = [r for r in rows if not r.article]
    qset = QuestionSet(rows)
    with_q = [r for r in qset.rows if r.questions]
    summary = {
        "articles_with_questions": len(with_q),
        "questions": len(qset),
        "articles_skipped": sum(report["skips"].values()),
        "articles_not_written": len(keys) - len(written),
        "skips": dict(report["skips"]),
        "dropped": dict(report["dropped"]),
        "near_copies_by_evaluation_set": dict(report.get("near_copies", {})),
        "questions_per_article": round(len(qset) / max(len(with_q), 1), 2),
        "added_by_later_rounds": report["more"],  # new to their article, before the checks and deduplication
        "regulations_with_questions": sum(1 for r in regulations if r.questions),
        "regulation_questions": sum(len(r.questions) for r in regulations),
        "regulations_skipped": sum(1 for r in regulations if r.skip),
        "by_law": {law: dict(c) for law, c in sorted(report["by_law"].items())},
    }
    return qset, summary


def _cleaned(rows: list[ArticleQuestions], against: list[Path], report: dict) -> list[ArticleQuestions]:
    """The rows without the questions written for an article and a regulation both (each round deduplicated its
    own), and without near copies of any question the ranking is evaluated on (decontaminated: a written question
    at word Jaccard >= NEAR_COPY to an evaluation question is dropped, whichever article it was written for)."""
    from dataclasses import replace

    from wetqa.corpus.dataset import load_dataset
    from wetqa.retrieval.questions import NEAR_COPY, asked_in, near_copies

    counts = Counter(normalised(q) for r in rows for q in set(r.questions))
    asked: list[str] = []
    source: list[str] = []
    for path in against:
        texts = asked_in(load_dataset(path))
        asked += texts
        source += [path.stem] * len(texts)
    written = [(i, q) for i, r in enumerate(rows) for q in r.questions if counts[normalised(q)] == 1]
    copies = near_copies([q for _, q in written], asked, NEAR_COPY)
    report["near_copies"] = Counter(source[j] for j, _ in copies.values())
    keep: dict[int, list[str]] = {}
    for n, (i, q) in enumerate(written):
        if n not in copies:
            keep.setdefault(i, []).append(q)
    report["dropped"]["written for an article and a regulation"] += sum(
        1 for r in rows for q in r.questions if counts[normalised(q)] > 1
    )
    report["dropped"]["a near copy of an evaluation question"] += len(copies)
    out = []
    for i, r in enumerate(rows):
        if r.skip or r.writer == "rule":
            out.append(r)
        elif keep.get(i):
            out.append(replace(r, questions=tuple(keep[i])))
        else:
            report["dropped"]["an article left without questions"] += 1
    return out


def _regulations(folder: Path, report: dict) -> list[ArticleQuestions]:
    """The questions about whole regulations (rows without an article), checked as the articles' are."""
    from wetqa.retrieval.questions import text_hash

    if not (folder / "keys.json").is_file():
        return []
    keys = json.loads((folder / "keys.json").read_text(encoding="utf-8"))
    out = []
    written: dict[str, tuple[str, dict]] = {}
    for path in sorted((folder / "out").glob("r*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("id") in keys:
                written.setdefault(rec["id"], (path.stem, rec))
    # A question written for two regulations (the yearly levies of one body, say) says nothing about either.
    counts = Counter(normalised(q) for _, rec in written.values() for q in set(rec.get("questions") or []))
    for rid, (batch, rec) in sorted(written.items()):
        key = keys[rid]
        base = {"law_id": key["law_id"], "article": "", "version_date": key["version_date"],
                "text_hash": text_hash(f"{key['law_id']}@{key['version_date']}"), "writer": f"helper:{batch}"}  # fmt: skip
        if rec.get("skip"):
            out.append(ArticleQuestions(**base, skip=rec["skip"] if rec["skip"] in SKIP_REASONS else "technisch"))
            continue
        unique = [q for q in rec.get("questions") or [] if counts[normalised(q)] == 1]
        report["dropped"]["regulation: written for two regulations"] += len(rec.get("questions") or []) - len(unique)
        kept, dropped = checked(unique)
        for d in dropped:
            report["dropped"]["regulation: " + d.split(":")[0]] += 1
        if kept:
            out.append(ArticleQuestions(**base, questions=tuple(kept)))
    return out


def _evaluation_sets() -> list[Path]:
    shared = ROOT.parent / "shared" / "data" / "legalqa"
    if not shared.is_dir():  # checking less without a word would ship a set that copies the benchmark's questions
        raise SystemExit(f"pack_questions: no {shared} (the benchmark's questions): put ../shared beside the project, "
                         "or name every evaluation set with --against")  # fmt: skip
    return sorted((ROOT / "bench" / "data").glob("*.jsonl")) + sorted(shared.glob("*.jsonl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("writers", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "retrieval" / "questions.jsonl.gz")
    parser.add_argument("--report", type=Path, help="write the report (JSON) here too")
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        help="an evaluation dataset the set must not copy (repeatable; default bench/data/*.jsonl and "
        "../shared/data/legalqa/*.jsonl)",
    )
    parser.add_argument("--more", type=Path, action="append", help="a later round's folder of added questions")
    args = parser.parse_args(argv)
    against = args.against or _evaluation_sets()
    qset, summary = pack(args.writers, against, args.more)
    summary["decontaminated_against"] = [str(p) for p in against]
    qset.write(args.out)
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "by_law"}, indent=2, ensure_ascii=False))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
