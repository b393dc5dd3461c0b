"""Within-law ranking on the dev questions: which candidate features pick the right article, cross-validated.

    python bench/rerank.py INDEX [--folds 5]

The default pipeline's 30 re-scored candidates per question, each with its signals (the three BM25
views, the dense cosine, the fused score, the law's share of the candidates' dense mass, the article's
structure: condition words, a definitions article, references to other articles, length, heading
overlap with the question). A pointwise logistic regression (few features, strong L2) is fitted on the
other folds' questions and re-ranks the held-out ones; printed: Hit@1, Hit@3, MRR of each feature set
against the fused score alone, cross-validated over the same folds.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np

from wetqa.corpus.dataset import article_key, load_dataset
from wetqa.retrieval import open_index
from wetqa.retrieval.dutch import FIRST_PARAGRAPHS, MAX_LEAD_CHARS, announcing_clauses, frame_terms, lead_overlap
from wetqa.retrieval.fitting.ranking import logistic_fit as fit
from wetqa.retrieval.ranking.confidence import SignalContext

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
_CONDITION = re.compile(
    r"\b(indien|tenzij|mits|wanneer|slechts|uitsluitend|voor zover|in geval|kan worden|wordt geweigerd|vervalt)\b", re.I
)
_REFERENCE = re.compile(r"bedoeld in (?:het )?(?:eerste|tweede|derde|vierde|vijfde)? ?(?:lid|artikel)", re.I)
_DEFINITION = re.compile(r"wordt verstaan onder|in deze wet (?:en de daarop berustende bepalingen )?wordt", re.I)


def proximity(q_terms: set[str], tokens: list[str], window: int = 12) -> float:
    """The most question terms found together in any ``window`` consecutive words, over the question's."""
    if not q_terms or not tokens:
        return 0.0
    best = 0
    for start in range(0, max(1, len(tokens) - window + 1)):
        best = max(best, len(q_terms & set(tokens[start : start + window])))
    return best / len(q_terms)


_NUMBER = re.compile(r"^\s*(?:\d+[a-z]?|[a-z]{1,2})[.)]\s+")


def lead_sentences(paragraphs: list[str], mode: str) -> list[str]:
    """The announcing clauses (what the pipeline uses), and for the variants measured beside them the
    first sentence of each first paragraph that announces no list ("first": without its number;
    "asis": up to the first full stop, which for a numbered paragraph is only its number)."""
    out = announcing_clauses(paragraphs)
    for p in paragraphs[:FIRST_PARAGRAPHS]:
        if 0 <= p.find(":") < MAX_LEAD_CHARS:
            continue
        if mode == "first":
            out.append(_NUMBER.sub("", p).split(". ")[0])
        elif mode == "asis":
            out.append(p.split(".")[0])
    return out


def lead_match(q_terms: set[str], paragraphs: list[str], analyzer, mode: str = "asis") -> float:
    """The share of question terms in the sentence that announces a list ("... eindigt:") or the first sentence."""
    best = 0.0
    for head in lead_sentences(paragraphs, mode):
        terms = set(analyzer.tokens(head))
        best = max(best, len(q_terms & terms) / max(1, len(q_terms)))
    return best


def candidate_rows(retriever, question: str, k: int = 30) -> tuple[list, list[dict]]:
    hits = retriever.search(question, k)
    index = getattr(retriever, "index", retriever)  # a pipeline's first index, or an index itself
    analyzer = index.analyzer
    q_terms = set(analyzer.tokens(question)) - frame_terms()
    features = getattr(retriever, "features", None)
    names = SignalContext(index, features.law_names if features is not None else None).law_names
    named = names.named(question)
    law_mass: dict[str, float] = {}
    for h in hits:
        law_mass[h.chunk.law] = law_mass.get(h.chunk.law, 0.0) + max(0.0, h.features.get("dense", 0.0) - 0.7)
    total_mass = sum(law_mass.values()) or 1.0
    tops = {
        v: max((h.features.get(f"bm25_{v}", 0.0) for h in hits), default=1.0) or 1.0
        for v in ("chunk", "article", "heading")
    }
    rows = []
    dense_all = [h.features.get("dense", 0.0) for h in hits]
    dmax, dmin = max(dense_all, default=1.0), min(dense_all, default=0.0)
    for h in hits:
        text = "\n".join(h.article_paragraphs)
        head = " ".join(analyzer.tokens(f"{h.chunk.article} {h.chunk.path_label}"))
        words = max(1, len(text.split()))
        rows.append(
            {
                "fused": h.score,
                "rank": 1.0 / h.rank,
                "first": h.features.get("first", 0.0),
                "first_rank": 1.0 / h.features.get("first_rank", 1),
                "dense": (h.features.get("dense", 0.0) - dmin) / ((dmax - dmin) or 1.0),
                "bm25_chunk": h.features.get("bm25_chunk", 0.0) / tops["chunk"],
                "bm25_article": h.features.get("bm25_article", 0.0) / tops["article"],
                "bm25_heading": h.features.get("bm25_heading", 0.0) / tops["heading"],
                "law_share": law_mass.get(h.chunk.law, 0.0) / total_mass,
                "conditions": min(5, len(_CONDITION.findall(text))) / 5,
                "references": min(5, len(_REFERENCE.findall(text))) / 5,
                "definition": 1.0 if _DEFINITION.search(text) else 0.0,
                "length": math.log(words) / 8,
                "paragraphs": min(10, len(h.article_paragraphs)) / 10,
                "heading_overlap": len(q_terms & set(head.split())) / max(1, len(q_terms)),
                "proximity": proximity(q_terms, analyzer.tokens(text)),
                "lead": lead_match(q_terms, h.article_paragraphs, analyzer),
                "lead_colon": lead_overlap(frozenset(q_terms), h.article_paragraphs, analyzer.tokens),
                "lead_first": lead_match(q_terms, h.article_paragraphs, analyzer, "first"),
                "law_named": 1.0 if h.chunk.law_id in named else 0.0,
            }
        )
    return hits, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="?", help="an articles index with dense re-scoring (none with --smoke)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--l2", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a few questions over a tiny index built here (seconds)")
    import _smoke

    _smoke.main(ap, lambda a: rerank(a, load_dataset(DEV)), smoke, "index", "give the articles index")


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    _smoke.announce("re-scored by a tiny random model")
    with tempfile.TemporaryDirectory() as tmp:
        args.index, args.folds = str(_smoke.index(Path(tmp), rescore=True)), 2
        rerank(args, load_dataset(_smoke.dataset(Path(tmp) / "dev.jsonl")))


