#!/usr/bin/env bash
# test.sh — `make test` (what CI runs): the release tests, the ASan+UBSan
# tests, the fuzzers. The tests leave part of the two cores idle (servers and
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
t0=$(date +%s)
fail=()

stage() { echo "== make test: $1 ($(( $(date +%s) - t0 )) s)"; }

# bg_build TARGET: `make TARGET` at nice 19 in the background, output to TARGET.log.
bg_build() {
    nice -n 19 make --no-print-directory JOBS="$JOBS" "$1" >"$1.log" 2>&1 &
    bg_pid=$!
}

# bg_wait TARGET: wait for the background build; its log when it failed.
bg_wait() {
    if ! wait "$bg_pid"; then
        cat "$1.log" >&2
        echo "make test: make $1 failed (log above, in $1.log)" >&2
        return 1
    fi
}

stage "release build, the sanitizer build beside it"
bg_build build-asan
make --no-print-directory JOBS="$JOBS" build || { wait; exit 1; }
stage "release tests, the sanitizer build beside them"
(cd build && ctest --output-on-failure -j"$TEST_JOBS") || fail+=(release)
bg_wait build-asan || exit 1
stage "sanitizer tests, the fuzz build beside them"
bg_build build-fuzz
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j"$TEST_JOBS") || fail+=(asan)
bg_wait build-fuzz || exit 1
stage "fuzzers"
(cd build-fuzz && ctest --output-on-failure -j"$TEST_JOBS") || fail+=(fuzz)
stage "done"
if [ ${#fail[@]} -gt 0 ]; then
    echo "make test: failed: ${fail[*]}" >&2
    exit 1
fi
