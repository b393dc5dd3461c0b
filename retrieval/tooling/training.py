"""Fine-tuning the reader on questions with gold articles (``wetqa models train-reader DATA``).

Each question with its gold article (read titled, as the reader reads it) and a hard negative of the same law
(the article's neighbours and the articles BM25 ranks first among that law's) makes a triplet;
sentence-transformers' ``SentenceTransformerTrainer`` fits the model with ``MultipleNegativesRankingLoss``
(the other questions' articles in a batch are negatives too). On a CPU only the top ``train_layers`` layers
and the projections after pooling are trained (the rest frozen: the word table alone is two thirds of
EmbeddingGemma's weights), and training stops when its time budget is spent. The trained model is saved as a
sentence-transformers folder with its ONNX export, so ``--reader FOLDER`` reads with it.

Evaluate it before keeping it: questions written for articles are not the questions people ask
(``wetqa fit ranking --reader FOLDER`` cross-validates the pipeline with it).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import numpy as np

from wetqa.console import shows_progress

from .._base import RetrievalError

MARKER = "wetqa-model.json"


def triplets(data: str | Path, index, reader_encoder, negatives: int = 2, seed: int = 0) -> list[tuple[str, str, str]]:
    """(question, gold article, hard negative) texts of every question of ``data`` whose gold article the index
    holds: each in the model's own form (query prompt; titled document)."""
    from wetqa.corpus.dataset import article_key, load_dataset

    from ..articles.reader import article_documents

    items = load_dataset(data)
    position: dict[str, int] = {}
    for start in range(0, index.n_articles, 4000):
        rows = list(range(start, min(index.n_articles, start + 4000)))
        for x, chunk in zip(rows, index.chunks.rows([int(index.first[x]) for x in rows])):
            position.setdefault(article_key(chunk.law_id, chunk.article), x)
    law = np.asarray(index.ranked_law)
    rng = random.Random(seed)
    wanted: list[tuple[str, int, list[int]]] = []
    for item in items:
        golds = [position[k] for k in item.gold_keys if k in position]
        if not golds:
            continue
        x = golds[0]
        same = np.flatnonzero(law == law[x])
        same = same[~np.isin(same, golds)]
        if not len(same):
            continue
        terms = index.term_ids(item.question)
        mask = np.zeros(index.n_articles, dtype=bool)
        mask[same] = True
        by_words = [int(a) for a in index.top(terms, negatives, mask)[0]] if terms else []
        near = [int(a) for a in same[np.argsort(np.abs(same - x), kind="stable")][:3]]
        pool = list(dict.fromkeys(by_words + near))
        rng.shuffle(pool)
        wanted.append((item.question, x, pool[:negatives]))
    needed = sorted({x for _, x, ns in wanted for x in [x, *ns]})
    texts, titles = article_documents(index, needed)
    doc = {x: reader_encoder.document(t, ti) for x, t, ti in zip(needed, texts, titles)}
    query = reader_encoder.query_prefix
    return [(query + q, doc[x], doc[n]) for q, x, ns in wanted for n in ns]


def train_reader(
    data: str | Path,
    model: str,
    index_path: str | Path,
    out: str | Path,
    minutes: float = 30.0,
    train_layers: int = 4,
    batch_size: int = 8,
    learning_rate: float = 2e-5,
    max_tokens: int = 256,
    progress: bool = True,
) -> dict:
    """Fine-tune ``model`` on ``data`` for at most ``minutes`` and save it (with its ONNX export) at ``out``."""
    import shutil
    import tempfile

    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    from wetqa.io import atomic_dir, check_replaceable

    from ..articles.reader import resolve_reader
    from ..engines.index import load_index
    from ..models.encoders import SentenceTransformerEncoder
    from .export import export_onnx, source_identity

    target = Path(out).expanduser()
    check_replaceable(target, MARKER, "model")  # refused before the minutes of training, not after them
    if minutes <= 0:
        raise RetrievalError(f"--minutes must be positive, got {minutes:g}")
    source = resolve_reader(model)
    index = load_index(index_path)
    if index.laws is None:
        raise RetrievalError(f"{index_path}: training the reader needs an articles index (its articles' texts)")
    encoder = SentenceTransformerEncoder(source, max_length=max_tokens, device="cpu")
    rows = triplets(data, index, encoder)
    if not rows:
        raise RetrievalError(f"{data}: no question's gold article is in {index_path}")
    st: SentenceTransformer = encoder.model
    st.max_seq_length = max_tokens
    trainable = _unfreeze_top(st, train_layers)
    dataset = Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows],
                                 "negative": [r[2] for r in rows]})  # fmt: skip
    started = time.monotonic()
    budget = minutes * 60

    class Budget(TrainerCallback):
        """Stops training when the time budget is spent (a CPU's minutes, not epochs, bound it)."""

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - started > budget:
                control.should_training_stop = True
            return control

    # The trainer's scratch folder: made here, beside the output, and removed when done (nothing else is).
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.training-", dir=target.parent))
    args = SentenceTransformerTrainingArguments(
        output_dir=str(work), per_device_train_batch_size=batch_size, learning_rate=learning_rate,
        num_train_epochs=1, warmup_steps=0.1, logging_steps=10, save_strategy="no", report_to=[],
        disable_tqdm=not shows_progress(progress), use_cpu=not torch.cuda.is_available(), dataloader_drop_last=True, seed=0,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=st, args=args, train_dataset=dataset, loss=MultipleNegativesRankingLoss(st), callbacks=[Budget()]
    )
    try:
        result = trainer.train()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = round(time.monotonic() - started, 1)
    from wetqa.io import FORMAT_KEY

    manifest = {
        FORMAT_KEY: "trained-reader/1",
        "kind": "wetqa-trained-reader",
        "base": model,
        "base_weights": source_identity(Path(source)) if Path(source).is_dir() else None,
        "data": hashlib.sha256(Path(data).read_bytes()).hexdigest(),
        "triplets": len(rows),
        "steps": int(result.global_step),
        "seconds": seconds,
        "train_layers": train_layers,
        "trainable_parameters": trainable,
        "learning_rate": learning_rate,
        "batch_size": batch_size,
    }
    with atomic_dir(target, marker=MARKER, kind="model") as tmp:
        st.save(str(tmp))
        (tmp / MARKER).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        export_onnx(tmp)
    return manifest | {"model": str(target)}


def _unfreeze_top(st, layers: int) -> int:
    """Only the top ``layers`` transformer layers, the final norm and the modules after pooling train."""
    for p in st.parameters():
        p.requires_grad = False
    backbone = st[0].auto_model
    blocks = getattr(backbone, "layers", None) or getattr(getattr(backbone, "encoder", None), "layer", None)
    if blocks is None:
        raise RetrievalError("the reader's layers cannot be found to train (a Gemma or BERT-shaped model)")
    trained = list(blocks[-layers:]) if layers > 0 else []
    norm = getattr(backbone, "norm", None)
    if norm is not None:
        trained.append(norm)
    trained += [module for module in list(st)[1:]]
    count = 0
    for module in trained:
        for p in module.parameters():
            p.requires_grad = True
            count += p.numel()
    return int(count)
