#!/usr/bin/env bash
# mypy over the wetqa namespace. The stage folders install as wetqa.corpus, wetqa.retrieval, ...
# (pyproject's package-dir); mypy reads folders, so lay them out that way with links first.
set -euo pipefail
cd "$(dirname "$0")/.."
T=.typecheck
rm -rf "$T"  # wetqa's own scratch folder (in .gitignore), made anew each run
mkdir -p "$T/wetqa"
for f in wetqa/*.py; do ln -s "../../$f" "$T/wetqa/$(basename "$f")"; done
for stage in corpus retrieval generation evaluation serve; do ln -s "../../$stage" "$T/wetqa/$stage"; done
cd "$T" && ../.venv/bin/python -m mypy --config-file ../pyproject.toml --no-error-summary -p wetqa "$@" && echo "mypy: no issues"
