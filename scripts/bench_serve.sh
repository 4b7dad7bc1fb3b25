#!/usr/bin/env bash
# bench_serve.sh — the serving table of docs/BENCHMARKS.md: `moe8 bench serve`
# against `moe8 serve` on one model folder, at several concurrencies, plus a
# run whose prompts share a prefix. Per run: request throughput, output
# tok/s, TTFT / TPOT p50 / p99, the prefix-cache hit rate (from /metrics,
# the run's share) and the server's peak RSS.
#   scripts/bench_serve.sh DIR     (CONC="1 4 16 64" IN=256 OUT=128 SHARED=200 THREADS=2
#                                   EXTRA="--json-schema tests/data/bench_schema12.json": more
#                                   flags for every bench serve run)
set -euo pipefail
MOE8=${MOE8:-$(dirname "$0")/../build/moe8}
DIR=$1
CONC=${CONC:-"1 4 16 64"}
IN=${IN:-256}
OUT=${OUT:-128}
SHARED=${SHARED:-200}
THREADS=${THREADS:-2}
EXTRA=${EXTRA:-}
log=$(mktemp)
"$MOE8" serve -m "$DIR" --port 0 --threads "$THREADS" --parallel 64 --ctx-size 1024 \
    --max-batch-tokens 2048 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do grep -q "listening on" "$log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1)
metric() { curl -s "$url/metrics" | awk -v m="moe8:$1" '$1 ~ "^"m"[{]" {print $2}'; }
val() { sed -n "s|^$1 *\([0-9.]*\).*|\1|p" <<<"$2"; }
printf '| concurrency | prompts | requests | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | prefix hit rate | server peak RSS MB |\n'
printf '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
run() { # concurrency, shared prefix words, label
    local c=$1 sp=$2 label=$3 n q0 h0 q1 h1 out
    n=$((c < 4 ? 4 * c : 2 * c)); [ "$n" -lt 8 ] && n=8
    q0=$(metric prefix_cache_queries_total); h0=$(metric prefix_cache_hits_total)
    out=$("$MOE8" bench serve --url "$url" -n "$n" --input-len "$IN" --output-len "$OUT" \
          --max-concurrency "$c" --shared-prefix "$sp" --seed "$((1000 * c + sp))" $EXTRA 2>/dev/null)
    q1=$(metric prefix_cache_queries_total); h1=$(metric prefix_cache_hits_total)
    printf '| %d | %s | %d | %s | %s | %s | %s | %s | %s | %.1f%% | %.0f |\n' "$c" "$label" "$n" \
        "$(val 'Request throughput (req/s):' "$out")" "$(val 'Output token throughput (tok/s):' "$out")" \
        "$(val 'Median TTFT (ms):' "$out")" "$(val 'P99 TTFT (ms):' "$out")" \
        "$(val 'Median TPOT (ms):' "$out")" "$(val 'P99 TPOT (ms):' "$out")" \
        "$(awk -v a="$h0" -v b="$h1" -v c="$q0" -v d="$q1" 'BEGIN {print (d > c) ? 100 * (b - a) / (d - c) : 0}')" \
        "$(awk '/VmHWM/ {print $2 / 1024}' /proc/$pid/status)"
}
for c in $CONC; do run "$c" 0 "$IN distinct"; done
run 1 "$SHARED" "$IN, $SHARED shared"
run 16 "$SHARED" "$IN, $SHARED shared"
