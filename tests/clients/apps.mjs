// apps.mjs — what applications and agent frameworks do with `moe8 serve`, run
// by tests/test_serve_apps.c with the clients tests/clients/package-lock.json
// pins (installed by `make deps` into .deps/clients):
//   - the official OpenAI library: an agent round trip (a required tool call,
//     its result sent back with the call in the history, then an answer),
//     streamed tool calls put together from their deltas, json_schema
//     structured output;
//   - the Vercel AI SDK (@ai-sdk/openai-compatible): generateText with a zod
//     tool it executes, streamText's tool calls, generateObject with a zod
//     schema;
//   - LangChain.js: bindTools + invoke (tool_calls), withStructuredOutput(zod).
// Every tool call's arguments and every structured output is validated with
// ajv against the JSON Schema the request sent (the server's grammar must
// make a random model's output valid). The model is random, so no text is
// checked, only structure. zod's string lengths count UTF-16 units where
// JSON Schema's maxLength counts characters, so zod schemas here bound
// strings by enums, not lengths (a random model writes emoji).
//
//   node apps.mjs CLIENTS_DIR BASE_URL MODEL
//
// Prints one JSON line {checks: [{name, ok, detail}], ...}; exit 1 on a
// thrown error (its message on stderr).
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [clientsDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(join(clientsDir, 'package.json'));
const load = async (name) => import(require.resolve(name));

const { default: OpenAI } = await load('openai');
const { z } = await load('zod');
const ai = await load('ai');
const { createOpenAICompatible } = await load('@ai-sdk/openai-compatible');
const { ChatOpenAI } = await load('@langchain/openai');
const { default: Ajv } = await load('ajv');

const ajv = new Ajv({ strict: false });
const checks = [];
const check = (name, ok, detail = '') => checks.push({ name, ok: !!ok, detail: String(detail).slice(0, 400) });
const valid = (schema, value) => {
  const v = ajv.compile(schema);
  return v(value) ? '' : ajv.errorsText(v.errors);
};
const noThink = { chat_template_kwargs: { enable_thinking: false } };

const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { type: 'string', enum: ['C', 'F'] },
  },
  required: ['city', 'days', 'unit'],
  additionalProperties: false,
};
const tools = [{
  type: 'function',
  function: { name: 'get_weather', description: 'The weather of a city', parameters: weatherSchema },
}];

const client = new OpenAI({ apiKey: 'unused', baseURL, maxRetries: 0, timeout: 300000 });

// 1. OpenAI: agent round trip
{
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r1 = await client.chat.completions.create({
    model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200,
    temperature: 0.7, seed: 11, ...noThink,
  });
  const m1 = r1.choices[0].message;
  const call = m1.tool_calls?.[0];
  check('openai: required call', r1.choices[0].finish_reason === 'tool_calls' && m1.tool_calls?.length === 1 &&
        call.type === 'function' && call.function.name === 'get_weather' && /^call_/.test(call.id),
        JSON.stringify(r1.choices[0]));
  let args = null;
  try { args = JSON.parse(call?.function?.arguments ?? 'x'); } catch { /* checked below */ }
  check('openai: arguments validate', args && !valid(weatherSchema, args), call?.function?.arguments);
  messages.push(m1);
  messages.push({ role: 'tool', tool_call_id: call?.id ?? 'x', content: JSON.stringify({ temp: 21 }) });
  const r2 = await client.chat.completions.create({
    model, messages, tools, tool_choice: 'none', max_tokens: 12, temperature: 0, ...noThink,
  });
  check('openai: answer after the tool result', typeof r2.choices[0].message.content === 'string' &&
        !r2.choices[0].message.tool_calls && r2.usage.prompt_tokens > r1.usage.prompt_tokens,
        JSON.stringify(r2.choices[0]));
}

