#!/usr/bin/env bash
# bench_generate.sh — end-to-end table for docs/BENCHMARKS.md: load time,
# prefill and decode tok/s, peak resident memory vs checkpoint size, for each
# model folder given, at 1 and 2 threads. Runs `moe8 generate` (greedy,
# --ignore-eos) on a fixed ~70-token prompt; each cell is the best of REPS runs.
#   scripts/bench_generate.sh DIR [DIR ...]     (THREADS="1 2" REPS=3 N=33)
set -euo pipefail
MOE8=${MOE8:-$(dirname "$0")/../build/moe8}
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-3}
N=${N:-33}
PROMPT="The history of computing is a story of machines that learned to count, then to store, \
then to reason about numbers faster than any person could. Early mechanical calculators gave \
way to electronic computers, and those in turn to the processors in every phone today. Tell me"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

stat() { sed -n 's/.*\b'"$1"'=\([0-9.]*\).*/\1/p' <<<"$2"; }
best() { # best (max or min) of a column over runs
    sort -g | if [ "$1" = max ]; then tail -1; else head -1; fi
}

printf '| model | checkpoint MB | threads | load s | prompt tok | prefill tok/s | decode tok/s | peak RSS MB | RSS / checkpoint |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for dir in "$@"; do
    ck=$(du -sm --apparent-size "$dir"/*.safetensors | awk '{s += $1} END {print s}')
    for t in $THREADS; do
        loads=() pre=() dec=() rss=() ptok=0
        for _ in $(seq "$REPS"); do
            line=$("$MOE8" generate -m "$dir" -p "$PROMPT" -n "$N" --ignore-eos --threads "$t" 2>&1 >/dev/null | tail -1)
            loads+=("$(stat load_s "$line")"); pre+=("$(stat prefill_tok_s "$line")")
            dec+=("$(stat decode_tok_s "$line")"); rss+=("$(stat peak_rss_mb "$line")")
            ptok=$(stat prompt_tokens "$line")
        done
        l=$(printf '%s\n' "${loads[@]}" | best min); p=$(printf '%s\n' "${pre[@]}" | best max)
        d=$(printf '%s\n' "${dec[@]}" | best max); r=$(printf '%s\n' "${rss[@]}" | best min)
        printf '| %s | %d | %d | %.2f | %d | %.1f | %.2f | %.0f | %.2f |\n' "$(basename "$dir")" "$ck" "$t" \
            "$l" "$ptok" "$p" "$d" "$r" "$(awk -v a="$r" -v b="$ck" 'BEGIN {print a / b}')"
    done
done
