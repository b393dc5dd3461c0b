"""What the benches' ``--smoke`` modes run on: the laws of the first dev questions, and those questions.

A bench's smoke mode runs its own code on tiny inputs in seconds, so that the test suite runs every
bench (tests/test_bench.py) and a bench that stops working is noticed. Its figures mean nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wetqa.corpus.sources import law_id_of

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DEV = SHARED / "legalqa" / "dev.jsonl"
OOC = ROOT / "bench" / "data" / "out_of_corpus.jsonl"
QUESTIONS = 8  # the first dev questions ask about two laws (the WOB and the Vreemdelingenwet)


def announce(what: str = "") -> None:
    print(f"smoke run{': ' + what if what else ''} (tiny inputs: the figures mean nothing)", flush=True)


def questions(n: int = QUESTIONS) -> list[dict]:
    lines = [line for line in DEV.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines[:n]]


def dataset(dest: Path, n: int = QUESTIONS) -> Path:
    """The first ``n`` dev questions as a dataset file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions(n)), encoding="utf-8")
    return dest


def laws(dest: Path, n: int = QUESTIONS) -> Path:
    """A folder with copies of the shared law files that the first ``n`` dev questions cite."""
    ids = {law_id_of(a) for q in questions(n) for a in q["articles"]}
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted((SHARED / "bwb").glob("*.xml")):
        if f.name.split("_")[0] in ids:
            shutil.copy(f, dest / f.name)
    return dest


def corpus(work: Path) -> Path:
    from wetqa.corpus import BuildOptions, build_corpus

    build_corpus([laws(work / "bwb")], work / "corpus", BuildOptions(workers=1), progress=False)
    return work / "corpus"


def index(work: Path, retriever: str = "articles", rescore: bool = False) -> Path:
    """An index of the smoke laws (their corpus built first when missing); ``rescore``: with dense
    re-scoring recorded, by a tiny random model."""
    from wetqa.retrieval import build_index

    src = work / "corpus" if (work / "corpus").is_dir() else corpus(work)
    model = {"model": str(tiny_model(work))} if rescore else None
    build_index(src, retriever, work / retriever, progress=False, rescore=model)
    return work / retriever


def tiny_model(work: Path) -> Path:
    """A tiny random sentence-transformers BERT (tests/tiny_models.py); its passage vectors are cached
    under ``work``, not in the user's embedding cache."""
    import os
    import sys

    os.environ["WETQA_CACHE"] = str(work / "embeddings")
    if not (work / "tiny-model" / "st").is_dir():
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import tiny_sentence_transformer

        tiny_sentence_transformer(work / "tiny-model")
    return work / "tiny-model" / "st"


def out_of_corpus(n: int = QUESTIONS) -> list[dict]:
    return [json.loads(line) for line in OOC.read_text(encoding="utf-8").splitlines() if line.strip()][:n]


def dense_index(work: Path) -> Path:
    """A dense index of the smoke laws with :func:`tiny_model`."""
    from wetqa.retrieval import build_index

    src = work / "corpus" if (work / "corpus").is_dir() else corpus(work)
    build_index(src, "dense", work / "dense", {"model": str(tiny_model(work))}, progress=False)
    return work / "dense"


def main(ap, run, smoke, required: str, missing: str) -> None:
    """A bench's command line: ``--smoke`` runs ``smoke(args)`` (tiny inputs it makes itself); else the
    argument ``required`` must be given (``missing`` says what to give) and ``run(args)`` measures."""
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    if not getattr(args, required):
        ap.error(missing)
    run(args)


def over_indexes(args, run, name: str) -> None:
    """A smoke run of a bench over indexes (calibrate, cross_validate): a few questions per set of the
    indexes given, or of a tiny index of the first dev questions' laws (re-scored by a tiny random model,
    so that both pipelines are fitted) built in a temporary folder."""
    import tempfile

    announce("" if args.index else "a tiny index re-scored by a tiny random model")
    if args.index:
        return run(args)
    with tempfile.TemporaryDirectory(prefix=f"wetqa-{name}-") as tmp:
        args.index = [str(index(Path(tmp), rescore=True))]
        run(args)
