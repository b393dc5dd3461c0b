"""Re-rankers: stages that read the question with each of a ranking's first hits and order them again.

Every re-ranker is a registered part (``RERANKERS``; other packages add theirs through the entry point
group ``wetqa.rerankers``):

- ``cross-encoder``: a sentence-transformers ``CrossEncoder`` scores each (question, chunk) pair; an
  article takes its best chunk's score (``--rerank BAAI/bge-reranker-v2-m3``, the default model, loads
  directly for users with a hub; any local folder works);
- ``reader``: the reader (:mod:`.readers`) over plain hits orders them by its cosine (over an articles
  index it is a stage of the learned ranking instead: ``--reader``);
- ``listwise``: a language model reads the question and a window of numbered passages and answers with
  their order (RankGPT: Sun et al., 2023), a window of 20 sliding from the last to the first with a
  stride of 10. It runs on whatever model the generation stage hands in (``complete``: chat messages ->
  text; vLLM, an OpenAI-compatible server, transformers), so retrieval imports no generator.

Re-rankers no ranking or confidence model was fitted with reorder after the fitted stages; the
confidence reads the hits as those stages left them (:func:`.stages.snapshot`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wetqa.registry import Registry

from .._base import Hit, RetrievalError
from ..scope import Scope
from .stage import Stage

# Multilingual (Dutch included) and strong; for GPU users. Any Hugging Face id or local folder works.
DEFAULT_RERANKER = "BAAI/bge-reranker-v2-m3"
LISTWISE = "listwise"
WINDOW, STRIDE = 20, 10  # RankGPT's sliding window


@dataclass(frozen=True, slots=True)
class RerankerInfo:
    name: str
    make: Callable[..., object]  # (argument, top, complete, spec) -> a stage
    description: str = ""
    needs_model: bool = False  # runs on the generation stage's language model (``complete``)


# Each built-in re-ranker's name and the module that registers it (found as every registry finds its built-ins:
# a re-ranker in a module of its own is listed here, or comes through the entry point group).
BUILTIN = {"cross-encoder": __name__, "reader": __name__, LISTWISE: __name__}
RERANKERS: Registry[RerankerInfo] = Registry("re-ranker", BUILTIN, "wetqa.rerankers")


def register(info: RerankerInfo) -> RerankerInfo:
    return RERANKERS.register(info.name, info)


def parse(item: str) -> tuple[str, str | None]:
    """``listwise``, ``reader[:MODEL]``, ``cross-encoder:MODEL`` or a bare model (a cross-encoder)."""
    name, sep, argument = item.partition(":")
    try:
        RERANKERS.get(name)
    except KeyError:
        return "cross-encoder", item  # a model id or folder, as --rerank MODEL always meant
    return name, (argument if sep else None)


def make_rerankers(spec, complete: Callable[[list[list[dict]]], list[str]] | None = None) -> list:
    """The re-ranking stages a retrieval spec names, in its order."""
    out = []
    for item in spec.rerank:
        name, argument = parse(item)
        info = RERANKERS.get(name)
        if info.needs_model and complete is None:
            raise RetrievalError(
                f"--rerank {name} needs a language model: give it with a generator that runs one "
                "(`wetqa ask`/`generate`/`serve` with --generator openai|transformers|vllm or a preset)"
            )
        out.append(info.make(argument, spec.rerank_top, complete, spec))
    return out


class CrossEncoderReranker:
    """Re-score the top hits with a cross-encoder (sentence-transformers ``CrossEncoder``).

    An article hit is scored by the best of its chunks, so a long article is not judged by one window.
    """

    def __init__(self, model: str = DEFAULT_RERANKER, batch_size: int = 32, device: str | None = None):
        from sentence_transformers import CrossEncoder

        from wetqa.console import check_hub_model, check_model_ref

        from ..models.batching import Batcher

        check_hub_model(check_model_ref(model, "re-ranker"), "re-ranker")
        self.model = CrossEncoder(model, device=device)
        self.batch_size = batch_size
        # One predict at a time (the tokenizer is not thread-safe), over the pairs of every request
        # that arrived meanwhile: one call for 16 concurrent queries instead of 16.
        self.batcher: Batcher[tuple[str, str], float] = Batcher(
            lambda pairs: [float(s) for s in self.model.predict(pairs, batch_size=self.batch_size)], max_items=1024
        )

    def rerank(self, query: str, hits: Sequence[Hit], k: int) -> list[Hit]:
        if not hits:
            return []
        groups = [h.article_chunks or (h.chunk,) for h in hits]
        pairs = [(query, c.text) for g in groups for c in g]
        flat = self.batcher(pairs)
        scores, at = [], 0
        for g in groups:
            scores.append(max(flat[at : at + len(g)]))
            at += len(g)
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:k]
        return [
            Hit(
                hits[i].chunk,
                scores[i],
                r,
                "rerank",
                hits[i].article_chunks,
                hits[i].article_paragraphs,
                {**hits[i].features, "before_rerank": hits[i].score, "rerank": scores[i]},
            )
            for r, i in enumerate(order, 1)
        ]


class RerankStage(Stage):
    """A re-ranker of a ranking's first ``depth`` hits, the rest following in their order."""

    kind = "reranker"
    fitted = False

    def __init__(self, reranker, depth: int, name: str):
        self.reranker, self.depth, self.name = reranker, depth, name

    def run(self, rankings: list, need: int, scope: Scope | None) -> None:
        for r in rankings:
            top = r.hits[: self.depth]
            r.hits = self.reranker.rerank(r.question, top, len(top)) + r.hits[self.depth :]


