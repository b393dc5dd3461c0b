"""A SentencePiece-unigram tokenizer in plain Python, the same ids as Hugging Face ``tokenizers`` gives.

Why not ``tokenizers`` at query time: for multilingual-E5's 250k-piece vocabulary its trie takes
about 270 MB and 0.7 s to load, more than the rest of a question's work together. This one keeps
the vocabulary as a dict (about 35 MB, loaded in tens of milliseconds from ``pieces.txt`` and
``scores.npy``) and runs the same Viterbi search: per word, the best-scoring split into pieces, a
character no piece covers becomes the unknown piece (scored ``min_score - 10``), neighbouring
unknowns are fused, and of equal scores the path found first wins, as in ``tokenizers``'
``encode_optimized``. The pipeline around it is the one ``tokenizer.json`` describes for these
models: special tokens split off first, the normalizer (character replacements, NFKC, collapsing
spaces), Metaspace (spaces as U+2581, one prepended, split before each), then ``<s> ... </s>`` and
truncation. ``tests`` check the ids against ``tokenizers`` on questions and law text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._base import RetrievalError

PIECES = "pieces.txt"  # the vocabulary, pieces separated by NUL, in id order
SCORES = "scores.npy"
CONFIG = "unigram.json"  # normalizer steps, special tokens, unknown id, template ids
_UNK_PENALTY = 10.0
_META = "\u2581"


def export_unigram(tokenizer_json: Path, out: Path) -> None:
    """Write the compact form of a ``tokenizer.json`` (Unigram model, SentencePiece-style pipeline)."""
    d = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    model = d.get("model", {})
    if model.get("type") != "Unigram" or model.get("byte_fallback"):
        raise RetrievalError(f"{tokenizer_json}: not a Unigram tokenizer without byte fallback")
    pieces = [p for p, _ in model["vocab"]]
    if any("\x00" in p for p in pieces):
        raise RetrievalError(f"{tokenizer_json}: a piece holds NUL, which the compact vocabulary cannot store")
    steps = []
    normalizer = d.get("normalizer") or {"type": "Sequence", "normalizers": []}
    for step in normalizer.get("normalizers", [normalizer]) if normalizer["type"] == "Sequence" else [normalizer]:
        kind = step["type"]
        if kind == "Replace":
            pattern = step["pattern"]
            regex = pattern.get("Regex")
            # Rust's \x{...} escapes read as Python's \U........
            regex = (
                re.sub(r"\\x\{([0-9a-fA-F]+)\}", lambda m: f"\\U{int(m.group(1), 16):08x}", regex) if regex else None
            )
            steps.append({"replace": regex or re.escape(pattern["String"]), "with": step["content"]})
        elif kind in ("NFKC", "NFC", "NFD", "NFKD"):
            steps.append({"unicode": kind})
        else:
            raise RetrievalError(f"{tokenizer_json}: normalizer {kind} is not supported")
    pre = d.get("pre_tokenizer") or {}
    if pre.get("type") != "Metaspace" or pre.get("prepend_scheme", "always") != "always" or not pre.get("split", True):
        raise RetrievalError(f"{tokenizer_json}: only a Metaspace pre-tokenizer (always prepend, split) is supported")
    template = (d.get("post_processor") or {}).get("single") or []
    special = {t["content"]: t["id"] for t in d.get("added_tokens", [])}
    ids = [special[x["SpecialToken"]["id"]] if "SpecialToken" in x else None for x in template]
    trunc = d.get("truncation") or {}
    config = {
        "unk_id": model["unk_id"],
        "normalizer": steps,
        "special": special,
        "template": ids,  # the ids around the text; None marks the text
        "max_length": trunc.get("max_length", 512),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / PIECES).write_text("\x00".join(pieces), encoding="utf-8")
    np.save(out / SCORES, np.asarray([s for _, s in model["vocab"]], dtype=np.float64))
    (out / CONFIG).write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")


class UnigramTokenizer:
    def __init__(self, folder: str | Path, max_length: int | None = None):
        folder = Path(folder)
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        pieces = (folder / PIECES).read_text(encoding="utf-8").split("\x00")
        self.ids = dict(zip(pieces, range(len(pieces))))
        self.scores = np.load(folder / SCORES).tolist()
        self.max_piece = max(map(len, pieces))
        self.unk_id = int(config["unk_id"])
        self.unk_score = min(self.scores) - _UNK_PENALTY
        self.steps = [
            (re.compile(s["replace"]), s["with"]) if "replace" in s else (None, s["unicode"])
            for s in config["normalizer"]
        ]
        self.special = config["special"]
        self.split_special = (
            re.compile("(" + "|".join(re.escape(t) for t in sorted(self.special, key=len, reverse=True)) + ")")
            if self.special
            else None
        )
        self.template = config["template"]
        self.max_length = int(max_length or config["max_length"])

    def normalize(self, text: str) -> str:
        for pattern, arg in self.steps:
            text = unicodedata.normalize(arg, text) if pattern is None else pattern.sub(arg, text)
        return text

    def words(self, text: str) -> list[str]:
        """Metaspace: spaces as U+2581, one prepended, and a split before each."""
        text = text.replace(" ", _META)
        if not text.startswith(_META):
            text = _META + text
        out = []
        start = 0
        for i in range(1, len(text)):
            if text[i] == _META:
                out.append(text[start:i])
                start = i
        out.append(text[start:])
        return [w for w in out if w]

    def word_ids(self, word: str) -> list[int]:
        """The best split of one word (tokenizers' encode_optimized), unknown neighbours fused."""
        n = len(word)
        ids, scores, longest = self.ids, self.scores, self.max_piece
        best = [0.0] * (n + 1)
        start_of = [-1] * (n + 1)
        piece_of = [0] * (n + 1)
        for s in range(n):
            base = best[s]
            single = False
            for e in range(s + 1, min(n, s + longest) + 1):
                pid = ids.get(word[s:e])
                if pid is None:
                    continue
                cand = base + scores[pid]
                if start_of[e] < 0 or cand > best[e]:
                    best[e], start_of[e], piece_of[e] = cand, s, pid
                if e == s + 1:
                    single = True
            if not single:
                cand = base + self.unk_score
                if start_of[s + 1] < 0 or cand > best[s + 1]:
                    best[s + 1], start_of[s + 1], piece_of[s + 1] = cand, s, self.unk_id
        out: list[int] = []
        e = n
        while e > 0:
            pid = piece_of[e]
            if not (pid == self.unk_id and out and out[-1] == self.unk_id):  # fused with the unknown after it
                out.append(pid)
            e = start_of[e]
        out.reverse()
        return out

    def encode(self, text: str) -> list[int]:
        """The ids of a text with the model's special tokens around it, truncated to ``max_length``."""
        ids: list[int] = []
        parts = self.split_special.split(text) if self.split_special else [text]
        for i, part in enumerate(parts):
            if i % 2:  # a special token written in the text
                ids.append(self.special[part])
            elif part and (normalized := self.normalize(part)):
                for word in self.words(normalized):
                    ids.extend(self.word_ids(word))
        room = self.max_length - sum(1 for x in self.template if x is not None)
        ids = ids[:room]
        out: list[int] = []
        for x in self.template:
            out.extend(ids if x is None else [x])
        return out if self.template else ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]
