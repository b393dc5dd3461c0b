"""The pruned article ranking (MaxScore over term and block maxima) against reading every posting."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from wetqa.retrieval import open_index
from wetqa.retrieval.articles.bm25 import VIEWS
from wetqa.retrieval.engines.integrity import file_digests
from wetqa.retrieval.kernels.maxscore import BLOCK_PARTS, block_files, chunk_bounds, write_bounds

from .conftest import DEV, require_shared

pytest.importorskip("numba")


def _same(a, b) -> None:
    """Two rankings (articles, fused scores, view scores): equal bit for bit, in the same order."""
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for v in VIEWS:
        np.testing.assert_array_equal(a[2][v], b[2][v])


def _with_blocks(index, tmp_path, block: int):
    """A copy of an index whose block maxima are rewritten with ``block`` articles per block."""
    out = tmp_path / f"blocks{block}"
    shutil.copytree(index, out)
    from wetqa.retrieval.articles.bm25 import MAPS

    write_bounds(out, {name: np.load(out / f"{name}.npy") for name in MAPS}, block)
    meta = json.loads((out / "index.json").read_text(encoding="utf-8"))
    meta["files"] = file_digests(out)
    (out / "index.json").write_text(json.dumps(meta), encoding="utf-8")
    return open_index(out, rescore=False)


def _queries(retriever, n: int, seed: int) -> list[list[int]]:
    """Random term-id queries over the index's vocabulary: common and rare words, repeats, 1 to 20 terms."""
    rng = random.Random(seed)
    words = sorted(
        set(
            retriever.chunks.term_ids([w for c in retriever.chunks for w in retriever.analyzer.tokens(c.text)]).values()
        )
    )
    out = []
    for _ in range(n):
        q = [rng.choice(words) for _ in range(rng.randint(1, 20))]
        if rng.random() < 0.3:
            q += q[: rng.randint(1, len(q))]  # a repeated word counts again
        out.append(q)
    return out


@pytest.mark.unit
def test_term_and_block_maxima_are_those_of_the_postings(articles_index):
    articles = open_index(articles_index, rescore=False)
    ranker = articles.pruned
    assert ranker is not None
    bounds = chunk_bounds(articles.first, len(articles.chunks), ranker.block)
    for v in VIEWS:
        view = articles.views[v]
        ptr, which, top = ranker.blocks[v]
        for t in range(len(view.indptr) - 1):
            docs, impacts = view.postings(t)
            if v == "chunk":  # chunks of expired articles never raise a bound
                impacts = np.where(articles.chunk_article[docs] >= 0, impacts, 0)
                blocks = np.searchsorted(bounds, docs, side="right") - 1
            else:
                blocks = docs // ranker.block
            assert ranker.maxima[v][t] == (view.data[view.indptr[t] : view.indptr[t + 1]].max() if len(docs) else 0)
            expected = {int(b): float(impacts[blocks == b].max()) for b in np.unique(blocks)}
            assert dict(zip(which[ptr[t] : ptr[t + 1]].tolist(), top[ptr[t] : ptr[t + 1]].tolist())) == expected


@pytest.mark.unit
@pytest.mark.parametrize("block", [128, 16, 1])
def test_pruned_ranking_is_the_exhaustive_one_bit_for_bit(
    synthetic_index, articles_index, copied_law_index, tmp_path, block
):
    for index, n in ((synthetic_index, 150), (articles_index, 40), (copied_law_index, 40)):
        articles = _with_blocks(index, tmp_path / index.parent.name, block)
        articles.pruned.warm()
        for terms in _queries(articles, n, seed=block):
            for k in (1, 3, 30, 500):
                _same(articles._top_pruned(terms, k), articles._top_all(terms, k))


