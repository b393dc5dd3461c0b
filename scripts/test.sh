#!/usr/bin/env bash
# Set up .venv (and the system packages the tests drive) and run the whole test suite:
# fast unit tests and the slower integration tier (real corpus, real servers, real models).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -m "unit or integration" "$@"
