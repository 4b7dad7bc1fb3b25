#!/bin/sh
# crosscheck_llamacpp.sh — does llama.cpp run the file `moe8 export-gguf` writes
# as moe8 runs the model folder? One family's preset (moe8 make-model), exported
# as each of $TYPES; the last-position logits of one prompt (moe8 generate
# --dump-logits, f16 KV) against llama.cpp's (scripts/bench_llamacpp.mjs --ids,
# node-llama-cpp under .deps/llamacpp), and $N greedy tokens of each. Prints a
# markdown table on stdout; the committed outputs are
# tests/data/llamacpp_crosscheck/<arch>_<preset>.md (docs/BENCHMARKS.md), and
# tests/test_export_gguf_llamacpp.c runs it (bf16 only) and checks its numbers.
#
# gpt_oss: the preset's experts are MXFP4 as released, and so are the GGUF's
# (export-gguf repacks them; --type is the other matrices'); moe8 runs a
# make-model --float-experts copy of the same seed (bf16 experts holding the
# MXFP4 values exactly, run in fp32) so that neither side's conversion of the
# experts is measured, only llama.cpp's against moe8's arithmetic. The extra
# type float-bf16 exports that copy (experts BF16) for llama.cpp too.
#
# Usage: ARCH=minimax_m2 scripts/crosscheck_llamacpp.sh > out.md
# Environment: ARCH (glm4_moe), PRESET (tiny), TYPES ("bf16 f16 q8_0"; gpt_oss
# adds float-bf16), N (16),
# THREADS (2), MOE8 (build/moe8), DIR (/tmp/crosscheck_$ARCH_$PRESET: the model
# and the files; removed unless KEEP=1), MODEL (an existing float model folder
# instead of make-model).
# Exit status 77 when node or node-llama-cpp is missing (nothing run).
set -eu
ARCH=${ARCH:-glm4_moe}
PRESET=${PRESET:-tiny}
if [ "$ARCH" = gpt_oss ]; then TYPES=${TYPES:-bf16 f16 q8_0 float-bf16}; fi
TYPES=${TYPES:-bf16 f16 q8_0}
N=${N:-16}
THREADS=${THREADS:-2}
MOE8=${MOE8:-build/moe8}
DIR=${DIR:-/tmp/crosscheck_${ARCH}_$PRESET}
KEEP=${KEEP:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
NLC="$HERE/../.deps/llamacpp/node_modules/node-llama-cpp/package.json"
PROMPT="The quick brown fox jumps over the lazy dog. Hello, my name is"

if ! command -v node >/dev/null 2>&1 || [ ! -f "$NLC" ]; then
    echo "crosscheck_llamacpp.sh: node or node-llama-cpp (.deps/llamacpp) missing" >&2
    exit 77
fi
mkdir -p "$DIR"
MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then
    MODEL="$DIR/model"
    "$MOE8" make-model --arch "$ARCH" --preset "$PRESET" -o "$MODEL" --force >/dev/null
fi
RUN="$MODEL"
if [ "$ARCH" = gpt_oss ] && [ "$MODEL" = "$DIR/model" ]; then
    RUN="$DIR/model_float"
    "$MOE8" make-model --arch "$ARCH" --preset "$PRESET" --float-experts -o "$RUN" --force >/dev/null
fi
IDS=$("$MOE8" tokenize -m "$MODEL" -p "$PROMPT" | tr ' ' ',')
"$MOE8" generate -m "$RUN" --prompt-ids "$IDS" -n "$N" --ids --ignore-eos \
    --dump-logits "$DIR/moe8.logits" --threads "$THREADS" >"$DIR/moe8.ids" 2>"$DIR/generate.log"
MIDS=$(cat "$DIR/moe8.ids")
VERSION=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$NLC" | head -n 1)
N_IDS=$(echo "$IDS" | tr ',' '\n' | grep -c .)

echo "$ARCH $PRESET ($(sed -n 's/^[^"]*"num_hidden_layers":[^0-9]*\([0-9]*\).*/\1/p' "$MODEL/config.json") layers," \
    "H $(sed -n 's/^[^"]*"hidden_size":[^0-9]*\([0-9]*\).*/\1/p' "$MODEL/config.json")):" \
    "moe8 $([ "$RUN" = "$MODEL" ] && echo bf16 || echo float-experts) folder, f16 KV, against llama.cpp (node-llama-cpp $VERSION) on the export;" \
    "prompt \"$PROMPT\" ($N_IDS ids), $N greedy tokens, $THREADS threads"
echo
echo "| GGUF | logits cosine | rms diff (rms) | max \\|diff\\| (max \\|logit\\|) | KL(moe8‖llama.cpp) | top-5 | greedy equal |"
echo "|---|---:|---:|---:|---:|---|---:|"
for t in $TYPES; do
    src="$MODEL" type=$t label=$(echo "$t" | tr a-z A-Z)
    case $t in float-*) src="$RUN" type=${t#float-} label="$(echo "$type" | tr a-z A-Z) float experts" ;; esac
    "$MOE8" export-gguf -m "$src" -o "$DIR/$t.gguf" --type "$type" --force >/dev/null 2>"$DIR/export_$t.log"
    node "$HERE/bench_llamacpp.mjs" --model "$DIR/$t.gguf" --ids "$IDS" --n "$N" --threads "$THREADS" \
        --moe8-logits "$DIR/moe8.logits" --moe8-ids "$MIDS" >"$DIR/llama_$t.txt" 2>&1 ||
        { cat "$DIR/llama_$t.txt" >&2; exit 1; }
    [ "$KEEP" = 1 ] || rm -f "$DIR/$t.gguf"
    L=$(grep '^last-position logits' "$DIR/llama_$t.txt")
    T5=$(grep '^top-5' "$DIR/llama_$t.txt")
    SAME=$(sed -n 's/^same first \([0-9]*\) of \([0-9]*\).*/\1\/\2/p' "$DIR/llama_$t.txt")
    cos=$(echo "$L" | sed 's/.*cosine \([^,]*\),.*/\1/')
    rms=$(echo "$L" | sed "s/.*rms diff \([^ ]*\) (rms of moe8's \([^)]*\)).*/\1 (\2)/")
    mx=$(echo "$L" | sed 's/.*max |diff| \([^ ]*\) (max |logit| \([^)]*\)).*/\1 (\2)/')
    kl=$(echo "$L" | sed 's/.*KL(moe8||llama.cpp) \([^ ]*\).*/\1/')
    a=$(echo "$T5" | sed 's/^top-5 llama.cpp \(.*\) | moe8 .*/\1/')
    b=$(echo "$T5" | sed 's/.* | moe8 \(.*\) | top-1.*/\1/')
    k=0
    for i in 1 2 3 4 5; do
        [ "$(echo "$a" | cut -d' ' -f"$i")" = "$(echo "$b" | cut -d' ' -f"$i")" ] || break
        k=$i
    done
    if [ "$k" = 5 ]; then top=same; else top="top-$k same"; fi
    echo "| $label | $cos | $rms | $mx | $kl | $top | $SAME |"
done
[ "$KEEP" = 1 ] || rm -rf "$DIR"
