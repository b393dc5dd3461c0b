"""What an ONNX export of a sentence encoder holds and what it was made from: the names of its files and the
identity of the weights it came from. The query-time encoder (:mod:`.onnx_encoder`) reads an export by these;
making one is offline tooling (:mod:`wetqa.retrieval.tooling.export`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

ONNX_DIR = "onnx"
GRAPH = "encoder.onnx"
# The same graph with its weights quantized to int8, per output channel (ONNX Runtime's dynamic
# quantization): passages encode 1.6x faster; its vectors agree with the float32 graph's at cosine .996
# (mean, 200 passages), and the ranking with them is the same (mE5-small, 51 dev questions: dense-alone
# article Hit@1 .706 with float32 passage vectors and with int8 ones, everyday questions .226 / .250).
# Questions stay float32 (with both int8, dev Hit@1 fell to .686). Gemma's down projections are quantized
# with an activation scale per token instead of one a run (see DOWN).
PASSAGE_GRAPH = "encoder.int8.onnx"
TABLE = "word_embeddings.npy"
META = "onnx.json"
PROBE_FILE = "probe.json"  # the vector of a fixed question through each question path, as exported

# Encoded at build time and again at load: the same model gives the same vector. A model folder
# replaced by another model (or a re-conversion that changed it) is caught before any search.
PROBE = "Wanneer kan de rechter het gezag van een ouder beëindigen?"


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
