#!/bin/sh
# test_install.sh — `cmake --install` of a built tree into a scratch prefix,
# then tests/data/embed_app.c built as an application would build it:
#   cc embed_app.c $(pkg-config --cflags --libs --static moe8)
# and run. Checks that every external symbol of the installed libraries
# starts with moe8_ (nm), that libmoe8.a and the program need no MPI, that
# moe8_dist_create(2, ...) then fails with MOE8_ERR_UNSUPPORTED naming
# libmoe8_mpi, and (when MPI was built) that moe8-mpi.pc links the transport.
# Then tests/data/serve_app.c, built against moe8-server.pc, serves a tiny
# synthetic model (made with the build's `moe8 make-model`) on a port the OS
# picks and gets 200 from GET /health before it stops itself.
#   usage: test_install.sh BUILD_DIR PREFIX CC HAVE_MPI(ON|OFF) [SANITIZERS]
set -eu
build=$1 prefix=$2 cc=$3 have_mpi=$4 san=${5:-}
data=$(cd "$(dirname "$0")/data" && pwd)
fail() { echo "test_install: FAIL: $*" >&2; exit 1; }

rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install"
for f in lib/libmoe8.a lib/libmoe8_server.a lib/pkgconfig/moe8-server.pc include/moe8.h include/moe8_bench.h include/moe8_dist.h include/moe8_moe.h \
    include/moe8_safetensors.h include/moe8_server.h include/moe8_tools.h lib/pkgconfig/moe8.pc; do
    [ -f "$prefix/$f" ] || fail "$f not installed"
done
# every public header compiles on its own, as C and as C++ (a program includes only what it uses)
for h in "$prefix"/include/moe8*.h; do
    printf '#include <%s>\nint main(void) { return 0; }\n' "$(basename "$h")" >"$prefix/hdr.c"
    "$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" "$prefix/hdr.c" ||
        fail "$(basename "$h") does not compile alone"
    if command -v g++ >/dev/null 2>&1; then
        g++ -Wall -Wextra -Werror -fsyntax-only -x c++ -I"$prefix/include" "$prefix/hdr.c" ||
            fail "$(basename "$h") does not compile alone as C++"
    fi
done
# every external symbol the installed libraries define starts with moe8_: an
# application links them beside its own code and other libraries
n_syms=0
for lib in "$prefix"/lib/libmoe8*.a; do
    nm -g --defined-only "$lib" | awk 'NF == 3 { print $3 }' >"$prefix/syms.txt" || fail "nm $lib"
    # (an ASan build adds __odr_asan.NAME, its one-definition indicator of a global NAME)
    if grep -v -e '^moe8_' -e '^__odr_asan\.moe8_' "$prefix/syms.txt" >"$prefix/bad.txt"; then
        sed 's/^/  /' "$prefix/bad.txt" >&2
        fail "$(basename "$lib") exports $(wc -l <"$prefix/bad.txt") symbols without the moe8_ prefix"
    fi
    n_syms=$((n_syms + $(wc -l <"$prefix/syms.txt")))
done
[ "$n_syms" -gt 500 ] || fail "only $n_syms symbols in the installed libraries"
echo "test_install: $n_syms external symbols, each moe8_"
if nm -u "$prefix/lib/libmoe8.a" | grep -E ' (P?MPI_|ompi_)'; then
    fail "libmoe8.a refers to MPI"
fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
sanflags=""
[ -z "$san" ] || sanflags="-fsanitize=$san"
version=$(pkg-config --modversion moe8) || fail "pkg-config moe8"

# build NAME MODULE [SOURCE]: SOURCE (embed_app.c) linked through pkg-config MODULE.
build_app() {
    src=${3:-embed_app.c}
    flags=$(pkg-config --cflags --libs --static "$2") || fail "pkg-config $2"
    echo "test_install: $cc $src $flags"
    # shellcheck disable=SC2086
    "$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror $sanflags -o "$prefix/$1" "$data/$src" $flags ||
        fail "cannot build $1 against $2.pc"
}
# expect FILE LINE...: each LINE is a line of FILE.
expect() {
    file=$1
    shift
    for line in "$@"; do
        grep -qxF "$line" "$file" || { cat "$file" >&2; fail "no line '$line'"; }
    done
}

build_app embed_app moe8
"$prefix/embed_app" >"$prefix/out.txt" || { cat "$prefix/out.txt" >&2; fail "embed_app failed"; }
expect "$prefix/out.txt" "version $version" "status -4 not supported" "tensor w F32 [2,3] sum 21" \
    "abort returned, ranks 1" "mpi_available 0"
grep -q '^tokenizer error: .*nonexistent-moe8-tokenizer' "$prefix/out.txt" || fail "tokenizer error"
grep -q '^model error: .*nonexistent-moe8-model' "$prefix/out.txt" || fail "model error"
if readelf -d "$prefix/embed_app" | grep NEEDED | grep -i mpi; then
    fail "embed_app linked against moe8.pc depends on MPI"
fi
if nm "$prefix/embed_app" | grep -E ' (P?MPI_|ompi_)'; then fail "embed_app has MPI symbols"; fi
"$prefix/embed_app" dist2 >"$prefix/dist2.txt" || { cat "$prefix/dist2.txt" >&2; fail "dist2"; }
grep -q '^dist_init 2: status -4 (not supported): .*linked without libmoe8_mpi' "$prefix/dist2.txt" ||
    { cat "$prefix/dist2.txt" >&2; fail "dist_init(2) without libmoe8_mpi"; }

# the server, embedded: moe8_serve from the installed libmoe8_server.a
build_app serve_app moe8-server serve_app.c
"$build/moe8" make-model --preset tiny --layers 1 -o "$prefix/tiny" >/dev/null 2>&1 || fail "make-model"
"$prefix/serve_app" "$prefix/tiny" >"$prefix/serve.txt" 2>&1 || { cat "$prefix/serve.txt" >&2; fail "serve_app"; }
expect "$prefix/serve.txt" "health HTTP/1.1 200 OK" "serve 0"
grep -q '^ready listening on http://127.0.0.1:[0-9]*$' "$prefix/serve.txt" || { cat "$prefix/serve.txt" >&2; fail "ready line"; }
rm -rf "$prefix/tiny"

if [ "$have_mpi" = ON ]; then
    [ -f "$prefix/lib/libmoe8_mpi.a" ] || fail "libmoe8_mpi.a not installed"
    build_app embed_app_mpi moe8-mpi
    "$prefix/embed_app_mpi" >"$prefix/out_mpi.txt" || { cat "$prefix/out_mpi.txt" >&2; fail "embed_app_mpi"; }
    expect "$prefix/out_mpi.txt" "version $version" "abort returned, ranks 1" "mpi_available 1"
    readelf -d "$prefix/embed_app_mpi" | grep NEEDED | grep -q libmpi ||
        fail "embed_app_mpi does not depend on libmpi"
else
    [ ! -e "$prefix/lib/pkgconfig/moe8-mpi.pc" ] || fail "moe8-mpi.pc installed without MPI"
fi
echo "test_install: passed"
