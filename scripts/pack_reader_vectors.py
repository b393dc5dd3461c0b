"""Read every written question of a question set (or every article of an index) with the reader, and pack their
vectors to ship.

    .venv/bin/python scripts/pack_reader_vectors.py [--questions retrieval/questions.jsonl.gz]
        [--reader google/embeddinggemma-300m] [--out retrieval/questions.reader.npz]
    .venv/bin/python scripts/pack_reader_vectors.py --articles data/index [--out retrieval/articles.reader.npz]

The texts are read through the reader's cache (what was read before is kept: an interrupted run resumes), as a
question's candidates read them (written questions through the sentence-similarity prompt, articles as titled
documents; the int8 graph), and packed in int8 (``retrieval/models/vector_pack.py``): written questions at the
Matryoshka cut the ranking compares them at (``QUESTIONS_DIM``), articles whole.
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
    ap.add_argument("--articles", metavar="INDEX", help="pack the article documents of this articles index instead")
    ap.add_argument("--reader", default="google/embeddinggemma-300m")
    ap.add_argument(
        "--out", help="default retrieval/questions.reader.npz (retrieval/articles.reader.npz with --articles)"
    )
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()

    import numpy as np

    from wetqa.console import UnavailableError, progress_bar
    from wetqa.retrieval import RetrievalError, open_index
    from wetqa.retrieval.articles.reader import ARTICLES_PACK, QUESTIONS_DIM, QUESTIONS_PACK, Reader, article_documents
    from wetqa.retrieval.models.vector_pack import PROBE_TEXT, write_pack
    from wetqa.retrieval.questions import QuestionSet

    out = Path(args.out or ROOT / "retrieval" / (ARTICLES_PACK if args.articles else QUESTIONS_PACK))
    try:  # what is to be read first, then the reader (a wrong path is told before a model loads)
        index = open_index(args.articles, rescore=False) if args.articles else None
        qset = None if args.articles else QuestionSet.load(args.questions)
        reader = Reader(args.reader)
        prompt = reader.view_prompts[-1]
        if index is not None:
            texts_of, titles = article_documents(index, np.arange(index.n_articles))
            texts = list(dict.fromkeys(reader.encoder.document(t, title) for t, title in zip(texts_of, titles)))
            keys = texts  # an article is looked up by its document as the reader reads it
        else:
            assert qset is not None
            keys = list(dict.fromkeys(q for row in qset.rows if row.article for q in row.questions))
            texts = [prompt + q for q in keys]  # a written question is looked up by its own text
    except (RetrievalError, UnavailableError, OSError) as exc:
        print(f"pack_reader_vectors: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    parts = []
    step = 64 if args.articles else 512
    with progress_bar(total=len(texts), unit="text", desc="reading", progress=not args.no_progress) as bar:
        for start in range(0, len(texts), step):
            parts.append(reader.cache.vectors(texts[start : start + step], reader._formatted))
            bar.update(len(texts[start : start + step]))
    vectors = np.concatenate(parts) if parts else np.zeros((0, reader.encoder.dim), dtype=np.float32)
    about = {"reader": args.reader, "variant": reader.encoder.passage_variant}
    if args.articles:
        probe = reader.encoder.encode_formatted([reader.encoder.document(PROBE_TEXT, "")])
        about |= {"index": Path(args.articles).name, "tokens": reader.max_tokens}
        dim = int(reader.encoder.dim)
    else:
        probe = reader.encoder.encode_formatted([prompt + PROBE_TEXT])
        about |= {"questions_sha256": hashlib.sha256(Path(args.questions).read_bytes()).hexdigest()[:16],
                  "prompt": prompt}  # fmt: skip
        dim = QUESTIONS_DIM
    meta = write_pack(out, keys, vectors, dim, probe, about)
    mb = out.stat().st_size / 1e6
    print(f"{out}: {meta['texts']} texts at {meta['dim']} dimensions, {mb:.1f} MB, "
          f"read in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
