#!/bin/sh
# perplexity_llamacpp.sh — the perplexity of one family's make-model preset in moe8
# (`moe8 perplexity` on the BF16 folder, f32 KV) and in llama.cpp on that folder's
# BF16 export (`moe8 export-gguf --type bf16`, scripts/perplexity_llamacpp.mjs over
# node-llama-cpp under .deps/llamacpp), on the same token ids (moe8 tokenize of a
# fixed English text written here), chunks of $C, the second half of each scored.
# Prints a markdown table on stdout; the committed outputs are
# tests/data/llamacpp_crosscheck/<arch>_<preset>_ppl.md. The weights are random
# (make-model), so the perplexity is of the order of the vocabulary: what is checked
# is that both compute the same number from the same weights.
#
# gpt_oss: the export keeps the preset's MXFP4 experts (BF16 the rest), and
# moe8 runs a make-model --float-experts copy of the same seed (its bf16
# experts hold the MXFP4 values exactly): both score the same weights, moe8's
# experts in fp32 (scripts/crosscheck_llamacpp.sh says why).
#
# Usage: ARCH=qwen3_5_moe scripts/perplexity_llamacpp.sh > out.md
# Environment: ARCH (qwen3_5_moe), PRESET (tiny), C (128), CHUNKS (4), THREADS (2),
# MOE8 (build/moe8), DIR (/tmp/ppl_$ARCH_$PRESET; removed unless KEEP=1).
# Exit status 77 when node or node-llama-cpp is missing (nothing run).
set -eu
ARCH=${ARCH:-qwen3_5_moe}
PRESET=${PRESET:-tiny}
C=${C:-128}
CHUNKS=${CHUNKS:-4}
THREADS=${THREADS:-2}
MOE8=${MOE8:-build/moe8}
DIR=${DIR:-/tmp/ppl_${ARCH}_$PRESET}
KEEP=${KEEP:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
NLC="$HERE/../.deps/llamacpp/node_modules/node-llama-cpp/package.json"

if ! command -v node >/dev/null 2>&1 || [ ! -f "$NLC" ]; then
    echo "perplexity_llamacpp.sh: node or node-llama-cpp (.deps/llamacpp) missing" >&2
    exit 77
fi
mkdir -p "$DIR"
MODEL="$DIR/model"
"$MOE8" make-model --arch "$ARCH" --preset "$PRESET" -o "$MODEL" --force >/dev/null
RUN="$MODEL"
if [ "$ARCH" = gpt_oss ]; then
    RUN="$DIR/model_float"
    "$MOE8" make-model --arch "$ARCH" --preset "$PRESET" --float-experts -o "$RUN" --force >/dev/null
fi
: >"$DIR/text.txt"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    cat >>"$DIR/text.txt" <<'EOF'
It was a bright cold day in April, and the clocks were striking thirteen. Winston Smith, his
chin nuzzled into his breast in an effort to escape the vile wind, slipped quickly through the
glass doors of Victory Mansions, though not quickly enough to prevent a swirl of gritty dust from
entering along with him. The quick brown fox jumps over the lazy dog; 42 apples cost $3.50 at the
market, and the river ran north past the mill before it turned toward the sea.
EOF
done
"$MOE8" tokenize -m "$MODEL" -f "$DIR/text.txt" >"$DIR/ids.txt"
"$MOE8" perplexity -m "$RUN" -f "$DIR/text.txt" -c "$C" --chunks "$CHUNKS" --threads "$THREADS" \
    --kv-type f32 >"$DIR/moe8.txt" 2>"$DIR/moe8.log"
"$MOE8" export-gguf -m "$MODEL" -o "$DIR/bf16.gguf" --type bf16 --force >/dev/null 2>"$DIR/export.log"
node "$HERE/perplexity_llamacpp.mjs" --model "$DIR/bf16.gguf" --ids-file "$DIR/ids.txt" -c "$C" \
    --chunks "$CHUNKS" --threads "$THREADS" >"$DIR/llama.txt" 2>&1 ||
    { cat "$DIR/llama.txt" >&2; exit 1; }
VERSION=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$NLC" | head -n 1)
M=$(grep -i 'estimate' "$DIR/moe8.txt" | sed 's/.*PPL = \([0-9.e+-]*\).*/\1/')
L=$(grep '^estimate' "$DIR/llama.txt" | sed 's/.*PPL = \([0-9.e+-]*\).*/\1/')
N=$(grep '^estimate' "$DIR/llama.txt" | sed 's/.*(\([0-9]*\) scored.*/\1/')
echo "$ARCH $PRESET: perplexity of the $([ "$RUN" = "$MODEL" ] && echo BF16 || echo float-experts) folder in moe8 (f32 KV) and of the BF16 export$([ "$RUN" = "$MODEL" ] || echo ' (MXFP4 experts)') in" \
    "llama.cpp (node-llama-cpp $VERSION), the same $(wc -w <"$DIR/ids.txt") ids" \
    "(moe8 tokenize), $CHUNKS chunks of $C, $N scored tokens, $THREADS threads"
echo
echo "| | perplexity | relative to moe8 |"
echo "|---|---:|---:|"
echo "| moe8 | $M | |"
echo "| llama.cpp | $L | $(echo "$L $M" | awk '{printf "%+.2e", $1 / $2 - 1}') |"
[ "$KEEP" = 1 ] || rm -rf "$DIR"
