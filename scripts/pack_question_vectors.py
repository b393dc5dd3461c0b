"""Read every written question of a question set with the reader and pack their vectors to ship beside it.

    .venv/bin/python scripts/pack_question_vectors.py [--questions retrieval/questions.jsonl.gz]
        [--reader google/embeddinggemma-300m] [--out retrieval/questions.reader.npz]

The questions are read through the reader's cache (what was read before is kept: an interrupted run resumes),
as a person's question's candidates read them (the sentence-similarity prompt, the int8 graph), and packed at
the Matryoshka cut the ranking compares them at (``QUESTIONS_DIM``), int8 (``retrieval/models/vector_pack.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", default=str(ROOT / "retrieval" / "questions.jsonl.gz"))
    ap.add_argument("--reader", default="google/embeddinggemma-300m")
    ap.add_argument("--out", default=str(ROOT / "retrieval" / "questions.reader.npz"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()

    import numpy as np

    from wetqa.console import UnavailableError, progress_bar
    from wetqa.retrieval import RetrievalError
    from wetqa.retrieval.articles.reader import QUESTIONS_DIM, Reader
    from wetqa.retrieval.models.vector_pack import PROBE_TEXT, write_pack
    from wetqa.retrieval.questions import QuestionSet

    try:
        qset = QuestionSet.load(args.questions)
        reader = Reader(args.reader)
    except (RetrievalError, UnavailableError, OSError) as exc:
        print(f"pack_question_vectors: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    texts = list(dict.fromkeys(q for row in qset.rows if row.article for q in row.questions))
    t0 = time.perf_counter()
    parts = []
    step = 512
    with progress_bar(total=len(texts), unit="question", desc="reading", progress=not args.no_progress) as bar:
        for start in range(0, len(texts), step):
            parts.append(reader.written_questions(texts[start : start + step]))
            bar.update(len(texts[start : start + step]))
    vectors = np.concatenate(parts) if parts else np.zeros((0, reader.dim), dtype=np.float32)
    probe = reader.encoder.encode_formatted([reader.view_prompts[-1] + PROBE_TEXT])
    digest = hashlib.sha256(Path(args.questions).read_bytes()).hexdigest()[:16]
    meta = write_pack(Path(args.out), texts, vectors, QUESTIONS_DIM, probe,
                      {"reader": args.reader, "questions_sha256": digest, "variant": reader.encoder.passage_variant,
                       "prompt": reader.view_prompts[-1]})  # fmt: skip
    mb = Path(args.out).stat().st_size / 1e6
    print(f"{args.out}: {meta['texts']} questions at {meta['dim']} dimensions, {mb:.1f} MB, "
          f"read in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
