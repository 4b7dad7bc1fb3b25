// messages_sdk.mjs — the official Anthropic SDK (@anthropic-ai/sdk) against
// `moe8 serve`'s Messages API, run by tests/test_serve_messages.c on the
// chain fixture (its greedy answer: thinking "Let me think", text "Hello!"):
//   - messages.create: with thinking adaptive the content is [thinking, text]
//     "Let me think" / "Hello!", stop_reason end_turn, usage counted;
//     without thinking, on ?beta=true (client.beta.messages), the template's
//     thinking switch off (the chain then answers " Hmm<think>Hello!", all text);
//   - messages.stream: the SDK's accumulated finalMessage equals create's,
//     its text events concatenate to the text, its thinking events to the
//     thinking;
//   - a tool round trip: tool_choice "tool" gives one tool_use whose input
//     validates against input_schema (ajv), stop_reason tool_use; its
//     result sent back (tool_use and tool_result in the history) gives an
//     answer; the same streamed gives the same input (input_json_delta);
//   - countTokens equals create's usage.input_tokens + cache reads;
//   - errors: an unknown model is NotFoundError (404, not_found_error), a
//     missing max_tokens' 400 is BadRequestError with Anthropic's body.
//
//   node messages_sdk.mjs CLIENTS_DIR BASE_URL MODEL
//
// Prints one JSON line {checks: [{name, ok, detail}]}; exit 1 on a thrown
// error (its message on stderr).
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [clientsDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(join(clientsDir, 'package.json'));
const load = async (name) => import(require.resolve(name));

const { default: Anthropic } = await load('@anthropic-ai/sdk');
const { default: Ajv } = await load('ajv');

const client = new Anthropic({ baseURL, apiKey: 'none', maxRetries: 0 });
const checks = [];
const check = (name, ok, detail = '') => checks.push({ name, ok: !!ok, detail: String(detail).slice(0, 400) });
const blocks = (m, type) => m.content.filter((b) => b.type === type);
const textOf = (m) => blocks(m, 'text').map((b) => b.text).join('');
const thinkingOf = (m) => blocks(m, 'thinking').map((b) => b.thinking).join('');

const weather = {
  name: 'get_weather',
  description: 'The weather of a city',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', minLength: 1, maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'],
    additionalProperties: false,
  },
};
const validate = new Ajv({ strict: false }).compile(weather.input_schema);
const base = {
  model,
  max_tokens: 200,
  temperature: 0,
  system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
  messages: [{ role: 'user', content: 'Hi there' }],
};

// create, thinking adaptive and none (beta)
const a = await client.messages.create({ ...base, thinking: { type: 'adaptive' } });
check('create: thinking then text', a.id.startsWith('msg_') && a.type === 'message' && a.role === 'assistant' &&
  thinkingOf(a) === 'Let me think' && textOf(a) === 'Hello!' && a.content[0].type === 'thinking' &&
  a.stop_reason === 'end_turn' && a.stop_sequence === null && a.usage.output_tokens > 0, JSON.stringify(a));
const b = await client.beta.messages.create({ ...base, betas: ['interleaved-thinking-2025-05-14'] });
// thinking absent: the template's switch off, where the chain model answers " Hmm<think>Hello!" (thinking
// off: a <think> past the answer's start is text, not a thinking block)
check('beta create: thinking off', textOf(b) === ' Hmm<think>Hello!' && thinkingOf(b) === '' &&
  b.stop_reason === 'end_turn', JSON.stringify(b));

// stream
{
  let text = '', thinking = '';
  const s = client.messages.stream({ ...base, thinking: { type: 'adaptive' } });
  s.on('text', (d) => { text += d; });
  s.on('thinking', (d) => { thinking += d; });
  const f = await s.finalMessage();
  check('stream: finalMessage equals create', JSON.stringify(f.content) === JSON.stringify(a.content) &&
    f.stop_reason === a.stop_reason && f.usage.output_tokens === a.usage.output_tokens, JSON.stringify(f));
  check('stream: text and thinking events', text === textOf(a) && thinking === thinkingOf(a), `${text} | ${thinking}`);
}

// a tool round trip
{
  const req = { ...base, max_tokens: 300, thinking: { type: 'adaptive' }, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } };
  const t = await client.messages.create(req);
  const uses = blocks(t, 'tool_use');
  check('tool: one tool_use, valid input', uses.length === 1 && uses[0].name === 'get_weather' &&
    uses[0].id.startsWith('toolu_') && validate(uses[0].input) && t.stop_reason === 'tool_use', JSON.stringify(t));
  const st = await client.messages.stream(req).finalMessage();
  const su = blocks(st, 'tool_use');
  check('tool: streamed input equals', su.length === 1 && JSON.stringify(su[0].input) === JSON.stringify(uses[0]?.input) &&
    st.stop_reason === 'tool_use', JSON.stringify(st));
  const back = await client.messages.create({ ...base, tools: [weather], messages: [
    ...base.messages,
    { role: 'assistant', content: t.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0]?.id ?? 'x', content: 'sunny, 20 C' }] },
  ] });
  check('tool: the result sent back gives an answer', back.content.length >= 1 &&
    ['end_turn', 'max_tokens', 'tool_use'].includes(back.stop_reason) && back.usage.input_tokens + back.usage.cache_read_input_tokens >
    t.usage.input_tokens + t.usage.cache_read_input_tokens,
  JSON.stringify(back));
}

// countTokens
{
  const c = await client.messages.countTokens({ model, system: base.system, messages: base.messages, thinking: { type: 'adaptive' } });
  check('countTokens equals usage', c.input_tokens === a.usage.input_tokens + a.usage.cache_read_input_tokens,
    `${JSON.stringify(c)} vs ${JSON.stringify(a.usage)}`);
}

// errors
try {
  await client.messages.create({ ...base, model: 'claude-nope' });
  check('error: unknown model', false, 'no error');
} catch (e) {
  check('error: unknown model', e instanceof Anthropic.NotFoundError && e.status === 404 &&
    e.error?.error?.type === 'not_found_error', `${e.constructor.name} ${e.status} ${JSON.stringify(e.error)}`);
}
try {
  const { max_tokens, ...rest } = base;
  await client.messages.create(rest);
  check('error: max_tokens required', false, 'no error');
} catch (e) {
  check('error: max_tokens required', e instanceof Anthropic.BadRequestError && e.error?.type === 'error' &&
    e.error?.error?.type === 'invalid_request_error' && /max_tokens/.test(e.message), `${e.constructor.name} ${e.message}`);
}

console.log(JSON.stringify({ checks }));
