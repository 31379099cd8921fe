// The official `openai` npm client against serve_test_server --echo (the scripted
// model answers with the last user message) started with --reasoning-parser qwen3
// --tool-call-parser hermes: the client's own stream accumulator puts the streamed
// tool_calls deltas back together into exactly the non-streamed message, and the
// thinking arrives as reasoning_content, streamed and not.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.SERVE_URL}/v1`, apiKey: 'none', maxRetries: 0 });
const model = 'test-model';
const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
];
const script = '<think>\nThe user wants weather and time.\n</think>\n\nOne moment.\n' +
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n' +
  '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';
const request = { model, messages: [{ role: 'user', content: script }], tools, max_tokens: 400, temperature: 0 };

const whole = await client.chat.completions.create(request);
const message = whole.choices[0].message;
assert.equal(whole.choices[0].finish_reason, 'tool_calls');
assert.equal(message.reasoning_content, '\nThe user wants weather and time.\n');
assert.equal(message.content, '\n\nOne moment.\n');
assert.deepEqual(message.tool_calls.map((c) => c.function), [
  { name: 'get_weather', arguments: '{"city":"Zürich"}' },
  { name: 'get_time', arguments: '{}' },
]);

let reasoning = '';
const stream = client.beta.chat.completions.stream({ ...request, stream: true });
stream.on('chunk', (chunk) => {
  for (const choice of chunk.choices) reasoning += choice.delta.reasoning_content ?? '';
});
const final = await stream.finalChatCompletion();
assert.equal(reasoning, message.reasoning_content);
assert.equal(final.choices[0].finish_reason, 'tool_calls');
assert.equal(final.choices[0].message.content, message.content);
assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function), message.tool_calls.map((c) => c.function));
for (const c of final.choices[0].message.tool_calls) {
  assert.equal(c.type, 'function');
  assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
}

// enable_thinking false reaches the template; this ChatML template ignores it, and an
// output that does not open with <think> is all answer.
const plain = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'No thinking.' }], max_tokens: 50, temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
});
assert.equal(plain.choices[0].message.content, 'No thinking.');
assert.equal(plain.choices[0].message.reasoning_content, null);
console.log('openai client: reasoning_content and streamed tool calls as in the whole message');