def rerank(args: argparse.Namespace, items: list) -> None:
    r = open_index(args.index)
    data = []
    for it in items:
        hits, rows = candidate_rows(r, it.question)
        labels = [1.0 if article_key(h.chunk.law_id, h.chunk.article) in it.gold_keys else 0.0 for h in hits]
        data.append((rows, labels))
    names = list(data[0][0][0])
    order = np.random.default_rng(args.seed).permutation(len(items))
    folds = [order[f :: args.folds] for f in range(args.folds)]

    def evaluate(feats: list[str]) -> dict:
        ranks = [None] * len(items)
        for test in folds:
            train = [q for q in range(len(items)) if q not in set(test)]
            x = np.asarray([[row[f] for f in feats] for q in train for row in data[q][0]])
            y = np.asarray([lab for q in train for lab in data[q][1]])
            mu, sd = x.mean(0), x.std(0) + 1e-9
            coef, _ = fit((x - mu) / sd, y, args.l2, iterations=60)
            for q in test:
                xs = (np.asarray([[row[f] for f in feats] for row in data[q][0]]) - mu) / sd
                score = xs @ coef
                ranked = np.argsort(-score, kind="stable")
                labels = data[q][1]
                ranks[q] = next((i + 1 for i, j in enumerate(ranked) if labels[j]), None)
        return {
            "Hit@1": np.mean([r == 1 for r in ranks]),
            "Hit@3": np.mean([bool(r) and r <= 3 for r in ranks]),
            "MRR": np.mean([1 / r if r else 0 for r in ranks]),
        }

    base = [{"rank": 1 / (i + 1)} for i in range(30)]
    baseline = {
        "Hit@1": np.mean([lab[0] == 1 for _, lab in data]),
        "MRR": np.mean([next((1 / (i + 1) for i, v in enumerate(lab) if v), 0) for _, lab in data]),
    }
    print(f"default order (fused): Hit@1 {baseline['Hit@1']:.3f} MRR {baseline['MRR']:.3f}")
    del base
    sets = {
        "fused": ["fused"],
        "fused + dense + first": ["fused", "dense", "first"],
        "+ bm25 views": ["fused", "dense", "first", "bm25_chunk", "bm25_article", "bm25_heading"],
        "+ law share": ["fused", "dense", "first", "law_share"],
        "+ structure": ["fused", "dense", "first", "conditions", "references", "definition", "length"],
        "+ heading overlap": ["fused", "dense", "first", "heading_overlap"],
        "+ law named (prior)": ["fused", "dense", "first", "law_named"],
        "+ proximity": ["fused", "dense", "first", "proximity"],
        "+ list lead": ["fused", "dense", "first", "lead"],
        "fused + proximity": ["fused", "proximity"],
        "fused + lead": ["fused", "lead"],
        "fused + proximity + lead": ["fused", "proximity", "lead"],
        "fused + lead (colon only)": ["fused", "lead_colon"],
        "fused + lead (first sentence)": ["fused", "lead_first"],
        "all": names,
    }
    for label, feats in sets.items():
        m = evaluate(feats)
        print(f"{label:28s} CV Hit@1 {m['Hit@1']:.3f}  Hit@3 {m['Hit@3']:.3f}  MRR {m['MRR']:.3f}")


if __name__ == "__main__":
    main()
