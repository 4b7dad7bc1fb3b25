#!/bin/sh
# bench_llamacpp_family.sh — per layer, moe8 W8A8 against llama.cpp's Q8_0 of the
# same weights on a family's `slice` preset (issue 34's targets: prefill of 512
# tokens >= 3x, decode >= 1.5x), 2 threads, runs alternated. Each step is one
# command that can be rerun alone (docs/BENCHMARKS.md, "llama.cpp on the same
# weights"):
#
#   1. moe8 make-model --arch $ARCH --preset slice --layers $L     bf16 weights
#   2. moe8 export-gguf ... (Q8_0, $L layers and $L2 layers)      llama.cpp's files
#   3. moe8 quantize                                                moe8's W8A8
#   4. a $L2-layer view of the W8A8 folder (its files hard-linked, config.json's
#      num_hidden_layers $L2) so that moe8's time per layer is taken by the same
#      difference as llama.cpp's: (t($L layers) - t($L2 layers)) / ($L - $L2);
#      for glm4_moe ($L 3, $L2 2) that is one MoE layer of GLM-4.5-Air (layer 0
#      is dense: first_k_dense_replace 1); for minimax_m2 use L=2 L2=1 (its
#      slice has 2 layers, every one MoE)
#   5. $ROUNDS rounds, each: llama.cpp (bench_llamacpp.mjs, both files, prefill
#      $T and decode after a 512-token prompt), then moe8 bench forward on both
#      folders; `uptime` before and after each run and its user+sys CPU seconds
#      beside its wall seconds (/usr/bin/time). Logs in $DIR/log/.
#   6. the medians per layer and the speed-ups (printed, from the logs).
#
# Other quantizations (issue 36's table): LLQ=q4_k_m makes llama.cpp's file
# with llama.cpp's own quantizer (scripts/llamacpp_quantize.c over the
# libllama.so that node-llama-cpp ships, from a BF16 export); W names moe8's
# folder, QUANT_ARGS are given to moe8 quantize (W=w4a8 QUANT_ARGS="--experts
# w4a8 --linear w4a8"), BENCH_ARGS to moe8 bench forward (--lm-head int8);
# LOG names the log folder so that such runs keep their own logs.
#
# Usage: scripts/bench_llamacpp_family.sh [steps]   (default: 1 2 3 4 5 6)
# Environment: ARCH (glm4_moe), DIR (/tmp/bench_$ARCH: ~30 GB for glm4_moe),
# L (3), L2 (2), THREADS (2), ROUNDS (3; FIRST=4 ROUNDS=5 adds rounds 4 and 5), T (512), DECODE_N (32), MOE8 (build/moe8).
# Needs node and node-llama-cpp under .deps/llamacpp (see bench_llamacpp.mjs).
set -eu
ARCH=${ARCH:-glm4_moe}
DIR=${DIR:-/tmp/bench_$ARCH}
L=${L:-3}
L2=${L2:-2}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
FIRST=${FIRST:-1}
T=${T:-512}
DECODE_N=${DECODE_N:-32}
MOE8=${MOE8:-build/moe8}
LLQ=${LLQ:-q8_0}
W=${W:-w8a8}
QUANT_ARGS=${QUANT_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
LOG=${LOG:-$DIR/log}
STEPS=${*:-1 2 3 4 5 6}
HERE=$(cd "$(dirname "$0")" && pwd)
# each run's CPU seconds beside its wall seconds (the machine may be shared:
# user+sys well under THREADS x wall means the run waited for a core)
TIME="/usr/bin/time -f cpu_user_s=%U_sys_s=%S_wall_s=%e"
mkdir -p "$LOG"
say() { echo "== $(date -u +%H:%M:%S) $*"; }

for s in $STEPS; do
    case $s in
    1)  say "make-model $ARCH slice, $L layers"
        "$MOE8" make-model --arch "$ARCH" --preset slice --layers "$L" -o "$DIR/bf16" --force ;;
    2)  say "export-gguf $LLQ, $L and $L2 layers"
        case $LLQ in
        q8_0|f16|bf16)
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/$LLQ.gguf" --type "$LLQ" --force
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/$LLQ-${L2}l.gguf" --type "$LLQ" --layers "$L2" --force ;;
        mxfp4)  # gpt_oss: experts MXFP4 as released (repacked), the rest Q8_0
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/$LLQ.gguf" --type q8_0 --force
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/$LLQ-${L2}l.gguf" --type q8_0 --layers "$L2" --force ;;
        *)  case $LLQ in q4_k_m) ft=15 ;; q4_k_s) ft=14 ;; q4_0) ft=2 ;; *) echo "LLQ $LLQ?" >&2; exit 2 ;; esac
            lib=$(ls "$HERE"/../.deps/llamacpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama*.so | head -1)
            cc -O1 -o "$DIR/llamacpp_quantize" "$HERE/llamacpp_quantize.c" -ldl
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/bf16-src.gguf" --type bf16 --force
            "$DIR/llamacpp_quantize" "$lib" "$DIR/bf16-src.gguf" "$DIR/$LLQ.gguf" $ft "$THREADS"
            "$MOE8" export-gguf -m "$DIR/bf16" -o "$DIR/bf16-src.gguf" --type bf16 --layers "$L2" --force
            "$DIR/llamacpp_quantize" "$lib" "$DIR/bf16-src.gguf" "$DIR/$LLQ-${L2}l.gguf" $ft "$THREADS"
            rm -f "$DIR/bf16-src.gguf" ;;
        esac ;;
    3)  say "quantize $W ($QUANT_ARGS)"
        "$MOE8" quantize -i "$DIR/bf16" -o "$DIR/$W" $QUANT_ARGS --force ;;
    4)  say "the $L2-layer view of the W8A8 folder"
        rm -rf "$DIR/$W-${L2}l"
        mkdir -p "$DIR/$W-${L2}l"
        for f in "$DIR/$W"/*; do
            # hard links: moe8 refuses shards that resolve outside the folder
            [ "$(basename "$f")" = config.json ] || ln "$f" "$DIR/$W-${L2}l/" || cp "$f" "$DIR/$W-${L2}l/"
        done
        python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["num_hidden_layers"]=int(sys.argv[3]); c.update({k: c[k][:int(sys.argv[3])] for k in ("layer_types",) if isinstance(c.get(k), list)}); json.dump(c, open(sys.argv[2],"w"), indent=2)' \
            "$DIR/$W/config.json" "$DIR/$W-${L2}l/config.json" "$L2" ;;
    5)  for r in $(seq "$FIRST" "$ROUNDS"); do
            say "round $r: llama.cpp"
            uptime >"$LOG/llama_$r.txt"
            $TIME -a -o "$LOG/llama_$r.txt" node "$HERE/bench_llamacpp.mjs" --model "$DIR/$LLQ.gguf" --model2 "$DIR/$LLQ-${L2}l.gguf" \
                --threads "$THREADS" --tokens "$T" --decode-ctx 512 --decode-n "$DECODE_N" --reps 1 \
                >>"$LOG/llama_$r.txt" 2>&1 || { cat "$LOG/llama_$r.txt"; exit 1; }
            uptime >>"$LOG/llama_$r.txt"
            for m in "$W" "$W-${L2}l"; do
                say "round $r: moe8 $m"
                uptime >"$LOG/moe8_${m}_$r.txt"
                OMP_WAIT_POLICY=passive $TIME -a -o "$LOG/moe8_${m}_$r.txt" "$MOE8" bench forward -m "$DIR/$m" --tokens "1,$T" --ctx 512 \
                    --threads "$THREADS" --reps 1 --steps "$DECODE_N" $BENCH_ARGS >>"$LOG/moe8_${m}_$r.txt" 2>&1 ||
                    { cat "$LOG/moe8_${m}_$r.txt"; exit 1; }
                uptime >>"$LOG/moe8_${m}_$r.txt"
            done
        done ;;
    6)  python3 "$HERE/bench_llamacpp_family.py" "$DIR" "$L" "$L2" "$ROUNDS" "$W" "$LOG" ;;
    *)  echo "bench_llamacpp_family.sh: unknown step '$s'" >&2; exit 2 ;;
    esac
done
