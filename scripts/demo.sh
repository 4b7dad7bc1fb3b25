#!/usr/bin/env bash
# demo.sh — `make demo`. End-to-end generation arrives with issue 4; until
# then the demo shows the build and the kernel set in use.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/moe8 version
echo "moe8 demo: end-to-end generation is not supported yet (see docs/ARCHITECTURE.md)" >&2
