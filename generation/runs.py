"""Batch generation over a dataset: one JSONL per run, resumable, config saved beside it.

Each finished question is appended and flushed at once, so a killed run
continues where it stopped; a half-written last line is discarded on resume.
A question whose generation fails is recorded with its error and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from wetqa import __version__
from wetqa.console import progress_bar
from wetqa.corpus.dataset import QAItem
from wetqa.io import OwnedFolder, own_folder, read_journal, recognised, wetqa_made, write_owned_json
from wetqa.retrieval.conversation import contexts_of

from ._base import Answer, GenerationError, Request
from .pipeline import Pipeline
from .prompt import render_plain
from .registry import output_setting_names


def versions(*dists: str) -> dict:
    out = {"wetqa": __version__, "python": platform.python_version()}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            pass
    return out


def run_file(out: Path, run: int) -> Path:
    return out / f"run-{run}.jsonl"


def read_done(path: Path) -> dict[str, dict]:
    """The latest record of each question in a run file (a retried question's new record wins);
    a truncated last line (killed mid-write) is cut off."""
    return {str(rec["id"]): rec for rec in read_journal(path)}


def record(qid: str, run: int, k: int, request: Request, answer: Answer, seconds: float) -> dict:
    return {
        "id": qid,
        "run": run,
        "question": answer.question,
        "k": k,
        "prompt": render_plain(request.messages),
        "raw": answer.raw,
        "answer": answer.answer,
        "cited_doc_ids": [c.doc_id for c in answer.citations],
        "cited_ids": [c.id for c in answer.citations],
        "dropped_ids": answer.dropped_ids,
        "format_ok": answer.format_ok,
        "structured": answer.structured,
        "sentences": [{"sentence": x.text, "sources": list(x.sources)} for x in answer.sentences],
        "note": answer.note,
        "retrieved": [
            {
                "id": h.chunk.id,
                "doc_id": h.chunk.doc_id,
                "law_id": h.chunk.law_id,
                "article": h.chunk.article,
                "score": round(h.score, 6),
            }
            for h in answer.retrieved
        ],
        "usage": answer.usage.to_json(),
        "error": answer.error,
        "unavailable": answer.unavailable,
        "confidence": None if answer.confidence is None else round(answer.confidence, 4),
        "abstained": answer.abstained,
        "related_ids": [c.id for c in answer.related],
        "seconds": round(seconds, 4),
    }


def prompt_fingerprint(language: str = "nl", structured: bool = False) -> str:
    """A hash of the prompt as rendered (in the text or the structured format): any change of
    instructions, example or layout changes it."""
    from wetqa.corpus.records import Chunk
    from wetqa.retrieval import Hit

    from .prompt import build_messages

    hit = Hit(Chunk("X_1", "DOC0001", "LAW0000000", "2000-01-01", "Wet", "Artikel 1", 1, "Tekst."), 1.0, 1)
    messages = build_messages("Vraag?", [hit], language, structured)
    rendered = json.dumps(messages, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(rendered.encode()).hexdigest()[:16]


def run_inputs(
    retriever: str, k: int, language: str, generator: dict, indexes: Sequence[dict], query_options: dict | None = None
) -> dict:
    """What a run's answers depend on; a folder of runs is resumed only with the same inputs.

    ``indexes``: each index's identity (:func:`wetqa.retrieval.index_identity`); ``query_options``:
    how they are combined at query time (fusion, weights, re-scoring, re-ranking).
    """
    return {
        "indexes": list(indexes),
        "retrieval": {"retriever": retriever, **(query_options or {})},
        # The generator settings that change what a model writes (not its concurrency or timeout).
        "generator": {key: generator.get(key) for key in ("kind", *output_setting_names())},
        "k": k,
        "language": language,
        "prompt": prompt_fingerprint(language, bool(generator.get("structured"))),
    }


def run_folder(out: str | os.PathLike) -> OwnedFolder:
    """A run folder under the owned-folder rule (one of an older wetqa is known by its config.json)."""
    return own_folder(out, ("config.json",), adopt=recognised("config.json", ("config.json", "run-*.jsonl", "eval")))


def _settled(inputs: dict) -> dict:
    """Inputs with the generator settings that are None left out: a setting a later wetqa added, which
    this generator does not have (None), changes nothing a folder made before it holds."""
    generator = {k: v for k, v in (inputs.get("generator") or {}).items() if v is not None}
    return {**inputs, "generator": generator}


def check_run_folder(
    out: str | os.PathLike, inputs: dict, force: bool = False, items: Sequence[QAItem] | None = None
) -> None:
    """Refuse (or with ``force`` clear) a run folder made with other inputs, or whose answers answer other
    questions than ``items`` under the same ids; call it before loading a model."""
    _check_inputs(Path(out), inputs, force, items)


def _other_question(runs: Sequence[Path], items: Sequence[QAItem]) -> str | None:
    """Where a run file answers, under an id, another question than the dataset's of that id (a dataset edited,
    or another one with the same ids), said in a few words; None when every answer is to its question."""
    by_id = {it.id: it for it in items}
    for path in runs:
        for qid, rec in read_done(path).items():
            if qid in by_id and not by_id[qid].asks(rec.get("question")):
                return f"{path.name} answers another question under id {qid} than the dataset asks"
    return None


def _other_dataset(runs: Sequence[Path], items: Sequence[QAItem]) -> str | None:
    """When most of the runs' answers are to questions the dataset does not ask and it asks questions they do
    not answer, the folder was made for another dataset (a part of the same questions, more of them, or an
    edited dataset is resumed)."""
    answered = {qid for path in runs for qid in read_done(path)}
    asked = {it.id for it in items}
    foreign, new = sorted(answered - asked), asked - answered
    if not new or 2 * len(foreign) <= len(answered):  # an edited dataset (a question dropped, one added) resumes
        return None
    return (
        f"its runs answer {len(foreign)} question(s) the dataset does not ask (e.g. id {foreign[0]}) and not "
        f"{len(new)} it asks: they were made for another dataset"
    )


def _check_inputs(out: Path, inputs: dict, force: bool, items: Sequence[QAItem] | None = None) -> None:
    folder = run_folder(out)  # a folder holding files wetqa did not write is refused before anything else
    config = out / "config.json"
    if config.exists() and not wetqa_made(config):
        raise GenerationError(f"{config} is not a file wetqa wrote; wetqa will not overwrite it: give another --out")
    runs = sorted(out.glob("run-*.jsonl"))
    if not runs:
        return
    old = json.loads(config.read_text(encoding="utf-8")).get("inputs") if config.is_file() else None
    if old is None or _settled(old) != _settled(inputs):
        changed = (
            "no inputs recorded (an older wetqa)"
            if old is None
            else ", ".join(sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))) + " changed"
        )
        problem = f"{out} holds runs made with other inputs ({changed})"
    else:
        other = (_other_question(runs, items) or _other_dataset(runs, items)) if items is not None else None
        if other is None:
            return
        problem = f"{out}: {other}"
    if not force:
        raise GenerationError(f"{problem}; give another --out, or --force to start these runs again")
    for path in runs:  # wetqa's own run files (the folder holds nothing else), made with what is no longer asked for
        if path.name in folder.names:
            path.unlink()


def generate_runs(
    pipeline: Pipeline,
    items: Sequence[QAItem],
    out: str | os.PathLike,
    runs: int = 1,
    config: dict | None = None,
    batch_size: int = 16,
    progress: bool = True,
    inputs: dict | None = None,
    force: bool = False,
) -> dict:
    """Generate answers for every item in every run; returns a summary (per-run counts, failures).

    A folder is resumed only when ``inputs`` (see :func:`run_inputs`) match those recorded in its
    ``config.json``; otherwise it is refused, or with ``force`` started again. Resuming retries the
    questions whose earlier attempt failed: the new record is appended and supersedes the old one.
    """
    out = Path(out)
    folder = run_folder(out)
    if inputs is not None:
        _check_inputs(out, inputs, force, items)  # a no-op when check_run_folder already ran
    write_owned_json(
        out / "config.json",
        {
            **(config or {}),
            "inputs": inputs,
            "runs": runs,
            "k": pipeline.k,
            "backend": pipeline.backend.name,
            "retriever": pipeline.retriever.name,
            "n_questions": len(items),
            "versions": versions("openai", "transformers", "vllm", "torch", "bm25s", "pyserini"),
        },
        "runs/1",
    )
    run_summaries: list[dict] = []
    summary = {"runs": run_summaries, "out": str(out)}
    for run in range(1, runs + 1):
        path = folder.file(run_file(out, run).name)
        done = read_done(path)
        todo = [it for it in items if it.id not in done or done[it.id].get("error")]
        bar = progress_bar(
            total=len(items), initial=len(items) - len(todo), desc=f"run {run}", unit="q", progress=progress
        )
        with open(path, "a", encoding="utf-8") as fh:
            streaming = pipeline.backend.schedules
            # An engine that schedules requests itself (continuous batching) gets every pending question at
            # once; others go by batches. Each answer is written the moment it is ready, so a killed run
            # loses at most those in flight.
            size = len(todo) if streaming else batch_size
            for start in range(0, len(todo), size):
                batch = todo[start : start + size]
                t0 = time.perf_counter()
                # A conversation's last user message is read in the context of the turns before it.
                requests = pipeline.requests(
                    [it.question for it in batch], contexts=contexts_of(batch, pipeline.retriever)
                )
                for i, ans in pipeline.generate_stream(requests):
                    seconds = time.perf_counter() - t0
                    rec = record(
                        batch[i].id, run, pipeline.k, requests[i], ans, seconds if streaming else seconds / len(batch)
                    )
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    fh.flush()
                    done[batch[i].id] = rec
                    bar.update(1)
        bar.close()
        recs = list(done.values())
        run_summaries.append(
            {
                "run": run,
                "file": str(path),
                "questions": len(recs),
                "failed": sum(1 for r in recs if r.get("error")),
                "unavailable": sum(1 for r in recs if r.get("error") and r.get("unavailable")),
                "first_error": next((r["error"] for r in recs if r.get("error")), None),
                "parse_failures": sum(1 for r in recs if not r.get("error") and not r.get("format_ok")),
                "structured": sum(1 for r in recs if not r.get("error") and r.get("structured")),
                "dropped_ids": sum(len(r.get("dropped_ids", [])) for r in recs),
            }
        )
    return summary