@pytest.mark.unit
@pytest.mark.parametrize("block", [128, 1])
@pytest.mark.parametrize("narrow", [-1, 10**9], ids=["walked", "scored-one-by-one"])
def test_a_scope_mask_gives_the_exhaustive_ranking_of_the_articles_in_scope(
    synthetic_index, tmp_path, block, narrow, monkeypatch
):
    """A scope (kinds, laws, jurisdiction, date) masks articles: the pruned path skips them and takes
    its view maxima over the rest, exactly as the exhaustive path does; nothing outside the mask comes.
    A narrow scope (at most NARROW_ARTICLES articles) is scored article by article: the same values."""
    from wetqa.retrieval.kernels import maxscore

    monkeypatch.setattr(maxscore, "NARROW_ARTICLES", narrow)
    articles = _with_blocks(synthetic_index, tmp_path, block)
    articles.pruned.warm()
    rng = np.random.default_rng(block)
    for i, terms in enumerate(_queries(articles, 120, seed=7 + block)):
        allowed = rng.random(articles.n_articles) < (0.02, 0.3, 0.9)[i % 3]
        for k in (1, 3, 30):
            pruned, full = articles._top_pruned(terms, k, allowed), articles._top_all(terms, k, allowed)
            _same(pruned, full)
            assert allowed[pruned[0]].all()
        some = np.flatnonzero(allowed)[:25]  # the scores of candidates in scope, as the ranking asks for them
        views, _ = articles._views(terms, allowed)
        fused, by_view = articles.pruned.scores_of(terms, some, articles.weights, allowed)
        np.testing.assert_array_equal(fused, articles.fuse(views)[some])
        for v in VIEWS:
            np.testing.assert_array_equal(by_view[v], views[v][some])
    # A mask that allows nothing finds nothing.
    nothing = np.zeros(articles.n_articles, dtype=bool)
    assert len(articles._top_pruned(_queries(articles, 1, seed=1)[0], 3, nothing)[0]) == 0


