// openai_client.mjs — the official OpenAI Node library (openai 6.x, fetched by
// `make deps` into .deps/openai-node) against `moe8 serve`; run by
// tests/test_serve.c, which compares what this prints with `moe8 generate`.
//
//   node openai_client.mjs PKG_DIR BASE_URL MODEL CHAT_TEXT COMPLETION_PROMPT N
//
// Prints one JSON line: the library's version, the models list, a chat
// (streamed with include_usage, and whole) and a completion (whole, and
// streamed), each as {text, finish_reason, usage}, and how many HTTP
// requests were made. Any failure: a message on stderr, exit 1.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, baseURL, model, chatText, prompt, nStr] = process.argv.slice(2);
const n = Number(nStr);
const lib = (f) => pathToFileURL(join(pkgDir, 'node_modules', 'openai', f)).href;
const { default: OpenAI } = await import(lib('index.mjs'));
const { VERSION } = await import(lib('version.mjs'));

const client = new OpenAI({ apiKey: 'unused', baseURL, maxRetries: 0, timeout: 120000 });
const out = { version: VERSION, requests: 0 };

try {
  out.requests++;
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  out.models = models;

  const chatParams = {
    model,
    messages: [{ role: 'user', content: chatText }],
    max_tokens: n,
    temperature: 0,
    chat_template_kwargs: { enable_thinking: false },
  };
  out.requests++;
  const stream = await client.chat.completions.create({
    ...chatParams, stream: true, stream_options: { include_usage: true } });
  const cs = { text: '', finish_reason: null, usage: null, role: null, chunks: 0 };
  for await (const chunk of stream) {
    cs.chunks++;
    const c = chunk.choices[0];
    if (c?.delta?.role) cs.role = c.delta.role;
    if (c?.delta?.content) cs.text += c.delta.content;
    if (c?.finish_reason) cs.finish_reason = c.finish_reason;
    if (chunk.usage) cs.usage = chunk.usage;
  }
  out.chat_stream = cs;

  out.requests++;
  const chat = await client.chat.completions.create(chatParams);
  out.chat = { text: chat.choices[0].message.content, finish_reason: chat.choices[0].finish_reason,
               usage: chat.usage, role: chat.choices[0].message.role };

  const cmplParams = { model, prompt, max_tokens: n, temperature: 0 };
  out.requests++;
  const cmpl = await client.completions.create(cmplParams);
  out.completion = { text: cmpl.choices[0].text, finish_reason: cmpl.choices[0].finish_reason,
                     usage: cmpl.usage };

  out.requests++;
  const cstream = await client.completions.create({ ...cmplParams, stream: true });
  const ct = { text: '', finish_reason: null, usage: null };
  for await (const chunk of cstream) {
    const c = chunk.choices[0];
    if (c?.text) ct.text += c.text;
    if (c?.finish_reason) ct.finish_reason = c.finish_reason;
  }
  out.completion_stream = ct;
} catch (e) {
  console.error(`openai_client: ${e?.stack ?? e}`);
  process.exit(1);
}
console.log(JSON.stringify(out));
