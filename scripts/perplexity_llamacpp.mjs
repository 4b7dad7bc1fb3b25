#!/usr/bin/env node
// perplexity_llamacpp.mjs — llama.cpp's perplexity of token ids, on a GGUF written by
// `moe8 export-gguf`, through node-llama-cpp (.deps/llamacpp; see bench_llamacpp.mjs),
// by `moe8 perplexity`'s procedure (llama-perplexity's): the ids cut into chunks of C
// (the first --chunks whole ones), each chunk evaluated alone from an empty context,
// and only its second half scored: position p = C/2 .. C-2 predicts the id at p + 1,
// NLL = logsumexp(logits) - logit[id]; PPL = exp(mean NLL). No BOS is put first (the
// families cross-checked here have none). Logits are llama.cpp's raw ones (those
// generateNext returns); the scored positions are asked for 16 at a time.
//
// Usage: node scripts/perplexity_llamacpp.mjs --model F.gguf --ids-file IDS -c 128
//          [--chunks N] [--threads 2]
// IDS: token ids separated by spaces, commas or newlines (moe8 tokenize's output).
// Prints one line per chunk ("chunk i: ppl so far X") and "estimate PPL = X +/- SE"
// (SE of the mean NLL carried through exp, as llama-perplexity prints it).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", ".deps", "llamacpp", "package.json"));
let nlc;
try {
  nlc = await import(require.resolve("node-llama-cpp"));
} catch (e) {
  console.error("perplexity_llamacpp: node-llama-cpp not found under .deps/llamacpp");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = nlc;

const opt = { threads: 2, c: 128, chunks: 0 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i].replace(/^--?/, "");
  if (i + 1 >= argv.length) die(`${argv[i]} needs a value`);
  opt[k] = argv[++i];
}
function die(msg) { console.error("perplexity_llamacpp: " + msg); process.exit(2); }
if (!opt.model || !opt["ids-file"]) die("--model and --ids-file are required");
const C = Number(opt.c), threads = Number(opt.threads);
if (!Number.isInteger(C) || C < 4 || C % 2) die(`-c ${opt.c}: an even number >= 4`);
const ids = readFileSync(opt["ids-file"], "utf8").split(/[\s,]+/).filter(Boolean).map(Number);
let nChunks = Math.floor(ids.length / C);
if (Number(opt.chunks) > 0) nChunks = Math.min(nChunks, Number(opt.chunks));
if (nChunks < 1) die(`${ids.length} ids: not one chunk of ${C}`);

const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: 0 });
const first = C / 2;
let sum = 0, sum2 = 0, n = 0;
for (let k = 0; k < nChunks; k++) {
  const chunk = ids.slice(k * C, (k + 1) * C);
  const ctx = await model.createContext({ contextSize: C + 16, batchSize: C, threads, sequences: 1 });
  const seq = ctx.getSequence();
  for (let p0 = 0; p0 < C - 1;) { /* prefix without logits, then the scored ones 16 at a time */
    const p1 = p0 < first ? first + 1 : Math.min(C - 1, p0 + 16);
    const input = [];
    for (let p = p0; p < p1; p++)
      input.push(p >= first ? [chunk[p], { generateNext: { logits: true } }] : chunk[p]);
    const out = await seq.controlledEvaluate(input);
    for (let p = Math.max(p0, first); p < p1; p++) {
      const lg = out[p - p0].next.logits;
      let mx = -Infinity, want = NaN;
      for (const [t, v] of lg) { if (v > mx) mx = v; if (t === chunk[p + 1]) want = v; }
      let s = 0;
      for (const [, v] of lg) s += Math.exp(v - mx);
      const nll = mx + Math.log(s) - want;
      if (!Number.isFinite(nll)) die(`chunk ${k} position ${p}: no logit for id ${chunk[p + 1]}`);
      sum += nll, sum2 += nll * nll, n++;
    }
    p0 = p1;
  }
  await ctx.dispose();
  console.log(`chunk ${k}: ppl so far ${Math.exp(sum / n).toFixed(6)}`);
}
const mean = sum / n, se = Math.sqrt(Math.max(0, sum2 / n - mean * mean) / Math.max(1, n - 1));
console.log(`estimate PPL = ${Math.exp(mean).toFixed(6)} +/- ${(Math.exp(mean) * se).toFixed(6)} ` +
  `(${n} scored tokens, ${nChunks} chunks of ${C})`);
