#!/usr/bin/env bash
# bench_cache.sh — the packed cache's table for docs/BENCHMARKS.md ("Packed cache"), on one
# model folder: the first load (building the cache), warm loads (cache in the page cache),
# a cold load (caches dropped; beside the time `dd` takes to read the cache file), decode
# speed mapped / read into memory (--no-mmap) / without a cache (--no-cache), the private
# resident memory of a second process beside a first, and a run under a cgroup memory limit
# of LIMIT_PCT% of the cache's size (greedy ids compared with the unconstrained run).
# Cold loads and the cgroup need root; each is reported skipped where not allowed.
#   scripts/bench_cache.sh DIR          (REPS=5 N=64 LIMIT_PCT=60 THREADS=2)
set -uo pipefail
MOE8=${MOE8:-$(dirname "$0")/../build/moe8}
DIR=${1:?usage: bench_cache.sh MODEL_DIR}
REPS=${REPS:-5}
N=${N:-64}
LIMIT_PCT=${LIMIT_PCT:-60}
THREADS=${THREADS:-2}
PROMPT="The history of computing is a story of machines that learned to count, then to store, \
then to reason about numbers faster than any person could. Tell me"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

field() { sed -n 's/.*\b'"$1"'=\([0-9.]*\).*/\1/p' <<<"$2"; }
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
gen() { "$MOE8" generate -m "$DIR" -p "$PROMPT" -n "$N" --ignore-eos --temp 0 --threads "$THREADS" --ids "$@" 2>&1; }
line() { tail -1 <<<"$1"; }
ids() { grep -v '=' <<<"$1" | tr -s ' \n' ' '; }
drop() { sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }

cache=$("$MOE8" inspect -m "$DIR" 2>/dev/null | grep -o '/[^ ]*\.pkc' | head -1)
[ -n "$cache" ] && rm -f "$cache"
echo "model $DIR, $THREADS threads, $(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p')"
out=$(gen -n 1); first=$(field load_s "$(line "$out")")
cache=$("$MOE8" inspect -m "$DIR" 2>/dev/null | grep -o '/[^ ]*\.pkc' | head -1)
[ -f "$cache" ] || { echo "no cache file after the first load" >&2; exit 1; }
size=$(wc -c <"$cache")
printf 'cache %s: %.0f MiB\n\n' "$cache" "$(awk -v s="$size" 'BEGIN {print s / 1048576}')"
nc=(); for _ in $(seq "$REPS"); do nc+=("$(field load_s "$(line "$(gen -n 1 --no-cache)")")"); done
printf '| load | s |\n|---|---:|\n'
printf '| without a cache (--no-cache; packs in memory, as before the cache), median of %d | %.3f |\n' \
    "$REPS" "$(printf '%s\n' "${nc[@]}" | median)"
printf '| first load (builds the cache) | %.3f |\n' "$first"
w=(); for _ in $(seq "$REPS"); do w+=("$(field load_s "$(line "$(gen -n 1)")")"); done
printf '| warm (mapped, in the page cache), median of %d | %.3f |\n' "$REPS" "$(printf '%s\n' "${w[@]}" | median)"
if drop; then
    t0=$(date +%s.%N); dd if="$cache" of=/dev/null bs=16M status=none; t1=$(date +%s.%N)
    drop; cold=$(field load_s "$(line "$(gen -n 1)")")
    printf '| cold (caches dropped) | %.3f |\n' "$cold"
    printf '| dd of the cache file, caches dropped (%.0f MB/s) | %.3f |\n' \
        "$(awk -v s="$size" -v a="$t0" -v b="$t1" 'BEGIN {print s / 1e6 / (b - a)}')" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')"
else
    printf '| cold | skipped (cannot write /proc/sys/vm/drop_caches) |\n'
fi

echo; printf '| decode, %d tokens | tok/s (median of %d, alternated) |\n|---|---:|\n' "$N" "$REPS"
declare -A dec
for _ in $(seq "$REPS"); do
    for mode in mapped no-mmap no-cache; do
        flag=(); [ "$mode" = mapped ] || flag=("--$mode")
        dec[$mode]+="$(field decode_tok_s "$(line "$(gen "${flag[@]}")")") "
    done
