"""The reader: a stronger embedding model that reads the question and each candidate article whole.

mE5-small finds candidates among a whole corpus's passages; telling the right article from its neighbour
takes a model that reads more. EmbeddingGemma-300M (``google/embeddinggemma-300m``, Gemma terms of use)
reads the question with its query prompt and each candidate article as one document titled by its law,
article label and heading ("title: Burgerlijk Wetboek Boek 7, Artikel 653 Concurrentiebeding | text:
..."), cut at ``max_tokens``. Its cosines become features of the learned ranking and of the confidence
(:mod:`.candidates`, :mod:`.confidence`), never a fixed fusion.

Every article text is read once: its vector is kept in the model's vector cache by the hash of its text
(:mod:`wetqa.retrieval.models.vectors`), so a question about articles read before costs one question
encoding. ``wetqa index --read-all`` reads every article of an index ahead (a GPU's or a night's work).
The vectors are kept whole; a Matryoshka size below the model's (768 -> 512 or 256) uses their first
dimensions, normalised again.

The model is named by its Hugging Face id (the default, for users with a hub), by a local folder, or by
the id of a model ``wetqa models fetch`` put in the models cache (found there first).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._base import RetrievalError, minmax
from ..ranking.stage import Stage

log = logging.getLogger("wetqa.retrieval")

if TYPE_CHECKING:
    from ..models.encoders import DocumentEncoder

DEFAULT_READER = "google/embeddinggemma-300m"
READ_TOKENS = 256  # of an article read: the first 256 tokens hold its opening paragraphs
READ_DEPTH = 20  # the candidates a question's reader reads, in the order the learned ranking gives them
READ_SLICE = 4  # articles per model call when a question's candidates are read (another request's call fits between)
NO_READER = "none"
# A question is also read with the model's sentence-similarity prompt ("STS": EmbeddingGemma's "task: sentence
# similarity | query: "), a second view whose cosines with the same article vectors are a feature of their own
# (``read_sts``): cross-validated on the 272 laws, dev .882 -> .902 and everyday .451 -> .476 (docs/results.md).
SIMILARITY_PROMPT = "STS"
MATRYOSHKA = (768, 512, 256, 128)
# Written questions are compared with a person's question at a Matryoshka cut of 256 dimensions (both sides),
# so that their vectors can ship with the question set (:data:`QUESTIONS_PACK`, int8: 17 MB for 66,000
# questions): a question's candidates then never wait for their written questions to be read (about 100 short
# texts, 3 s on 2 cores). Question to question, 256 of EmbeddingGemma's 768 dimensions keep its ranking
# (cross-validated, docs/results.md).
QUESTIONS_DIM = 256
QUESTIONS_PACK = "questions.reader.npz"  # package data of wetqa.retrieval, beside the question set
# The reader's vectors of the 272 laws' article documents (int8, whole): a question whose candidates nobody read
# before waited for 20 of them to be read (4.8 s p50 on 2 cores); a corpus of other texts reads them as they come.
ARTICLES_PACK = "articles.reader.npz"


def resolve_reader(model: str) -> str:
    """A reader model as a loadable name: a fetched folder for its hub id when there is one, else as given."""
    from ..models.fetched import fetched_folder

    if model in ("", NO_READER):
        raise RetrievalError("no reader model given")
    fetched = fetched_folder(model)
    if fetched is not None:
        return str(fetched)
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def reader_present(model: str) -> bool:
    """Whether the reader can be loaded here: a folder, a fetched model for its id, or one in the Hugging
    Face cache (what a user with a hub downloaded before)."""
    name = resolve_reader(model)
    if Path(name).is_dir():
        return True
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a repository id
        return False


def reader_identity(model: str, depth: int, tokens: int, dim: int | None) -> dict:
    """What a reader's cosines depend on: the model and its weights (size and a hash of their ends, as the
    ONNX export records them), how many candidates it reads, how much of each, at what size."""
    from ..models.layout import source_identity

    path = Path(resolve_reader(model))
    weights = source_identity(path) if (path / "model.safetensors").is_file() else None
    return {"model": model, "weights": weights, "depth": depth, "tokens": tokens, "dim": dim}


def article_title(law: str, article: str, heading: str = "") -> str:
    """What a document of an article is titled: its law, its label and its heading."""
    return ", ".join(p for p in (law.strip(), f"{article} {heading}".strip()) if p)


class Reader:
    """A sentence embedding model reading questions and article documents, its vectors cached by text."""

    def __init__(
        self, model: str = DEFAULT_READER, max_tokens: int = READ_TOKENS, dim: int | None = None, purpose: str = "query"
    ):
        """``purpose``: "query" (a question's candidates: the ONNX export wherever there is one) or "build"
        (every law or article of an index: sentence-transformers on a GPU)."""
        from ..models.vectors import cache_for

        self.model = model
        self.path = resolve_reader(model)
        encoder = _load(model, self.path, max_tokens, purpose)
        from ..models.encoders import DocumentEncoder

        if not isinstance(encoder, DocumentEncoder):
            raise RetrievalError(f"{model} cannot read documents (give a sentence-transformers model)")
        self.encoder: DocumentEncoder = encoder  # type: ignore[assignment]
        full = int(self.encoder.dim)
        if dim is not None and (dim > full or dim < 32):
            raise RetrievalError(f"reader dimension {dim} is not a Matryoshka size of {model} (at most {full})")
        self.dim = dim or full
        self.max_tokens = max_tokens
        self.cache = cache_for(self.path, full, self.encoder.passage_variant or f"@{max_tokens}")
        self._formatted = _Formatted(self.encoder)
        self._packs: dict[str, object] = {}  # shipped vectors (questions, articles), when this model made them
        self._pack_lock = threading.Lock()

    def identity(self) -> dict:
        """What the reader's cosines depend on (a run records it)."""
        # By content, not by path: an identical copy of the model elsewhere is the same reader.
        return {"model": self.model, "content": self.cache.content, "weights": self.cache.weights,
                "max_tokens": self.max_tokens, "dim": self.dim, "variant": self.encoder.passage_variant,
                "questions_dim": self.questions_dim}  # fmt: skip

    @property
    def questions_dim(self) -> int:
        """The Matryoshka cut at which written questions are compared (:data:`QUESTIONS_DIM`, or the reader's
        own size when that is smaller)."""
        return min(self.dim, QUESTIONS_DIM)

    def questions_pack(self):
        """The shipped vectors of the written questions (:mod:`wetqa.retrieval.models.vector_pack`) when this
        model made them (checked once, by a probe read as they were), else None."""
        prompt = self.view_prompts[-1]
        return self._shipped_pack(QUESTIONS_PACK, prompt + _probe_text(), {"prompt": prompt}, self.questions_dim)

    def articles_pack(self):
        """The shipped vectors of the 272 laws' article documents when this model made them, else None."""
        made_as = {"tokens": self.max_tokens}  # a document read at another length is another vector
        return self._shipped_pack(ARTICLES_PACK, self.encoder.document(_probe_text(), ""), made_as, self.encoder.dim)

    def _shipped_pack(self, name: str, probe_text: str, made_as: dict, dim: int):
        """A pack of package data, checked once per reader (its probe read as the pack's texts were); callers
        that come while it is checked wait for the outcome rather than read without it."""
        if name not in self._packs:
            with self._pack_lock:
                if name not in self._packs:
                    from wetqa.cancel import shielded

                    from ..models.vector_pack import pack_for

                    made_as = {"variant": self.encoder.passage_variant, **made_as}
                    # Shielded: the check is for every later question, not only the one whose client may leave.
                    probe = lambda: shielded(self.encoder.encode_formatted, [probe_text])  # noqa: E731
                    pack = pack_for(shipped_pack_path(name), probe, made_as)
                    self._packs[name] = pack if pack is not None and pack.dim >= dim else None
        return self._packs[name]

    def written_question_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Written questions read for comparison with a person's question's last view, at :attr:`questions_dim`:
        from the shipped pack where it holds them, the rest read as they come (:meth:`written_questions`)."""
        from ..models.vector_pack import cut

        texts = list(texts)
        out = np.zeros((len(texts), self.questions_dim), dtype=np.float32)
        pack = self.questions_pack()
        found = np.zeros(len(texts), dtype=bool)
        if pack is not None and texts:
            found, vectors = pack.lookup(texts)  # type: ignore[attr-defined]
            out[found] = cut(vectors[found], self.questions_dim)
        missing = np.flatnonzero(~found)
        if len(missing):
            out[missing] = cut(self.written_questions([texts[i] for i in missing]), self.questions_dim)
        return out

    def _cut(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.dim >= vectors.shape[1]:
            return vectors
        part = vectors[:, : self.dim]
        return part / np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)

    def questions(self, questions: Sequence[str]) -> np.ndarray:
        """Each question's vector through the model's query prompt (the view that finds laws and articles; the
        same vector as the first of :meth:`views`)."""
        return self._cut(self.encoder.encode_queries(list(questions)))

    @property
    def view_prompts(self) -> list[str]:
        """The prompts a question is read with: the query prompt, and the sentence-similarity prompt when the
        model declares one."""
        query = self.encoder.query_prefix
        similar = self.encoder.prompts.get(SIMILARITY_PROMPT)
        return [query] + ([similar] if similar and similar != query else [])

    def views(self, questions: Sequence[str]) -> np.ndarray:
        """Each question read through each of :attr:`view_prompts`, in one model call: (n, views, dim)."""
        questions = list(questions)
        prompts = self.view_prompts
        if not questions:
            return np.empty((0, len(prompts), self.dim), dtype=np.float32)
        flat = self._cut(self.encoder.encode_prompted([p + q for p in prompts for q in questions]))
        return flat.reshape(len(prompts), len(questions), -1).transpose(1, 0, 2)

    def documents(self, texts: Sequence[str], titles: Sequence[str], progress: bool = False,
                  slice_size: int | None = None) -> np.ndarray:  # fmt: skip
        """Each text with its title read as one document (cached by the document's text)."""
        docs = [self.encoder.document(t, title) for t, title in zip(texts, titles)]
        pack = self.articles_pack() if docs else None
        if pack is None:
            return self._cut(self.cache.vectors(docs, self._formatted, progress=progress, slice_size=slice_size))
        # The shipped vectors of the 272 laws' articles where the pack holds them; the rest read as they come.
        found, out = pack.lookup(docs)
        missing = np.flatnonzero(~found)
        if len(missing):
            read = self.cache.vectors(
                [docs[i] for i in missing], self._formatted, progress=progress, slice_size=slice_size
            )
            out[missing] = np.asarray(read, dtype=np.float32)
        return self._cut(out)

    def written_questions(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Written questions read as a person's question is read for similarity (the question's last view,
        :attr:`view_prompts`), cached by text (the prompt is part of the text: no document shares it)."""
        prompt = self.view_prompts[-1]
        return self._cut(self.cache.vectors([prompt + t for t in texts], self._formatted, progress=progress))

    def articles(
        self, index, articles: Sequence[int] | np.ndarray, progress: bool = False, slice_size: int | None = None
    ) -> np.ndarray:
        """The vectors of ranked articles of an articles index (their whole text, titled)."""
        texts, titles = article_documents(index, articles)
        return self.documents(texts, titles, progress=progress, slice_size=slice_size)


FETCH_HINT = (
    "fetch it with `wetqa models fetch embeddinggemma`, give a model folder, or read without one: --reader none"
)


def _load(model: str, path: str, max_tokens: int, purpose: str = "query"):
    """The reader's encoder; a reader that is not here, or whose files are damaged, is one line (exit 3)."""
    from wetqa.console import UnavailableError

    from ..models.encoders import make_encoder
    from ..models.fetched import damaged_fetch

    problem = damaged_fetch(model)
    if problem:
        raise UnavailableError(f"the reader {model} is damaged ({problem}); {FETCH_HINT}")
    if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().exists():
        raise UnavailableError(f"the reader {model} is not here (no folder {path}); {FETCH_HINT}")
    from ..models.encoders import _gpu

    # An index's reading and a question's look-ups share one cache, so they read with the same encoder: on a
    # GPU sentence-transformers for both, else the ONNX export (int8 documents) for both. A build loads the
    # fast tokenizer (many texts), a question the light one.
    on_gpu = _gpu()
    use = "read" if purpose == "build" or on_gpu else "query"
    try:
        # Questions through the int8 graph as well: the process then never loads the float32 one (onnx_encoder).
        return make_encoder({"model": path}, purpose=use, max_length=max_tokens, int8_questions=True)
    except (RetrievalError, OSError, ValueError) as exc:
        raise UnavailableError(
            f"the reader {model} cannot be loaded ({str(exc).splitlines()[0]}); {FETCH_HINT}"
        ) from None


def shipped_pack_path(name: str = "questions.reader.npz") -> Path | None:
    """Shipped vectors (package data: :data:`QUESTIONS_PACK`, :data:`ARTICLES_PACK`), when this build has them."""
    from importlib import resources

    path = resources.files("wetqa.retrieval").joinpath(name)
    return Path(str(path)) if path.is_file() else None


def _probe_text() -> str:
    from ..models.vector_pack import PROBE_TEXT

    return PROBE_TEXT


class _Formatted:
    """An encoder whose passages come already in the document form (what the cache sends to be encoded)."""

    def __init__(self, encoder):
        self.encoder, self.dim = encoder, encoder.dim

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode_queries(texts)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self.encoder.encode_formatted(texts, progress=progress)


def article_documents(index, articles: Sequence[int] | np.ndarray) -> tuple[list[str], list[str]]:
    """(text, title) of each ranked article: its chunks' text in reading order, titled by law, label, heading."""
    articles = [int(x) for x in articles]
    if not articles:
        return [], []
    rows = [int(index.ranked_row[x]) for x in articles]
    headings = index.chunks.titles(rows)
    spans = [range(int(index.first[x]), int(index.first[x] + index.count[x])) for x in articles]
    chunks = index.chunks.rows([r for span in spans for r in span])
    texts, titles, at = [], [], 0
    for span, heading in zip(spans, headings):
        parts = chunks[at : at + len(span)]
        at += len(span)
        texts.append("\n".join(c.text for c in parts))
        titles.append(article_title(parts[0].law, parts[0].article, heading) if parts else "")
    return texts, titles


def read_all(index, reader: Reader, progress: bool = True, articles: Sequence[int] | None = None) -> dict:
    """Every ranked article of an articles index (or those given) read into the reader's cache now; what was
    read before is kept, so an interrupted run resumes where it stopped."""
    import time

    from wetqa.console import progress_bar

    t0 = time.perf_counter()
    todo = np.arange(index.n_articles) if articles is None else np.asarray(articles, dtype=np.int64)
    before = len(reader.cache)
    step = 64
    with progress_bar(total=len(todo), unit="article", desc="reading", progress=progress) as bar:
        for start in range(0, len(todo), step):
            part = todo[start : start + step]
            reader.articles(index, part)
            bar.update(len(part))
    return {
        "articles": int(len(todo)),
        "read": len(reader.cache) - before,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def read_all_questions(folder, index, reader: Reader, progress: bool = True) -> dict:
    """Every written question of an index's questions view read into the reader's cache now (what was read
    before is kept: an interrupted run resumes; what the shipped pack holds for this model needs no reading)."""
    import time

    from wetqa.console import progress_bar

    from .questions_view import QuestionsView

    view = QuestionsView.load(Path(folder), index)
    if view is None:
        return {"questions": 0}
    t0 = time.perf_counter()
    texts = view.texts(range(len(view)))
    pack = reader.questions_pack()
    if pack is not None and texts:
        found, _ = pack.lookup(texts)
        texts = [t for t, f in zip(texts, found) if not f]
    step = 256
    with progress_bar(total=len(texts), unit="question", desc="reading questions", progress=progress) as bar:
        for start in range(0, len(texts), step):
            reader.written_questions(texts[start : start + step])
            bar.update(len(texts[start : start + step]))
    return {"questions": len(texts), "seconds": round(time.perf_counter() - t0, 1)}


READER_FEATURES = ("read", "read_law", "read_sts")  # what read_candidates gives the second learned model
# With the index's questions view: the reader's cosine of the question's sentence-similarity view with the best
# and second best written question of each candidate read (question to question), min-max over those read.
READ_QUESTION_FEATURES = ("qread", "qread2")
READ_CONTEXT_FEATURES = ("read_ctx",)  # a follow-up read with the earlier questions before it
VIEW_FEATURES = ("read", "read_sts")  # the cosine features of the question's views, in Reader.views' order


class ArticleReader(Stage):
    """The reader over an articles pipeline's first ``depth`` candidates (in the learned ranking's order):
    its cosines become features of the next learned model (``read``: min-max over the candidates read;
    ``read_law``: the best ``read`` of any read candidate of the same law; ``read_sts``: ``read`` with the
    question's sentence-similarity view, :data:`SIMILARITY_PROMPT`). Articles read before cost
    nothing; new ones are read ``READ_SLICE`` at a time, so a concurrent request's call fits between."""

    kind = "reader"
    needs = "candidates"
    fitted = True

    def __init__(self, reader: Reader, features, depth: int = READ_DEPTH):
        self.reader, self.features, self.depth = reader, features, depth
        self.name = "reader"

    def begin(self, rankings: list):
        """The questions' reader vectors, encoded while the first stages search (unless the candidates stage
        encodes them already: it reads the laws with them)."""
        from ..ranking.stages import beside

        if not rankings:
            return None
        followed = [r for r in rankings if r.context is not None]
        if followed and "reader_ctx_future" not in rankings[0].vectors:
            # A follow-up's question read with the earlier questions before it ("read_ctx"), begun beside the
            # first stages too: read after them, it was most of what a follow-up cost more than a question alone.
            rankings[0].vectors["reader_ctx_future"] = beside(_in_context, self.reader, followed)
        if "reader_future" in rankings[0].vectors:
            return None
        future = beside(self.reader.views, [r.question for r in rankings])
        rankings[0].vectors["reader_future"] = future
        return future

    def run(self, rankings: list, need: int, scope) -> None:
        from ..ranking.stages import vectors_begun

        questions: Sequence[np.ndarray] | np.ndarray
        if rankings and all("reader" in r.vectors for r in rankings):
            questions = [r.vectors["reader"] for r in rankings]
        else:
            questions = vectors_begun(rankings, "reader", self.reader.views)
        # A follow-up is read with the earlier questions before it too (one more question vector: "read_ctx").
        begun = rankings[0].vectors.pop("reader_ctx_future", None) if rankings else None
        in_context = begun.result() if begun is not None else _in_context(self.reader, [
            r for r in rankings if r.context is not None])  # fmt: skip
        for r, q in zip(rankings, questions):
            if r.candidates is None or not len(r.candidates.articles):
                continue
            r.vectors["reader"] = q
            read_candidates(self.reader, self.features.articles, r.candidates, q, self.depth, self.features.questions,
                            in_context.get(id(r)))  # fmt: skip


def _in_context(reader: Reader, followed: list) -> dict[int, np.ndarray]:
    """Each follow-up's question read after the earlier questions (by the ranking's id)."""
    if not followed:
        return {}
    return dict(zip(map(id, followed), reader.questions([f"{r.context.text} {r.question}" for r in followed])))


def read_candidates(
    reader: Reader, index, c, question: np.ndarray, depth: int, questions=None, in_context: np.ndarray | None = None
) -> None:
    """The reader's features of the first ``depth`` candidates of ``c`` (by its scores), in place;
    ``question``: the question's views (:meth:`Reader.views`, the query view first) or its query vector;
    ``questions``: the index's questions view (the candidates' written questions read too); ``in_context``: a
    follow-up's vector read with the earlier questions before it (``read_ctx``)."""
    n = len(c.articles)
    top = c.order()[:depth]
    vectors = reader.articles(index, c.articles[top], slice_size=READ_SLICE)
    for name, view in zip(VIEW_FEATURES, np.atleast_2d(question)):  # each view: its raw and min-max cosines
        cos = vectors @ view
        c.raw[name] = np.full(n, np.nan)
        c.raw[name][top] = cos
        c.values[name] = np.zeros(n)
        c.values[name][top] = minmax(cos)
    read = c.values["read"]
    mask = np.zeros(n)
    mask[top] = 1.0
    law = np.asarray(index.ranked_law)[c.articles]
    best = np.zeros(n)
    for x in np.unique(law[top]):
        same = top[law[top] == x]
        best[law == x] = read[same].max()
    best[mask == 0] = 0.0
    c.values.update({"read_law": best, "read_mask": mask})
    if in_context is not None:
        c.values["read_ctx"] = np.zeros(n)
        c.values["read_ctx"][top] = minmax(vectors @ np.asarray(in_context, dtype=np.float32))
    if questions is not None:
        read_questions(reader, questions, c, top, np.atleast_2d(question)[-1])


def read_questions(reader: Reader, questions, c, top: np.ndarray, view: np.ndarray) -> None:
    """``qread`` / ``qread2``: the question's cosine (its last view: sentence similarity where the model has it)
    with the best and second best written question of each candidate in ``top``, each written question read
    through the same prompt (question to question) and cached by text; the raw best cosine for the confidence."""
    from .candidates import _best_two

    n = len(c.articles)
    rows = questions.rows_of(c.articles[top])
    flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c.raw["qread"] = np.full(n, np.nan)
    for name in READ_QUESTION_FEATURES:
        c.values[name] = np.zeros(n)
    if not len(flat):
        return
    from ..models.vector_pack import cut

    vectors = reader.written_question_vectors(questions.texts(flat))
    cos = vectors @ cut(np.atleast_2d(view), vectors.shape[1])[0]
    local, at = [], 0
    for r in rows:
        local.append(np.arange(at, at + len(r)))
        at += len(r)
    best, second = _best_two(cos, local, missing=np.nan)
    floor = np.nanmin(best) if np.isfinite(best).any() else 0.0
    c.raw["qread"][top] = np.where(np.isfinite(best), best, -1.0)
    c.values["qread"][top] = minmax(np.where(np.isfinite(best), best, floor))
    c.values["qread2"][top] = minmax(np.where(np.isfinite(second), second, floor))


class HitReader(Stage):
    """The reader as a re-ranker of plain hits (a pipeline without an articles ranking model): the first
    ``depth`` hits ordered by the reader's cosine, each hit's cosine in its features (``read``)."""

    kind = "reranker"
    fitted = False

    def __init__(self, reader: Reader, depth: int = READ_DEPTH):
        self.reader, self.depth = reader, depth
        self.name = "reader"

    def run(self, rankings: list, need: int, scope) -> None:
        questions = self.reader.questions([r.question for r in rankings])
        for r, q in zip(rankings, questions):
            top = r.hits[: self.depth]
            if not top:
                continue
            texts = ["\n".join(c.text for c in (h.article_chunks or (h.chunk,))) for h in top]
            titles = [article_title(h.chunk.law, h.chunk.article) for h in top]
            cos = self.reader.documents(texts, titles, slice_size=READ_SLICE) @ q
            order = sorted(range(len(top)), key=lambda i: (-cos[i], i))
            r.hits = [_with(top[i], float(cos[i])) for i in order] + r.hits[self.depth :]


def _with(hit, cosine: float):
    from .._base import Hit

    return Hit(hit.chunk, cosine, hit.rank, hit.retriever, hit.article_chunks, hit.article_paragraphs,
               {**hit.features, "read": cosine, "before_read": hit.score})  # fmt: skip


# ----------------------------------------------------------------------------------------- laws read whole
LAW_VECTORS = "law_vectors.npy"  # one row per law version of the index's law table, the reader's vector of it
LAW_META = "law_vectors.json"
OPENING = 1200  # characters of a law's opening articles in its document
HEADINGS = 40  # the law's first chapter and section headings in its document


def law_documents(index) -> tuple[list[str], list[str]]:
    """(text, title) of each law version of an articles index: its names, its chapter and section headings
    and its opening articles, titled by its title. A question about a law's subject meets the law here before
    any one of its articles."""
    laws = index.laws
    n = len(laws.ids)
    ranked_law = np.asarray(index.ranked_law)
    first = np.asarray(index.first)
    order = np.lexsort((first, ranked_law))  # each law's articles in reading order
    starts = np.searchsorted(ranked_law[order], np.arange(n + 1))
    texts, titles = [], []
    for row in range(n):
        record = laws.records[row]
        mine = order[starts[row] : starts[row + 1]]
        titles.append(record.get("title") or record.get("law_id") or "")
        if not len(mine):
            texts.append(record.get("long_title") or "")
            continue
        heads: list[str] = []
        opening, chunks = "", index.chunks.rows([int(first[x]) for x in mine[:HEADINGS]])
        for ch in chunks:
            if ch.path_label and ch.path_label not in heads:
                heads.append(ch.path_label)
            if len(opening) < OPENING:
                opening += f"{ch.article}: {ch.text[: OPENING - len(opening)]}\n"
        names = [x for x in (record.get("long_title"), *(record.get("names") or [])) if x and x != titles[-1]]
        texts.append("\n".join(part for part in ("; ".join(names[:4]), "; ".join(heads), opening.strip()) if part))
    return texts, titles


def read_laws(folder: Path, index, reader: Reader, progress: bool = True) -> dict:
    """Every law version of the index read whole, its vectors kept in the index folder (``law_vectors.npy``),
    and what they are in ``law_vectors.json``; the texts go through the reader's cache, so a rebuild reads
    only laws whose text changed."""
    import json
    import time

    t0 = time.perf_counter()
    texts, titles = law_documents(index)
    before = len(reader.cache)
    vectors = np.zeros((len(texts), reader.encoder.dim), dtype=np.float32)
    step = 256
    from tqdm import tqdm

    with tqdm(total=len(texts), unit="law", desc="reading laws", disable=not progress, leave=False) as bar:
        for start in range(0, len(texts), step):
            full = reader.cache.vectors(
                [reader.encoder.document(t, ti) for t, ti in zip(texts[start : start + step], titles[start : start + step])],
                reader._formatted,
            )  # fmt: skip
            vectors[start : start + step] = full
            bar.update(len(full))
    np.save(folder / LAW_VECTORS, vectors.astype(np.float16))
    meta = reader.identity() | {"laws": len(texts), "read": len(reader.cache) - before,
                                "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    (folder / LAW_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


class LawReader:
    """The reader's vectors of an index's laws (kept by :func:`read_laws`): which laws a question is about."""

    def __init__(self, folder: Path, reader: Reader):
        import json

        self.meta = json.loads((folder / LAW_META).read_text(encoding="utf-8"))
        self.vectors = np.load(folder / LAW_VECTORS, mmap_mode="r")
        self.reader = reader
        self._dense: np.ndarray | None = None

    @classmethod
    def load(cls, folder: Path, reader: Reader) -> LawReader | None:
        """The index's law vectors when they are this reader's, else None."""
        import json

        path = folder / LAW_META
        if not path.is_file():
            return None
        meta = json.loads(path.read_text(encoding="utf-8"))
        mine = reader.identity()
        # By content, never by place: the same weights copied elsewhere read with the laws they read.
        differ = [k for k in ("weights", "max_tokens", "variant") if meta.get(k) != mine.get(k)]
        if differ:
            log.warning(
                "wetqa: warning: %s holds laws read by another reader (%s differ): questions do not find laws by "
                "reading; rebuild it with `wetqa index --force --reader %s`",
                folder,
                ", ".join(differ),
                reader.model,
            )
            return None
        return cls(folder, reader)

    def cosines(self, question: np.ndarray) -> np.ndarray:
        """The question's cosine with every law version (Matryoshka-cut as the reader's vectors are)."""
        if self._dense is None:
            self._dense = self.reader._cut(np.asarray(self.vectors, dtype=np.float32))
        return self._dense @ question
