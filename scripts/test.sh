#!/usr/bin/env bash
# test.sh — `make test` (what CI runs): every release test, the ASan+UBSan
# tests (those labelled asan: CMakeLists.txt says which), the fuzzers;
# `test.sh release` (`make check`, the quick loop): the release build and its
# tests but those labelled client (the node SDK clients, Codex CLI, Claude
# Code and the browser: test_serve*_clients) or slow (the servers' end-to-end
# tests and the other long ones), which `make test` runs.
# Debian packages first; the npm half of deps (tokenizers, clients) is
# fetched beside the release build, which does not need it.
# The tests leave part of the two cores idle (servers and
# timers wait, mpirun starts, clients sleep), so the next stage's build runs
# beside them at nice 19, taking only what they leave: the sanitizer build
# from the start (beside the release build's links and the release tests),
# the fuzz build beside the sanitizer tests. Each
# build's output goes to build-*.log, shown when it fails.
#   JOBS (build jobs), TEST_JOBS (ctest's processor budget), FUZZ_SECONDS
#   come from the Makefile.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
TEST_JOBS=${TEST_JOBS:-4}
mode=${1:-all}
[ "$mode" = all ] || [ "$mode" = release ] || { echo "usage: test.sh [release]" >&2; exit 2; }
me="make test"
[ "$mode" = all ] || me="make check"
t0=$(date +%s)
fail=()

# stage WHAT: a heading with the wall seconds so far and the CPU seconds (user +
# sys) of what this script has waited for (background builds count once
# waited for): on a loaded machine the CPU is the figure to compare.
stage() {
    local cpu
    times >"$cpu_file"   # the builtin, in this shell: a subshell's children are not ours
    cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } printf "%.0f", t }' "$cpu_file")
    echo "== $me: $1 ($(( $(date +%s) - t0 )) s, $cpu CPU-s)"
}
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT

# bg_build TARGET: `make TARGET` at nice 19 in the background, output to TARGET.log.
bg_build() {
    nice -n 19 make --no-print-directory DEPS= JOBS="$JOBS" "$1" >"$1.log" 2>&1 &
    bg_pid=$!
}

# bg_wait TARGET: wait for the background build; its log when it failed.
bg_wait() {
    if ! wait "$bg_pid"; then
        cat "$1.log" >&2
        echo "$me: make $1 failed (log above, in $1.log)" >&2
        return 1
    fi
}

./scripts/deps.sh packages || exit 1
./scripts/deps.sh fetch >deps-fetch.log 2>&1 &
fetch_pid=$!
asan=""   # the sanitizer build beside the release stage (make test only)
[ "$mode" = all ] && asan=" and the sanitizer build"
stage "release build, the npm fetches$asan beside it"
[ "$mode" = all ] && bg_build build-asan
make --no-print-directory DEPS= JOBS="$JOBS" build || { wait; exit 1; }
wait "$fetch_pid"
fetch_rc=$?
cat deps-fetch.log >&2
if [ "$fetch_rc" -ne 0 ]; then
    echo "$me: scripts/deps.sh fetch failed (log above, in deps-fetch.log)" >&2
    wait
    exit 1
fi
except=()   # make check: not the clients, not the slow ones (labels client, slow)
[ "$mode" = all ] || except=(-LE 'client|slow')
stage "release tests${except:+ but the clients and the slow ones}${asan:+, the sanitizer build beside them}"
(cd build && ctest --output-on-failure -j"$TEST_JOBS" "${except[@]}") || fail+=(release)
if [ "$mode" = all ]; then
    bg_wait build-asan || exit 1
    stage "sanitizer tests, the fuzz build beside them"
    bg_build build-fuzz
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --output-on-failure -j"$TEST_JOBS" -L asan) || fail+=(asan)
    bg_wait build-fuzz || exit 1
    stage "fuzzers"
    (cd build-fuzz && ctest --output-on-failure -j"$TEST_JOBS") || fail+=(fuzz)
fi
stage "done"
if [ ${#fail[@]} -gt 0 ]; then
    echo "$me: failed: ${fail[*]}" >&2
    exit 1
fi
