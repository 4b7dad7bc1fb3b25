#!/bin/sh
# bench_busy.sh — decode and prefill beside one busy process (issue 36): moe8 on
# $DIR/w4a8 (--lm-head int8) and llama.cpp on $DIR/q4_k_m{,-1l}.gguf, as made by
# scripts/bench_llamacpp_family.sh (LLQ=q4_k_m W=w4a8), quiet then with
# `while :; do :; done` beside, two rounds; logs in $OUT (default $DIR/busy).
D=${DIR:-/tmp/bench_a3b}; M=${MOE8:-build/moe8}; OUT=${OUT:-$D/busy}; mkdir -p $OUT
T="/usr/bin/time -f cpu_user_s=%U_sys_s=%S_wall_s=%e"
for r in ${ROUNDS_LIST:-1 2}; do
  for mode in quiet busy; do
    if [ $mode = busy ]; then sh -c 'while :; do :; done' & BP=$!; fi
    uptime > $OUT/moe8_${mode}_$r.txt
    $T -a -o $OUT/moe8_${mode}_$r.txt $M bench forward -m $D/w4a8 --tokens 1,512 --ctx 512 --threads 2 --reps 1 --steps 32 --lm-head int8 >> $OUT/moe8_${mode}_$r.txt 2>&1
    uptime > $OUT/llama_${mode}_$r.txt
    timeout 150 $T -a -o $OUT/llama_${mode}_$r.txt node "$(dirname "$0")/bench_llamacpp.mjs" --model $D/q4_k_m.gguf --model2 $D/q4_k_m-1l.gguf --threads 2 --tokens 512 --decode-ctx 512 --decode-n 32 --reps 1 >> $OUT/llama_${mode}_$r.txt 2>&1
    if [ $mode = busy ]; then kill $BP; fi
  done
done
