// responses_openai.mjs — OpenAI's own clients against `moe8 serve`'s Responses
// API, run by tests/test_serve_responses.c with the clients
// tests/clients/package-lock.json pins (installed by `make deps` into
// .deps/clients):
//   - openai: responses.create plain; responses.stream (the SDK's own
//     accumulator checks the event order) with its deltas joined = the final
//     text; a required function tool whose arguments validate against the
//     schema, its output sent back through previous_response_id;
//     text.format json_schema whose output validates;
//   - @openai/agents: an Agent with one function tool in its default mode
//     (the Responses API), tool choice required, stopping at the tool's
//     result: the tool ran with valid arguments and its result is the output.
// The model is random: only structure is checked. Thinking is off
// (reasoning.effort "none"), so the grammar of a required call or a schema
// applies from the first token.
//
//   node responses_openai.mjs CLIENTS_DIR BASE_URL MODEL
//
// Prints one JSON line {checks: [{name, ok, detail}]}; exit 1 on a thrown
// error (its message on stderr).
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [clientsDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(join(clientsDir, 'package.json'));
const load = async (name) => import(require.resolve(name));

const { default: OpenAI } = await load('openai');
const { z } = await load('zod');
const { default: Ajv } = await load('ajv');
const agents = await load('@openai/agents');

const ajv = new Ajv({ strict: false });
const checks = [];
const check = (name, ok, detail = '') => checks.push({ name, ok: !!ok, detail: String(detail).slice(0, 400) });
const valid = (schema, value) => {
  const v = ajv.compile(schema);
  return v(value) ? '' : ajv.errorsText(v.errors);
};
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
const noThink = { reasoning: { effort: 'none' } };

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', enum: ['Bern', 'Paris'] }, days: { type: 'integer', enum: [1, 2, 3] } },
  required: ['city', 'days'],
  additionalProperties: false,
};

// plain
{
  const r = await client.responses.create({ model, input: 'Say hi', max_output_tokens: 16, temperature: 0, ...noThink });
  check('create: a Response', r.id.startsWith('resp_') && r.object === 'response' &&
    ['completed', 'incomplete'].includes(r.status) && typeof r.output_text === 'string' &&
    r.usage.output_tokens > 0 && r.usage.input_tokens_details.cached_tokens >= 0, JSON.stringify(r).slice(0, 300));
}

// streamed: the SDK accumulates the events (it throws on a wrong order)
{
  const stream = client.responses.stream({ model, input: 'Say hi', max_output_tokens: 16, temperature: 0, ...noThink });
  let deltas = '', seq = -1, ordered = true, n = 0;
  for await (const e of stream) {
    ordered &&= e.sequence_number === seq + 1;
    seq = e.sequence_number;
    n++;
    if (e.type === 'response.output_text.delta') deltas += e.delta;
  }
  const fin = await stream.finalResponse();
  check('stream: sequence numbers 0, 1, 2, ...', ordered && n > 4, `${n} events`);
  check('stream: deltas = the final text', deltas === fin.output_text && fin.output_text.length > 0,
    `${JSON.stringify(deltas)} vs ${JSON.stringify(fin.output_text)}`);
  const whole = await client.responses.create({ model, input: 'Say hi', max_output_tokens: 16, temperature: 0, ...noThink });
  check('stream: = the whole answer', whole.output_text === fin.output_text, `${whole.output_text} vs ${fin.output_text}`);
}

// a function tool, required; the result sent back
{
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather', parameters: weatherSchema, strict: true }];
  const r = await client.responses.create({ model, input: 'Weather in Bern?', tools, tool_choice: 'required',
    max_output_tokens: 80, temperature: 0, ...noThink });
  const call = r.output.find((o) => o.type === 'function_call');
  let args = null;
  try { args = JSON.parse(call.arguments); } catch { /* reported below */ }
  check('tools: a function_call', call && call.name === 'get_weather' && call.call_id && args &&
    !valid(weatherSchema, args), JSON.stringify(r.output).slice(0, 300));
  if (call) {
    const r2 = await client.responses.create({ model, previous_response_id: r.id, tools, max_output_tokens: 8,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }], ...noThink });
    check('tools: the output through previous_response_id', r2.previous_response_id === r.id &&
      r2.usage.input_tokens > r.usage.input_tokens, JSON.stringify(r2.usage));
  }
  const s = client.responses.stream({ model, input: 'Weather in Bern?', tools, tool_choice: 'required',
    max_output_tokens: 80, temperature: 0, ...noThink });
  let argDeltas = '';
  for await (const e of s) if (e.type === 'response.function_call_arguments.delta') argDeltas += e.delta;
  const sf = await s.finalResponse();
  const scall = sf.output.find((o) => o.type === 'function_call');
  check('tools streamed: arguments deltas = the call = the whole one', scall && scall.arguments === argDeltas &&
    call && scall.arguments === call.arguments, `${argDeltas} vs ${scall && scall.arguments}`);
}

// text.format json_schema
{
  const r = await client.responses.create({ model, input: 'Weather as JSON', max_output_tokens: 120, ...noThink,
    text: { format: { type: 'json_schema', name: 'weather', schema: weatherSchema, strict: true } } });
  let v = null;
  try { v = JSON.parse(r.output_text); } catch { /* reported below */ }
  check('text.format json_schema', v && !valid(weatherSchema, v), r.output_text);
}

// @openai/agents: one function tool, the default (Responses) mode
{
  agents.setDefaultOpenAIClient(client);
  agents.setTracingDisabled(true);
  let ran = null;
  const getWeather = agents.tool({
    name: 'get_weather',
    description: 'The weather of a city',
    parameters: z.object({ city: z.enum(['Bern', 'Paris']), days: z.union([z.literal(1), z.literal(2)]) }),
    execute: async ({ city, days }) => { ran = { city, days }; return `sunny in ${city}`; },
  });
  const agent = new agents.Agent({
    name: 'weather', instructions: 'Use the tool.', model, tools: [getWeather],
    modelSettings: { toolChoice: 'required', parallelToolCalls: false, maxTokens: 200, temperature: 0,
      reasoning: { effort: 'none' } },
    toolUseBehavior: 'stop_on_first_tool',
  });
  const result = await agents.run(agent, 'Weather in Bern?');
  check('agents: the tool ran with valid arguments', ran && ['Bern', 'Paris'].includes(ran.city), JSON.stringify(ran));
  check('agents: its result is the final output', ran && result.finalOutput === `sunny in ${ran.city}`,
    String(result.finalOutput));
}

console.log(JSON.stringify({ checks }));
