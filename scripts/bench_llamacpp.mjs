#!/usr/bin/env node
// bench_llamacpp.mjs — llama.cpp on a GGUF written by `moe8 export-gguf`, on the CPU,
// through the npm package node-llama-cpp (its prebuilt CPU backends: one
// libggml-cpu-<variant>.so per x86 level, the best the CPU supports loaded at
// run time). A benchmark tool, not part of `make deps`; install it once with
//
//   npm install --prefix .deps/llamacpp node-llama-cpp@3.22.1
//
// (npm 11 may say the package's postinstall script was not run: it is not
// needed, the prebuilt binaries come as its optional dependencies).
//
// Modes:
//   bench (default)   prefill of T tokens (each of --tokens that fits the context)
//                     and greedy decode tok/s after a --decode-ctx token prompt;
//                     prints a table. With --model2 (the same weights with fewer
//                     layers: moe8 export-gguf --layers N), also the difference per
//                     layer: (t(model) - t(model2)) / (layers - layers2).
//   --ids IDS         cross-check: the logits of the last position of a prompt of
//                     token ids (comma/space separated) and --n greedy tokens; with
//                     --moe8-logits FILE (moe8 generate --dump-logits) and
//                     --moe8-ids "..." (moe8 generate --ids) prints how close they are.
//   --info            only the CPU backend and features llama.cpp reports.
//
// Options: --model FILE.gguf --threads N (default 2) --tokens 512,4096
//   --decode-ctx 512 (0: no decode) --decode-n 32 --reps 3 (medians) --warmup 1|0 --batch N (default
//   min(T, 512): llama.cpp's default micro-batch) --flash-attention auto|on|off
//   --n 16 --dump-logits FILE.
// Results on stdout, llama.cpp's log on stderr only with --verbose.
import { createRequire } from "node:module";
import { writeFileSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", ".deps", "llamacpp", "package.json"));
let nlc;
try {
  nlc = await import(require.resolve("node-llama-cpp"));
} catch (e) {
  console.error("bench_llamacpp: node-llama-cpp not found under .deps/llamacpp: " +
    "npm install --prefix .deps/llamacpp node-llama-cpp@3.22.1");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = nlc;

// ---- options ------------------------------------------------------------------
const opt = { threads: 2, tokens: "512,4096", "decode-ctx": 512, "decode-n": 32, reps: 3,
  "flash-attention": "auto", n: 16 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (!a.startsWith("--")) die(`unexpected argument '${a}'`);
  const k = a.slice(2);
  if (k === "info" || k === "verbose") { opt[k] = true; continue; }
  if (i + 1 >= argv.length) die(`${a} needs a value`);
  opt[k] = argv[++i];
}
function die(msg) { console.error("bench_llamacpp: " + msg); process.exit(2); }
const int = (k) => { const v = Number(opt[k]); if (!Number.isInteger(v) || v < 0) die(`--${k} '${opt[k]}': expected an integer`); return v; };
const threads = int("threads"), reps = Math.max(1, int("reps"));
const warmup = opt.warmup === undefined ? 1 : int("warmup");
const decodeCtx = int("decode-ctx"), decodeN = Math.max(1, int("decode-n"));
const fa = { auto: "auto", on: true, off: false }[opt["flash-attention"]];
if (fa === undefined) die("--flash-attention: auto, on or off");

// ---- llama.cpp ----------------------------------------------------------------
const logLines = [];
const llama = await getLlama({
  gpu: false, build: "never", maxThreads: threads,
  logLevel: LlamaLogLevel.debug,
  logger: (level, message) => {
    logLines.push(message.trimEnd());
    if (opt.verbose) process.stderr.write(message);
  },
});

function backendInfo() {
  const variant = logLines.map((l) => /libggml-cpu-([\w-]+)\.so/.exec(l)).find(Boolean);
  const sys = llama.systemInfo;
  const feats = sys.split("|").map((s) => s.trim()).filter((s) => /= 1$/.test(s))
    .map((s) => s.replace(/\s*=\s*1$/, "")).filter((s) => !/^(CPU : )?(SSE3|SSSE3|LLAMAFILE|OPENMP|REPACK)$/.test(s));
  return { variant: variant ? variant[1] : "?", features: feats.join(" "), systemInfo: sys };
}

if (opt.info) {
  // the backend is loaded with the first model; without one, print what is known
  const b = backendInfo();
  console.log(`llama.cpp (node-llama-cpp ${nlcVersion()}): cpu variant ${b.variant}\nsystem info: ${b.systemInfo}`);
  process.exit(0);
}
function nlcVersion() {
  try { return JSON.parse(readFileSync(path.join(here, "..", ".deps", "llamacpp", "node_modules", "node-llama-cpp", "package.json"), "utf8")).version; }
  catch { return "?"; }
}

if (!opt.model) die("--model FILE.gguf is required");

async function load(file) {
  const model = await llama.loadModel({ modelPath: file, gpuLayers: 0, useMmap: true });
  const md = model.fileInfo?.metadata ?? {};
  const arch = md.general?.architecture;
  return { model, layers: Number(md[arch]?.block_count) || null };
}

// Deterministic token ids of ordinary vocabulary (below the Qwen special tokens).
function tokens(n, seed) {
  let s = BigInt(seed) | 1n;
  const out = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13n; s &= (1n << 64n) - 1n; s ^= s >> 7n; s ^= s << 17n; s &= (1n << 64n) - 1n;
    out.push(Number(s % 151000n) + 100);
  }
  return out;
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const now = () => Number(process.hrtime.bigint()) / 1e9;

// One sample of every shape, each in its own context: prefill of T tokens, then
// decodeN greedy steps after a decodeCtx-token prompt.
async function measure(model, round) {
  const res = { prefill: {}, decode: null, flash: null };
  const want = String(opt.tokens).split(",").filter(Boolean).map(Number);
  const trainCtx = model.trainContextSize;
  for (const T of want) {
    if (T + 1 > trainCtx) { res.prefill[T] = null; continue; }
    const batch = opt.batch ? int("batch") : Math.min(T, 512);
    const ctx = await model.createContext({ contextSize: T + 16, batchSize: batch, threads, flashAttention: fa, sequences: 1 });
    res.flash = ctx.flashAttention;
    const seq = ctx.getSequence();
    const t0 = now();
    await seq.evaluateWithoutGeneratingNewTokens(tokens(T, 1000 + round));
    res.prefill[T] = { s: now() - t0, batch };
    await ctx.dispose();
  }
  if (decodeCtx > 0 && decodeCtx + decodeN + 1 <= trainCtx) {
    const ctx = await model.createContext({ contextSize: decodeCtx + decodeN + 16, batchSize: Math.min(512, decodeCtx), threads, flashAttention: fa, sequences: 1 });
    const seq = ctx.getSequence();
    const prompt = tokens(decodeCtx, 7 + round);
    await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
    let n = 0, t0 = 0;
    // the first yielded token ends the prompt; time the decodeN steps after it
    for await (const _tok of seq.evaluate(prompt.slice(-1), { temperature: 0 })) {
      if (n === 0) t0 = now();
      if (++n > decodeN) break;
    }
    res.decode = { sPerTok: (now() - t0) / decodeN };
    await ctx.dispose();
  }
  return res;
}

const fmtMs = (s) => (s == null ? "—" : (s * 1e3).toFixed(1));
async function bench() {
  const a = await load(opt.model);
  const b = backendInfo();
  console.log(`llama.cpp via node-llama-cpp ${nlcVersion()}, cpu variant: ${b.variant}`);
  console.log(`cpu features: ${b.features}`);
  const files = [[opt.model, a]];
  if (opt.model2) files.push([opt.model2, await load(opt.model2)]);
  // a warm-up round (pages of the map, first-touch of the buffers), then reps
  // rounds alternating the files, so a drifting machine hits both alike; medians
  const samples = files.map(() => []);
  for (let round = 1 - warmup; round <= reps; round++)
    for (let f = 0; f < files.length; f++) {
      const r = await measure(files[f][1].model, round);
      if (round > 0) samples[f].push(r);
    }
  const results = files.map(([file, m], f) => {
    const s = samples[f], r = { prefill: {}, decode: null, flash: s[0].flash };
    for (const T of Object.keys(s[0].prefill))
      r.prefill[T] = s[0].prefill[T] ? { s: median(s.map((x) => x.prefill[T].s)), batch: s[0].prefill[T].batch } : null;
    if (s[0].decode) r.decode = { sPerTok: median(s.map((x) => x.decode.sPerTok)) };
    return { file, layers: m.layers, r };
  });
  const faLog = logLines.map((l) => /Flash Attention (\w+)/.exec(l)).filter(Boolean).pop();
  console.log(`threads ${threads}, flash attention ${results[0].r.flash}${faLog ? ` (llama.cpp: ${faLog[1]})` : ""}, ` +
    `median of ${reps} rounds alternating the files${warmup ? " after a warm-up round" : ""}\n`);
  const Ts = Object.keys(results[0].r.prefill).map(Number);
  for (const T of Ts) if (!results[0].r.prefill[T]) console.log(`T=${T}: beyond the model's context, skipped`);
  const hasDecode = results[0].r.decode !== null;
  const row = (cells) => console.log("| " + cells.join(" | ") + " |");
  row(["model", "layers", ...Ts.flatMap((T) => [`prefill T=${T} ms`, "tok/s"]),
    ...(hasDecode ? [`decode @${decodeCtx} ms/tok`, "tok/s"] : [])]);
  row(["---", ...Array(1 + 2 * Ts.length + (hasDecode ? 2 : 0)).fill("---:")]);
  for (const x of results) {
    const d = x.r.decode;
    row([path.basename(x.file), x.layers ?? "?",
      ...Ts.flatMap((T) => { const p = x.r.prefill[T]; return p ? [fmtMs(p.s), (T / p.s).toFixed(1)] : ["—", "—"]; }),
      ...(hasDecode ? [d ? fmtMs(d.sPerTok) : "—", d ? (1 / d.sPerTok).toFixed(2) : "—"] : [])]);
  }
  if (results.length === 2 && results[0].layers && results[1].layers && results[0].layers !== results[1].layers) {
    const [x, y] = results, dl = x.layers - y.layers;
    row([`per layer ((${x.layers}L - ${y.layers}L) / ${dl})`, 1,
      ...Ts.flatMap((T) => [x.r.prefill[T] && y.r.prefill[T] ? fmtMs((x.r.prefill[T].s - y.r.prefill[T].s) / dl) : "—", ""]),
      ...(hasDecode ? [x.r.decode && y.r.decode ? fmtMs((x.r.decode.sPerTok - y.r.decode.sPerTok) / dl) : "—", ""] : [])]);
  }
}

async function check() {
  const ids = String(opt.ids).split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((x) => !Number.isInteger(x) || x < 0)) die("--ids: token ids");
  const n = Math.max(1, int("n"));
  const { model } = await load(opt.model);
  const ctx = await model.createContext({ contextSize: ids.length + n + 16, batchSize: Math.max(32, ids.length), threads, flashAttention: fa, sequences: 1 });
  const seq = ctx.getSequence();
  const input = ids.map((t, i) => (i === ids.length - 1 ? [t, { generateNext: { logits: true, token: true, options: { temperature: 0 } } }] : t));
  const out = await seq.controlledEvaluate(input);
  const last = out[ids.length - 1].next;
  // every id llama.cpp returned a logit for (node-llama-cpp 3.22 exposes no vocabulary size)
  let nv = 0;
  for (const [t] of last.logits) nv = Math.max(nv, t + 1);
  const logits = new Float64Array(nv).fill(NaN);
  for (const [t, v] of last.logits) logits[t] = v;
  const gen = [last.token];
  let cur = last.token;
  while (gen.length < n) {
    const o = await seq.controlledEvaluate([[cur, { generateNext: { token: true, options: { temperature: 0 } } }]]);
    cur = o[0].next.token;
    gen.push(cur);
  }
  console.log(`llama.cpp greedy ids: ${gen.join(" ")}`);
  if (opt["dump-logits"]) writeFileSync(opt["dump-logits"], Array.from(logits, (v, i) => `${i} ${v}`).join("\n") + "\n");
  if (opt["moe8-ids"]) {
    const m = String(opt["moe8-ids"]).split(/[\s,]+/).filter(Boolean).map(Number);
    let same = 0;
    while (same < Math.min(m.length, gen.length) && m[same] === gen[same]) same++;
    console.log(`moe8 greedy ids:      ${m.join(" ")}\nsame first ${same} of ${Math.min(m.length, gen.length)} greedy tokens`);
  }
  if (opt["moe8-logits"]) {
    const ref = new Float64Array(logits.length).fill(NaN);
    for (const line of readFileSync(opt["moe8-logits"], "utf8").split("\n")) {
      const [i, v] = line.trim().split(/\s+/);
      if (i !== undefined && v !== undefined && Number(i) < ref.length) ref[Number(i)] = Number(v);
    }
    let dot = 0, na = 0, nb = 0, maxAbs = 0, maxRef = 0, sq = 0, cnt = 0;
    for (let i = 0; i < ref.length; i++) {
      const a = logits[i], r = ref[i];
      if (!Number.isFinite(a) || !Number.isFinite(r)) continue;
      dot += a * r; na += a * a; nb += r * r; sq += (a - r) ** 2; cnt++;
      maxAbs = Math.max(maxAbs, Math.abs(a - r)); maxRef = Math.max(maxRef, Math.abs(r));
    }
    const top = (x, k) => Array.from(x.keys()).filter((i) => Number.isFinite(x[i])).sort((p, q) => x[q] - x[p]).slice(0, k);
    const t5a = top(logits, 5), t5r = top(ref, 5);
    // softmax KL(moe8 || llama.cpp) of the last position
    const lse = (x) => { let m = -Infinity; for (const v of x) if (Number.isFinite(v)) m = Math.max(m, v); let s = 0; for (const v of x) if (Number.isFinite(v)) s += Math.exp(v - m); return m + Math.log(s); };
    const la = lse(logits), lr = lse(ref);
    let kl = 0;
    for (let i = 0; i < ref.length; i++) if (Number.isFinite(logits[i]) && Number.isFinite(ref[i])) { const pr = Math.exp(ref[i] - lr); kl += pr * ((ref[i] - lr) - (logits[i] - la)); }
    console.log(`last-position logits over ${cnt} ids: cosine ${(dot / Math.sqrt(na * nb)).toFixed(6)}, ` +
      `rms diff ${Math.sqrt(sq / cnt).toExponential(3)} (rms of moe8's ${Math.sqrt(nb / cnt).toExponential(3)}), ` +
      `max |diff| ${maxAbs.toExponential(3)} (max |logit| ${maxRef.toFixed(3)}), KL(moe8||llama.cpp) ${kl.toExponential(3)}`);
    console.log(`top-5 llama.cpp ${t5a.join(" ")} | moe8 ${t5r.join(" ")} | top-1 ${t5a[0] === t5r[0] ? "same" : "differs"}`);
  }
  await ctx.dispose();
}

if (opt.ids) await check();
else await bench();
await llama.dispose();