@pytest.mark.unit
def test_view_maxima_kept_for_a_question_are_of_its_terms_and_scope(synthetic_index, monkeypatch):
    """The maxima a question's search found are kept for its candidates' scores: the same terms under
    another scope, or under its own mask changed in place, are walked again."""
    from wetqa.retrieval.kernels import maxscore

    monkeypatch.setattr(maxscore, "NARROW_ARTICLES", -1)  # every scope walked: the kept maxima in use
    articles = open_index(synthetic_index, rescore=False)
    articles.pruned.warm()
    rng = np.random.default_rng(3)
    terms = _queries(articles, 1, seed=11)[0]
    mask = rng.random(articles.n_articles) < 0.5
    other = ~mask
    for allowed in (mask, other, None, mask):
        _same(articles._top_pruned(terms, 5, allowed), articles._top_all(terms, 5, allowed))
    mask[: articles.n_articles // 2] = ~mask[: articles.n_articles // 2]  # the same array, another scope
    _same(articles._top_pruned(terms, 5, mask), articles._top_all(terms, 5, mask))
    some = np.flatnonzero(mask)[:20]
    views, _ = articles._views(terms, mask)
    np.testing.assert_array_equal(
        articles.pruned.scores_of(terms, some, articles.weights, mask)[0], articles.fuse(views)[some]
    )


@pytest.mark.unit
def test_search_prunes_once_warm_and_hits_stay_the_same(articles_index, monkeypatch):
    from wetqa.retrieval.articles import bm25 as module

    monkeypatch.setattr(module, "PRUNE_FROM", 0)
    articles = open_index(articles_index, rescore=False)  # the first stage
    query = "De rechter kan het gezag van een ouder beëindigen"
    pruned = []
    real = articles._top_pruned
    monkeypatch.setattr(articles, "_top_pruned", lambda *a: pruned.append(1) or real(*a))
    cold = articles.search(query, k=5)
    assert not pruned and not articles.pruned.ready  # a one-shot process never compiles anything
    articles.warm()
    warm = articles.search(query, k=5)
    assert pruned and articles.pruned.ready
    assert [(h.id, h.score, h.features) for h in warm] == [(h.id, h.score, h.features) for h in cold]


@pytest.mark.unit
def test_an_index_without_bounds_reads_every_posting(articles_index, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(articles_index, old)
    meta = json.loads((old / "index.json").read_text(encoding="utf-8"))
    for name in block_files():
        (old / name).unlink()
        meta["files"].pop(name)
    (old / "index.json").write_text(json.dumps(meta), encoding="utf-8")
    articles = open_index(old, rescore=False)
    assert articles.pruned is None
    articles.warm()  # nothing to prepare
    assert articles.search("gezag rechter", k=3) == open_index(articles_index, rescore=False).search(
        "gezag rechter", k=3
    )


@pytest.mark.unit
def test_damaged_block_maxima_are_named(articles_index, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(articles_index, bad)
    np.save(bad / f"chunk.{BLOCK_PARTS[0]}.npy", np.zeros(3, dtype=np.int64))  # another length
    meta = json.loads((bad / "index.json").read_text(encoding="utf-8"))
    meta["files"] = file_digests(bad)  # listed as if built so: the loader's own check is what is tried
    (bad / "index.json").write_text(json.dumps(meta), encoding="utf-8")
    from wetqa.retrieval import RetrievalError

    with pytest.raises(RetrievalError, match=r"damaged index .*bounds of the chunk view.*wetqa index --force"):
        open_index(bad)


@pytest.mark.unit
@pytest.mark.parametrize("text", ['{"block": 0}', "{}", "not json", '{"block": "x"}'])
def test_a_damaged_block_description_is_named(articles_index, tmp_path, text):
    from wetqa.retrieval import RetrievalError
    from wetqa.retrieval.kernels.maxscore import BLOCKS_META

    bad = tmp_path / "bad"
    shutil.copytree(articles_index, bad)
    (bad / BLOCKS_META).write_text(text, encoding="utf-8")
    meta = json.loads((bad / "index.json").read_text(encoding="utf-8"))
    meta["files"] = file_digests(bad)
    (bad / "index.json").write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(RetrievalError, match=r"damaged index .*pruning bounds.*wetqa index --force"):
        open_index(bad)


@pytest.mark.integration
def test_pruned_ranking_on_the_real_corpus_equals_the_exhaustive_one(real_articles_index):
    """All dev and out-of-corpus questions, at the re-scoring depth and at 3: identical rankings."""
    require_shared()
    from wetqa.corpus.dataset import load_dataset

    from .conftest import ROOT

    articles = open_index(real_articles_index, rescore=False)
    articles.pruned.warm()
    questions = [item.question for item in load_dataset(DEV)]
    questions += [json.loads(line)["question"] for line in open(ROOT / "bench" / "data" / "out_of_corpus.jsonl")]
    for q in questions:
        terms = articles.term_ids(q)
        for k in (3, 30):
            _same(articles._top_pruned(terms, k), articles._top_all(terms, k))


@pytest.mark.unit
def test_a_served_pipeline_prepares_the_kernels_beside_serving(synthetic_index, monkeypatch):
    """`wetqa serve` loads its pipelines and warms their retrievers in the background."""
    import time

    from wetqa.retrieval.articles import bm25 as module

    from .serving import served_pipeline

    monkeypatch.setattr(module, "PRUNE_FROM", 1000)  # the synthetic index has 4,604 chunks

    served = served_pipeline("wetqa-articles-extractive", synthetic_index).load()
    articles = served.loaded.retriever.index  # the pipeline's articles index
    deadline = time.time() + 120  # a first compile takes seconds; numba's cache makes it quick after
    while not articles.pruned.ready and time.time() < deadline:
        time.sleep(0.05)
    assert articles.pruned.ready


@pytest.mark.unit
def test_warm_up_reaches_retrievers_inside_others(synthetic_index, monkeypatch):
    from wetqa.retrieval import HybridRetriever, warm_up
    from wetqa.retrieval.articles import bm25 as module

    monkeypatch.setattr(module, "PRUNE_FROM", 1000)

    inner = [open_index(synthetic_index, rescore=False), open_index(synthetic_index, rescore=False)]
    warm_up(HybridRetriever(inner))
    assert all(r.pruned.ready for r in inner)


@pytest.mark.unit
def test_a_small_index_never_loads_the_compiler(synthetic_index, monkeypatch):
    from wetqa.retrieval.articles import bm25 as module

    monkeypatch.setattr(module, "PRUNE_FROM", 10_000)  # more than the synthetic index's 4,604 chunks
    articles = open_index(synthetic_index, rescore=False)
    articles.warm()
    assert not articles.pruned.ready


@pytest.mark.unit
def test_bounds_written_in_small_slices_are_the_same(synthetic_index, tmp_path, monkeypatch):
    """The maxima are built a slice of terms at a time (bounded memory): slices cut anywhere agree."""
    from wetqa.retrieval.articles.bm25 import MAPS
    from wetqa.retrieval.kernels import maxscore

    small = tmp_path / "small"
    shutil.copytree(synthetic_index, small)
    monkeypatch.setattr(maxscore, "_SLICE", 7)
    write_bounds(small, {name: np.load(small / f"{name}.npy") for name in MAPS})
    for name in block_files():
        if name.endswith(".npy"):
            np.testing.assert_array_equal(np.load(small / name), np.load(synthetic_index / name), err_msg=name)
