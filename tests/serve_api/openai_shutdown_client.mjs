// The official `openai` npm client reading a stream that the server ends at its
// drain timeout (driven by shutdown_test.py): it must raise the server's error,
// not "Premature close". Prints "started" after the first chunk, then one JSON line.
//   node openai_shutdown_client.mjs PORT
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `http://127.0.0.1:${process.argv[2]}/v1`, apiKey: 'unused', maxRetries: 0 });
const stream = await client.completions.create({
  model: 'test-model', prompt: 'drain me', max_tokens: 900, temperature: 0, ignore_eos: true, stream: true,
});
let chunks = 0;
try {
  for await (const chunk of stream) {
    if (chunks++ === 0) console.log('started');
  }
  console.log(JSON.stringify({ ended: 'without an error', chunks }));
} catch (e) {
  console.log(JSON.stringify({ error: e.message, type: e.constructor.name, chunks }));
}
