#!/usr/bin/env bash
# bench_serve_apis.sh — the streaming overhead of the agents' APIs: `moe8 bench
# serve --endpoint chat|responses|messages` alternated against one `moe8 serve`
# (the server flags of scripts/bench_serve.sh), after one short warm-up run of
# each. Per run: the output tok/s, TTFT / TPOT p50, the load average, and the
# server's CPU seconds (utime + stime from /proc) with output tokens per CPU
# second, which a machine shared with other jobs disturbs less than tok/s.
#   scripts/bench_serve_apis.sh DIR  (ROUNDS=5 N=64 C=16 IN=256 OUT=128 THREADS=2
#                                     ORDER="chat responses messages")
set -euo pipefail
MOE8=${MOE8:-$(dirname "$0")/../build/moe8}
DIR=$1
ROUNDS=${ROUNDS:-5}; N=${N:-64}; C=${C:-16}; IN=${IN:-256}; OUT=${OUT:-128}; THREADS=${THREADS:-2}
ORDER=${ORDER:-"chat responses messages"}
log=$(mktemp)
"$MOE8" serve -m "$DIR" --port 0 --threads "$THREADS" --parallel 64 --ctx-size 1024 \
    --max-batch-tokens 2048 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do grep -q "listening on" "$log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1)
val() { sed -n "s|^$1 *\([0-9.]*\).*|\1|p" <<<"$2"; }
cpu() { awk '{print $14 + $15}' /proc/$pid/stat; }
hz=$(getconf CLK_TCK)
for ep in $ORDER; do # warm-up
    "$MOE8" bench serve --url "$url" --endpoint "$ep" -n 16 --input-len "$IN" --output-len 32 \
        --max-concurrency "$C" --seed 7 >/dev/null 2>&1
done
echo "round endpoint ok gen_tokens tok_s ttft_p50 tpot_p50 load1 server_cpu_s tok_per_cpu_s"
for r in $(seq "$ROUNDS"); do
    e=0
    for ep in $ORDER; do
        k0=$(cpu)
        out=$("$MOE8" bench serve --url "$url" --endpoint "$ep" -n "$N" --input-len "$IN" \
              --output-len "$OUT" --max-concurrency "$C" --seed $((100 * r + e)) 2>/dev/null)
        g=$(val 'Total generated tokens:' "$out")
        echo "$r $ep $(val 'Successful requests:' "$out") $g $(val 'Output token throughput (tok/s):' "$out")" \
             "$(val 'Median TTFT (ms):' "$out") $(val 'Median TPOT (ms):' "$out") $(cut -d' ' -f1 /proc/loadavg)" \
             "$(awk -v a="$k0" -v b="$(cpu)" -v g="$g" -v hz="$hz" 'BEGIN {printf "%.2f %.1f", (b - a) / hz, g * hz / (b - a)}')"
        e=$((e + 1))
    done
done