done
for mode in mapped no-mmap no-cache; do
    printf '| %s | %.2f |\n' "$mode" "$(tr ' ' '\n' <<<"${dec[$mode]}" | grep . | median)"
done

# a second process beside a first: peak private resident memory (sampled every 20 ms)
args=(generate -m "$DIR" -p "$PROMPT" --ignore-eos --temp 0 --threads "$THREADS" --ids)
"$MOE8" "${args[@]}" -n 400 >/dev/null 2>&1 & a=$!
sleep 3
"$MOE8" "${args[@]}" -n 48 >/dev/null 2>&1 & b=$!
peak=0 rss=0
while kill -0 "$b" 2>/dev/null; do
    p=$(awk '/^Private_(Clean|Dirty)/ {s += $2} END {print s + 0}' /proc/$b/smaps_rollup 2>/dev/null)
    r=$(awk '/^Rss/ {print $2}' /proc/$b/smaps_rollup 2>/dev/null)
    [ "${p:-0}" -gt "$peak" ] && peak=$p
    [ "${r:-0}" -gt "$rss" ] && rss=$r
    sleep 0.02
done
wait "$b"; kill "$a" 2>/dev/null; wait "$a" 2>/dev/null
echo; printf '| second process | MiB | of the cache |\n|---|---:|---:|\n'
printf '| peak resident (shared pages included) | %.0f | %.1f%% |\n' "$(awk -v k="$rss" 'BEGIN {print k / 1024}')" \
    "$(awk -v k="$rss" -v s="$size" 'BEGIN {print 100 * k * 1024 / s}')"
printf '| peak private resident | %.0f | %.1f%% |\n' "$(awk -v k="$peak" 'BEGIN {print k / 1024}')" \
    "$(awk -v k="$peak" -v s="$size" 'BEGIN {print 100 * k * 1024 / s}')"

# under a memory limit below the cache's size
limit=$((size / 100 * LIMIT_PCT))
cg=""
if [ -f /sys/fs/cgroup/cgroup.controllers ] && mkdir /sys/fs/cgroup/moe8-bench-$$ 2>/dev/null; then
    cg=/sys/fs/cgroup/moe8-bench-$$; echo "$limit" >"$cg/memory.max" || cg=""
elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] && mkdir /sys/fs/cgroup/memory/moe8-bench-$$ 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/moe8-bench-$$; echo "$limit" >"$cg/memory.limit_in_bytes" || cg=""
fi
echo
if [ -n "$cg" ]; then
    free_out=$(gen)
    rm -f "$cache"
    t0=$(date +%s.%N)
    bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$MOE8" pack -m "$DIR" >/dev/null 2>&1
    t1=$(date +%s.%N)
    built=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    [ -f "$cache" ] || built="failed"
    drop
    lim_out=$(bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$MOE8" "${args[@]}" -n "$N" 2>&1)
    same=no; [ "$(ids "$free_out")" = "$(ids "$lim_out")" ] && same=yes
    printf '| limit %d%% of the cache (%.0f MiB) | unconstrained | limited |\n|---|---:|---:|\n' \
        "$LIMIT_PCT" "$(awk -v s="$limit" 'BEGIN {print s / 1048576}')"
    for k in load_s prefill_tok_s decode_tok_s; do
        printf '| %s | %s | %s |\n' "$k" "$(field $k "$(line "$free_out")")" "$(field $k "$(line "$lim_out")")"
    done
    printf '| greedy ids identical (%d tokens) | | %s |\n' "$N" "$same"
    printf '| moe8 pack (building the cache) s | | %s |\n' "$built"
    if [ -f "$cg/memory.failcnt" ]; then
        printf '| limit reached (memory.failcnt) | | %s |\n| peak usage MiB | | %.0f |\n' "$(cat "$cg/memory.failcnt")" \
            "$(awk '{print $1 / 1048576}' "$cg/memory.max_usage_in_bytes")"
    elif [ -f "$cg/memory.events" ]; then
        printf '| limit reached (memory.events max) | | %s |\n' "$(awk '$1 == "max" {print $2}' "$cg/memory.events")"
    fi
    rmdir "$cg" 2>/dev/null
else
    echo "memory limit: skipped (no writable cgroup memory controller)"
fi
