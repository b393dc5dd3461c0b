#!/usr/bin/env bash
# The main job: build the law corpus and answer a question with cited articles.
# Law XML comes from $WETQA_BWB_DIR (on the development machines ../shared/data/bwb);
# without it the 273-law reference corpus is downloaded from the official BWB repository.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
WETQA=.venv/bin/wetqa
DATA=${WETQA_DATA:-data}
QUESTION=${1:-"Wanneer kan de rechter het gezag van een ouder beëindigen?"}
if [ -n "${WETQA_BWB_DIR:-}" ]; then
  SOURCE=$WETQA_BWB_DIR
else
  SOURCE=$DATA/bwb
  $WETQA corpus download --reference --out "$SOURCE"
fi
$WETQA corpus build --source "$SOURCE" --out "$DATA/corpus"
if $WETQA --help | grep -q ' ask '; then
  $WETQA index --corpus "$DATA/corpus" --retriever bm25s --out "$DATA/index-bm25s"
  $WETQA ask "$QUESTION" --index "$DATA/index-bm25s"
fi
