#!/usr/bin/env python3
"""bench_llamacpp_family.py DIR L L2 ROUNDS — step 6 of bench_llamacpp_family.sh:
the per-layer times of its logs (DIR/log/): llama.cpp's "per layer" row of
bench_llamacpp.mjs ((t(L) - t(L2)) / (L - L2)) and moe8's by the same
difference of bench forward on the L and L2 folders, taken on the sum of the
layers' phases (L x its **layer** row, the lm_head and the embedding left
out, as the difference leaves them out of llama.cpp's; the whole-forward
difference is printed too: it carries the lm_head's run-to-run noise, which
at decode is larger than a layer); per round with the load average (1 min)
before and after each run, then the medians and the speed-ups, then each
run's CPU seconds beside its wall seconds."""
import re
import statistics
import sys

d, L, L2, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
W = sys.argv[5] if len(sys.argv) > 5 else "w8a8"
LOG = sys.argv[6] if len(sys.argv) > 6 else f"{d}/log"
dl = L - L2


def loads(text):
    return [float(m) for m in re.findall(r"load average: ([\d.]+)", text)]


def cpu(text):
    """(user+sys, wall) seconds of the run (/usr/bin/time), or None in older logs."""
    m = re.search(r"cpu_user_s=([\d.]+)_sys_s=([\d.]+)_wall_s=([\d.]+)", text)
    return (float(m.group(1)) + float(m.group(2)), float(m.group(3))) if m else None


def llama(r):
    t = open(f"{LOG}/llama_{r}.txt").read()
    m = re.search(r"^\| per layer \(\(\d+L - \d+L\) / \d+\) \| 1 \| ([-\d.]+) \|  \| ([-\d.]+) \|", t, re.M)
    return (float(m.group(1)), float(m.group(2))) if m else (None, None), loads(t), cpu(t)


def llama_files(r):
    """llama.cpp's whole-file rows: {layers: (prefill ms, decode ms/token)}."""
    t = open(f"{LOG}/llama_{r}.txt").read()
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r"^\| \S+\.gguf \| (\d+) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|", t, re.M)}


def moe8(name, r):
    t = open(f"{LOG}/moe8_{name}_{r}.txt").read()
    def get(section, row):
        return float(re.search(r"### " + section + r".*?\*\*" + row + r"\*\* \| ([\d.]+)", t, re.S).group(1))
    return (get("prefill", "layer"), get("decode", "layer"), get("prefill", "whole forward"),
            get("decode", "whole forward")), loads(t), cpu(t)


rows, lp, ld, mp, md, cpus, raws = [], [], [], [], [], [], []
for r in range(1, rounds + 1):
    (lpre, ldec), l1, c1 = llama(r)
    (p3, d3, wp3, wd3), l2, c2 = moe8(W, r)
    (p2, d2, wp2, wd2), l3, c3 = moe8(f"{W}-{L2}l", r)
    cpus.append((r, c1, c2, c3))
    f = llama_files(r)
    raws.append((r, f.get(L, (None, None)), f.get(L2, (None, None)), (p3, d3), (p2, d2)))
    mpre, mdec = (L * p3 - L2 * p2) / dl, (L * d3 - L2 * d2) / dl
    lp.append(lpre), ld.append(ldec), mp.append(mpre), md.append(mdec)
    rows.append((r, lpre, mpre, (wp3 - wp2) / dl, ldec, mdec, (wd3 - wd2) / dl,
                 min(l1 + l2 + l3), max(l1 + l2 + l3)))
print("| round | llama.cpp prefill ms/layer | moe8 prefill ms/layer (whole-forward diff) "
      "| llama.cpp decode ms/layer | moe8 decode ms/layer (whole-forward diff) | load avg (1 min) |")
print("|---|---:|---:|---:|---:|---|")
for r, a, b, bw, c, e, ew, lo, hi in rows:
    print(f"| {r} | {a:.1f} | {b:.1f} ({bw:.1f}) | {c:.2f} | {e:.2f} ({ew:.2f}) | {lo:.1f}–{hi:.1f} |")
ma, mb, mc, me = (statistics.median(x) for x in (lp, mp, ld, md))
print(f"| **median** | {ma:.1f} | {mb:.1f} | {mc:.2f} | {me:.2f} | |")
print(f"\nspeed-up (medians): prefill {ma / mb:.2f}x (target 3x), decode {mc / me:.2f}x (target 1.5x)")


def ms(x):
    return f"{x:.1f}" if x is not None else "—"


# Each run alone: llama.cpp's whole files (the L2 file / L2 bounds its time per
# layer from above: it includes the embedding and lm_head) and moe8's own
# per-layer row of each run; steadier than the differences when the load moves
# between the runs of a round.
print(f"\nEach run alone (ms): llama.cpp's {L}- and {L2}-layer files (whole forward: prefill of {L2} "
      f"layers / {L2} bounds its per-layer time from above), moe8's **layer** row of its {L}- and "
      f"{L2}-layer runs")
print(f"| round | llama.cpp prefill {L}L / {L2}L file | moe8 prefill layer ({L}L / {L2}L run) "
      f"| llama.cpp decode {L}L / {L2}L file | moe8 decode layer ({L}L / {L2}L run) |")
print("|---|---:|---:|---:|---:|")
bp, bd = [], []
for r, fl, fl2, m3, m2 in raws:
    print(f"| {r} | {ms(fl[0])} / {ms(fl2[0])} | {ms(m3[0])} / {ms(m2[0])} | {ms(fl[1])} / {ms(fl2[1])} "
          f"| {ms(m3[1])} / {ms(m2[1])} |")
    if fl2[0] is not None:
        bp.append((fl2[0] / L2) / statistics.median([m3[0], m2[0]]))
        bd.append((fl2[1] / L2) / statistics.median([m3[1], m2[1]]))
if bp:
    print(f"\nllama.cpp's {L2}-layer file / {L2} over moe8's layer row, per round: prefill "
          + ", ".join(f"{x:.1f}x" for x in bp) + "; decode " + ", ".join(f"{x:.1f}x" for x in bd)
          + " (llama.cpp's side includes its embedding, lm_head and per-token overhead: an upper bound)")


def fmt(c):
    return f"{c[0]:.1f} / {c[1]:.1f} ({c[0] / c[1]:.2f})" if c else "—"


print("\nCPU seconds (user+sys) / wall seconds (CPU per wall second) of each whole run: llama.cpp "
      f"(both files, warm-up, prefill and decode), moe8 {L} and {L2} layers")
print(f"| round | llama.cpp | moe8 {L} layers | moe8 {L2} layers |")
print("|---|---:|---:|---:|")
for r, c1, c2, c3 in cpus:
    print(f"| {r} | {fmt(c1)} | {fmt(c2)} | {fmt(c3)} |")
