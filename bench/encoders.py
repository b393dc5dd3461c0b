"""How fast an index build encodes passages through the ONNX encoder, against the fixed batches of four it ran before.

    python bench/encoders.py [--index data/index] [--model MODEL] [--reader MODEL] [--budgets 256,512] [--smoke]

On a sample of the index's real chunks (1,000) and of its articles' place texts (2,000: law, Boek / Titel /
Afdeling, a few dozen tokens), each through the model's int8 passage graph:
- **reference**: four texts a run, one session on all the threads (what every build ran before);
- **token batches**: as many texts a run as fit ``BATCH_TOKENS`` padded tokens (short texts many to a run);
- **build**: token batches, two runs at once on sessions of their own (what ``wetqa index`` runs now).
Printed: texts per second, the ratio to the reference measured in the same run, and each configuration's
cosine with the float32 graph's vectors (mean and least): the int8 graph quantizes a run's activations with one
scale (EmbeddingGemma's down projections: one a token), so which texts share a run moves a vector a little, and
larger runs must not move it further. ``--model`` defaults to the
converted mE5-small; ``--reader`` adds EmbeddingGemma's articles (its first 256 tokens, 160 chunks).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def texts_of(index: Path, chunks: int, places: int) -> tuple[list[str], list[str]]:
    """Random real chunk texts and place texts of an index."""
    from wetqa.retrieval.articles.passages import place_text
    from wetqa.retrieval.engines.store import ChunkStore

    store = ChunkStore(Path(index) / "store.sqlite")
    rng = np.random.default_rng(0)
    pick = rng.choice(len(store), size=min(chunks, len(store)), replace=False).tolist()
    chunk_texts = [c.indexed_text for c in store.rows(sorted(pick))]
    pick = rng.choice(len(store), size=min(places, len(store)), replace=False).tolist()
    place_texts = [place_text(c.law, c.path_label) for c in store.rows(sorted(pick))]
    return chunk_texts, place_texts


def configurations(model: str, max_length: int | None, budgets: Sequence[int] = ()) -> dict:
    """name -> (encoder, module settings) of the three configurations, and a build's with each other token
    budget a run given (``--budgets``)."""
    from wetqa.retrieval.models import onnx_encoder

    token = {"BATCH_TOKENS": onnx_encoder.BATCH_TOKENS, "MAX_ROWS": onnx_encoder.MAX_ROWS}
    fixed_four = {"BATCH_TOKENS": 10**9, "MAX_ROWS": 4}
    one = onnx_encoder.OnnxEncoder(model, fast_tokenizer=True, max_length=max_length)
    two = onnx_encoder.OnnxEncoder(model, fast_tokenizer=True, max_length=max_length, workers=2)
    out = {"reference": (one, fixed_four), "token batches": (one, token), "build": (two, token)}
    for budget in budgets:
        out[f"build, {budget}"] = (two, token | {"BATCH_TOKENS": budget})
    return out


def measure(
    model: str, sets: dict[str, list[str]], max_length: int | None = None, rounds: int = 2, budgets: Sequence[int] = ()
) -> None:
    """Print texts/s per configuration and set: the best of ``rounds`` alternating rounds."""
    from wetqa.retrieval.models import onnx_encoder

    configs = configurations(model, max_length, budgets)
    saved = {k: getattr(onnx_encoder, k) for k in ("BATCH_TOKENS", "MAX_ROWS")}
    try:
        for set_name, texts in sets.items():
            best: dict[str, float] = {}
            vectors: dict[str, np.ndarray] = {}
            one = configs["reference"][0]
            fp32 = one._encode([one.passage_prefix + t for t in texts], session=one.session)
            for _ in range(rounds):  # alternating, so a busy moment of the machine falls on each alike
                for name, (encoder, settings) in configs.items():
                    for k, v in settings.items():
                        setattr(onnx_encoder, k, v)
                    encoder.encode_passages(texts[:8])  # first runs allocate
                    t0 = time.perf_counter()
                    vectors[name] = encoder.encode_passages(texts)
                    rate = len(texts) / (time.perf_counter() - t0)
                    best[name] = max(best.get(name, 0.0), rate)
            ref = best["reference"]
            for name, rate in best.items():
                cos = (vectors[name] * fp32).sum(1)
                print(
                    f"  {set_name:<14} {name:<14} {rate:7.1f} texts/s {rate / ref:5.2f}x"
                    f"  cosine with float32 {cos.mean():.4f} mean, {cos.min():.4f} least",
                    flush=True,
                )
    finally:
        for k, v in saved.items():
            setattr(onnx_encoder, k, v)


def run(args: argparse.Namespace) -> None:
    from wetqa.retrieval.articles.reader import READ_TOKENS
    from wetqa.retrieval.tooling.convert import default_path

    model = args.model or str(default_path())
    chunks, places = texts_of(Path(args.index), args.chunks, args.places)
    print(f"{os.cpu_count()} cores; {model}", flush=True)
    measure(model, {f"{len(chunks)} chunks": chunks, f"{len(places)} places": places}, budgets=args.budgets)
    if args.reader:
        print(f"the reader, {args.reader} (first {READ_TOKENS} tokens)", flush=True)
        measure(args.reader, {"160 chunks": chunks[:160]}, max_length=READ_TOKENS, rounds=1, budgets=args.budgets)


def smoke(args: argparse.Namespace) -> None:
    import _smoke

    _smoke.announce("encoders")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        index = _smoke.index(work)
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import tiny_unigram_sentence_transformer

        from wetqa.retrieval.tooling.export import export_onnx

        model = tiny_unigram_sentence_transformer(work / "tiny")
        export_onnx(model)
        chunks, places = texts_of(index, 120, 200)
        measure(str(model), {"chunks": chunks, "places": places}, rounds=1)


def main() -> None:
    import _smoke

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "data" / "index"))
    ap.add_argument("--model", help="a model folder with an ONNX export (default: the converted mE5-small)")
    ap.add_argument("--reader", help="the reader's model folder too (EmbeddingGemma, fetched)")
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--places", type=int, default=2000)
    ap.add_argument("--budgets", type=lambda v: [int(x) for x in v.split(",")], default=[],
                    help="also builds with these padded tokens a run (e.g. 256,512), against BATCH_TOKENS")  # fmt: skip
    ap.add_argument("--smoke", action="store_true", help="a tiny index and model built here: seconds")
    _smoke.main(ap, run, smoke, "index", "give --index")


if __name__ == "__main__":
    main()