// 2. OpenAI: streamed tool calls, joined from their deltas
{
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Weather in Oslo and Rome?' }], tools,
    tool_choice: 'required', max_tokens: 300, temperature: 0.9, seed: 5, stream: true, ...noThink,
  });
  const calls = [];
  let finish = null, badDelta = '';
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const d of c.delta?.tool_calls ?? []) {
      if (!calls[d.index]) {
        if (!d.id || d.type !== 'function' || !d.function?.name) badDelta = JSON.stringify(d);
        calls[d.index] = { id: d.id, name: d.function?.name, arguments: d.function?.arguments ?? '' };
      } else {
        if (d.id || d.function?.name) badDelta = JSON.stringify(d);
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  check('openai stream: deltas (id and name first, then arguments)', calls.length >= 1 && !badDelta, badDelta);
  const done = calls.filter((c) => { try { JSON.parse(c.arguments); return true; } catch { return false; } });
  check('openai stream: each whole call validates', done.length >= 1 &&
        done.every((c) => c.name === 'get_weather' && !valid(weatherSchema, JSON.parse(c.arguments))),
        JSON.stringify(calls));
  check('openai stream: finish_reason', finish === 'tool_calls' || finish === 'length', finish);
}

// 3. OpenAI: json_schema structured output
{
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 10 }, tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 3 },
                  score: { type: 'integer', minimum: -5, maximum: 5 }, ok: { type: 'boolean' } },
    required: ['name', 'tags', 'score', 'ok'], additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Describe yourself' }], max_tokens: 300, temperature: 1, seed: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'me', schema, strict: true } }, ...noThink,
  });
  let obj = null;
  try { obj = JSON.parse(r.choices[0].message.content); } catch { /* checked below */ }
  check('openai: json_schema output validates', obj && !valid(schema, obj), r.choices[0].message.content);
}

// 4. AI SDK
{
  const provider = createOpenAICompatible({ name: 'moe8', baseURL, apiKey: 'unused', supportsStructuredOutputs: true });
  const lm = provider.chatModel(model);
  let executed = null;
  const weather = ai.tool({
    description: 'The weather of a city',
    inputSchema: z.object({ city: z.enum(['Paris', 'Oslo', 'Lima']), days: z.number().int().min(1).max(7) }),
    execute: async (input) => { executed = input; return { temp: 21 }; },
  });
  const res = await ai.generateText({
    model: lm, tools: { weather }, toolChoice: 'required', prompt: 'Weather in Paris?', maxOutputTokens: 200,
    temperature: 0.7, seed: 2, stopWhen: ai.stepCountIs(1),
    providerOptions: { moe8: { ...noThink, parallel_tool_calls: false } }, /* one call: it ends by itself */
  });
  check('ai sdk: generateText ran the tool', executed && typeof executed.city === 'string' &&
        Number.isInteger(executed.days) && res.toolCalls?.length >= 1,
        JSON.stringify(res.steps?.[0]?.content?.map((c) => [c.type, c.input ?? '', c.error?.message ?? ''])));

  const st = ai.streamText({
    model: lm, tools: { weather: ai.tool({ description: 'weather', inputSchema: weather.inputSchema }) },
    toolChoice: { type: 'tool', toolName: 'weather' }, prompt: 'Weather?', maxOutputTokens: 200, temperature: 0.5,
    seed: 9, providerOptions: { moe8: noThink },
  });
  const streamed = [];
  for await (const part of st.fullStream) if (part.type === 'tool-call') streamed.push(part);
  check('ai sdk: streamText tool calls', streamed.length >= 1 && streamed.every((p) => p.toolName === 'weather' &&
        typeof p.input?.city === 'string'), JSON.stringify(streamed));

  const person = z.object({ name: z.enum(['Ann', 'Bo']), age: z.number().int().min(0).max(120), pets: z.array(z.enum(['cat', 'dog'])).max(3) });
  const obj = await ai.generateObject({
    model: lm, schema: person, prompt: 'A person', maxOutputTokens: 300, temperature: 1, seed: 4,
    providerOptions: { moe8: noThink },
  });
  check('ai sdk: generateObject', person.safeParse(obj.object).success, JSON.stringify(obj.object));
}

// 5. LangChain
{
  const llm = new ChatOpenAI({
    model, apiKey: 'unused', configuration: { baseURL }, temperature: 0.7, maxTokens: 200, maxRetries: 0,
    modelKwargs: noThink,
  });
  const bound = llm.bindTools([{ type: 'function', function: tools[0].function }], { tool_choice: 'required' });
  const msg = await bound.invoke('Weather in Lima?');
  check('langchain: bindTools tool_calls', msg.tool_calls?.length >= 1 && msg.tool_calls[0].name === 'get_weather' &&
        !valid(weatherSchema, msg.tool_calls[0].args), JSON.stringify(msg.tool_calls));
  const schema = z.object({ title: z.enum(['Up', 'Heat']), stars: z.number().int().min(1).max(5), seen: z.boolean() });
  const structured = llm.withStructuredOutput(schema, { name: 'review', method: 'jsonSchema' });
  const out = await structured.invoke('Review a film');
  check('langchain: withStructuredOutput', schema.safeParse(out).success, JSON.stringify(out));
}

console.log(JSON.stringify({ checks }));
