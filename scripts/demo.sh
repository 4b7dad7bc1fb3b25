#!/usr/bin/env bash
# demo.sh — `make demo`: make the built-in tiny Qwen3-MoE (cached in
# models/), quantize it to W8A8 (ModelSlim layout), generate from
# "Hello, my name is" on the W8A8 model with its speed, and count how many
# greedy tokens match the float model.
set -euo pipefail
cd "$(dirname "$0")/.."
MOE8=./build/moe8
PROMPT="Hello, my name is"
N=${DEMO_TOKENS:-32}
FLOAT=models/tiny
W8A8=models/tiny-w8a8

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p models
if [ ! -f "$FLOAT/config.json" ]; then
    echo "demo: making the tiny synthetic Qwen3-MoE in $FLOAT" >&2
    rm -rf "$FLOAT"
    $MOE8 make-model --preset tiny -o "$FLOAT"
fi
if [ ! -f "$W8A8/quant_model_description.json" ]; then
    echo "demo: quantizing it to W8A8 in $W8A8" >&2
    rm -rf "$W8A8"
    $MOE8 quantize -i "$FLOAT" -o "$W8A8"
fi

echo
$MOE8 inspect -m "$W8A8" | sed -n '1,40p'
echo
echo "== W8A8: \"$PROMPT\" (greedy, $N tokens) =="
printf '%s' "$PROMPT"
$MOE8 generate -m "$W8A8" -p "$PROMPT" -n "$N" --ignore-eos
echo

w8=$($MOE8 generate -m "$W8A8" -p "$PROMPT" -n "$N" --ignore-eos --ids 2>/dev/null)
fp=$($MOE8 generate -m "$FLOAT" -p "$PROMPT" -n "$N" --ignore-eos --ids 2>/dev/null)
read -r -a a <<<"$w8"
read -r -a b <<<"$fp"
match=0
while [ $match -lt ${#a[@]} ] && [ $match -lt ${#b[@]} ] && [ "${a[$match]}" = "${b[$match]}" ]; do
    match=$((match + 1))
done
if [ "$match" -eq "${#a[@]}" ] && [ "$match" -eq "${#b[@]}" ]; then
    echo "greedy tokens matching the float model: all $match of $N"
else
    echo "greedy tokens matching the float model: $match of $N (first divergence at token $((match + 1)))"
fi
