// The official `openai` npm client against our server (SERVE_URL, key test-key):
// completions and chat, streaming and not, errors as the client's typed errors.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.SERVE_URL}/v1`, apiKey: 'test-key', maxRetries: 0 });
const model = 'test-model';

const models = await client.models.list();
assert.equal(models.data[0].id, model);

const c = await client.completions.create({ model, prompt: 'Hello node', max_tokens: 9, temperature: 0 });
assert.equal(c.object, 'text_completion');
assert.equal(c.choices[0].finish_reason, 'length');
assert.equal(c.usage.completion_tokens, 9);

let streamed = '';
let usage = null;
const stream = await client.completions.create({
  model, prompt: 'Hello node', max_tokens: 9, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) streamed += choice.text;
}
assert.equal(streamed, c.choices[0].text);
assert.equal(usage.completion_tokens, 9);

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi from node' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
assert.equal(chat.choices[0].message.role, 'assistant');
assert.equal(chat.choices[0].logprobs.content.length, 6);
let chatStreamed = '';
let finish = null;
const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, stream: true });
for await (const chunk of chatStream) {
  for (const choice of chunk.choices) {
    chatStreamed += choice.delta.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
assert.equal(chatStreamed, chat.choices[0].message.content);
assert.equal(finish, 'length');

const seeded = await client.completions.create({ model, prompt: 'dice', max_tokens: 8, n: 2, seed: 5, temperature: 1 });
const again = await client.completions.create({ model, prompt: 'dice', max_tokens: 8, n: 2, seed: 5, temperature: 1 });
assert.equal(seeded.choices.length, 2);
assert.deepEqual(seeded.choices.map((x) => x.text), again.choices.map((x) => x.text));

await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => {
  assert.ok(e instanceof OpenAI.NotFoundError);
  assert.equal(e.status, 404);
  return true;
});
await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: -1 }), (e) => {
  assert.ok(e instanceof OpenAI.BadRequestError);
  assert.match(e.message, /max_tokens/);
  return true;
});
// Tool calls: a forced function and "required", plain and streamed (the client's
// stream helper accumulates the tool_call deltas), arguments that parse.
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] } } },
  // Declared, bounded properties: a free-form object would let a random model write
  // one key for ever.
  { type: 'function', function: { name: 'get_time',
    parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 4 } }, additionalProperties: false } } },
];
const ask = [{ role: 'user', content: 'Weather in Oslo?' }];
const named = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 200, temperature: 1, seed: 3,
});
const call = named.choices[0].message.tool_calls[0];
assert.equal(call.type, 'function');
assert.equal(call.function.name, 'get_weather');
assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
assert.equal(named.choices[0].finish_reason, 'stop');
// One call (parallel_tool_calls: false bounds the array, so a random model ends it).
const required = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 400, temperature: 1, seed: 4,
});
assert.equal(required.choices[0].finish_reason, 'tool_calls');
assert.equal(required.choices[0].message.tool_calls.length, 1);
for (const c of required.choices[0].message.tool_calls) {
  assert.ok(['get_weather', 'get_time'].includes(c.function.name));
  JSON.parse(c.function.arguments);
}
const toolStream = client.beta.chat.completions.stream({
  model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 200, temperature: 1, seed: 3, stream: true,
});
const streamedCall = (await toolStream.finalChatCompletion()).choices[0].message.tool_calls[0];
assert.equal(streamedCall.function.name, 'get_weather');
assert.deepEqual(JSON.parse(streamedCall.function.arguments), JSON.parse(call.function.arguments));

const anonymous = new OpenAI({ baseURL: `${process.env.SERVE_URL}/v1`, apiKey: 'wrong', maxRetries: 0 });
await assert.rejects(anonymous.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
console.log('openai client: all checks passed');