# ---------------------------------------------------------------------------------------------- listwise
SYSTEM = "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
PASSAGE_WORDS = 120  # of each passage shown: a window of 20 stays within a small model's context


def listwise_messages(question: str, passages: Sequence[str]) -> list[dict]:
    """RankGPT's prompt for one window: the numbered passages and the question, an order asked for."""
    n = len(passages)
    shown = "\n".join(f"[{i}] {' '.join(p.split()[:PASSAGE_WORDS])}" for i, p in enumerate(passages, 1))
    user = (
        f"I will provide you with {n} passages, each indicated by a numerical identifier []. Rank the passages "
        f"based on their relevance to the search query: {question}\n\n{shown}\n\nSearch Query: {question}\n"
        f"Rank the {n} passages above based on their relevance to the search query. All the passages should be "
        "included and listed using identifiers, in descending order of relevance. The output format should be "
        "[] > [], e.g., [4] > [2]. Only respond with the ranking results, do not say any word or explain."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_permutation(text: str, n: int) -> list[int]:
    """The order a model wrote (``[3] > [1] > [2]``, or bare numbers) as 0-based positions: numbers out of
    range and repeats dropped, the passages it left out following in their order."""
    seen: list[int] = []
    for number in re.findall(r"\d+", text):
        i = int(number) - 1
        if 0 <= i < n and i not in seen:
            seen.append(i)
    return seen + [i for i in range(n) if i not in seen]


class ListwiseReranker:
    """RankGPT's sliding window over the first ``depth`` hits: windows of ``window`` passages from the last
    to the first, ``stride`` apart, each reordered by the language model; one model call per window (the
    windows of every question in a batch sent together)."""

    def __init__(self, complete: Callable[[list[list[dict]]], list[str]], window: int = WINDOW, stride: int = STRIDE):
        if not 1 <= stride <= window:
            raise RetrievalError(f"the listwise stride must be between 1 and the window ({window}), got {stride}")
        self.complete, self.window, self.stride = complete, window, stride

    def windows(self, n: int) -> list[tuple[int, int]]:
        """(start, end) of each window, from the last hits to the first."""
        out, end = [], n
        while True:
            start = max(0, end - self.window)
            out.append((start, end))
            if start == 0:
                return out
            end -= self.stride

    def rerank_all(self, questions: Sequence[str], rankings: Sequence[list[Hit]]) -> list[list[Hit]]:
        orders = [list(hits) for hits in rankings]
        plans = [self.windows(len(h)) for h in orders]
        for step in range(max((len(p) for p in plans), default=0)):
            todo = [(i, plans[i][step]) for i in range(len(orders)) if step < len(plans[i]) and len(orders[i]) > 1]
            if not todo:
                continue
            messages = [listwise_messages(questions[i], [_passage(h) for h in orders[i][a:b]]) for i, (a, b) in todo]
            answers = self.complete(messages)
            for (i, (a, b)), answer in zip(todo, answers):
                part = orders[i][a:b]
                orders[i][a:b] = [part[j] for j in parse_permutation(answer, len(part))]
        return [
            [
                Hit(
                    h.chunk,
                    -float(rank),
                    rank,
                    "listwise",
                    h.article_chunks,
                    h.article_paragraphs,
                    {**h.features, "before_rerank": h.score, "listwise_rank": rank},
                )  # fmt: skip
                for rank, h in enumerate(hits, 1)
            ]
            for hits in orders
        ]


def _passage(hit: Hit) -> str:
    text = "\n".join(c.text for c in (hit.article_chunks or (hit.chunk,)))
    return f"{hit.chunk.law}, {hit.chunk.article}: {text}"


class ListwiseStage(Stage):
    kind = "reranker"
    fitted = False
    name = LISTWISE

    def __init__(self, reranker: ListwiseReranker, depth: int):
        self.reranker, self.depth = reranker, depth

    def run(self, rankings: list, need: int, scope: Scope | None) -> None:
        tops = self.reranker.rerank_all([r.question for r in rankings], [r.hits[: self.depth] for r in rankings])
        for r, top in zip(rankings, tops):
            r.hits = top + r.hits[self.depth :]


def _cross_encoder(argument: str | None, depth: int, complete, spec=None) -> RerankStage:
    return RerankStage(CrossEncoderReranker(argument or DEFAULT_RERANKER), depth, "cross-encoder")


def _reader(argument: str | None, depth: int, complete, spec=None):
    """The reader as a re-ranker: the model named, else the spec's reader, read as the spec says (tokens, size)."""
    from ..articles.reader import DEFAULT_READER, READ_TOKENS, HitReader, Reader

    model = argument or (spec.reader_model if spec is not None else None) or DEFAULT_READER
    tokens = spec.read_tokens_or_default if spec is not None else READ_TOKENS
    return HitReader(Reader(model, max_tokens=tokens, dim=spec.reader_dim if spec is not None else None), depth)


def _listwise(argument: str | None, depth: int, complete, spec=None) -> ListwiseStage:
    if argument:
        raise RetrievalError(
            "--rerank listwise takes no model: it runs on the generator's (--generator, --model, --base-url)"
        )
    return ListwiseStage(ListwiseReranker(complete), depth)


register(RerankerInfo("cross-encoder", _cross_encoder, "a cross-encoder scores each (question, passage) pair"))
register(RerankerInfo("reader", _reader, "the reader's cosine of question and article (plain hits)"))
register(RerankerInfo(LISTWISE, _listwise, "a language model orders windows of passages (RankGPT)", needs_model=True))
