#!/usr/bin/env python3
"""Renders every chat template here over conversations.json with Jinja2, set up the
way Hugging Face transformers' apply_chat_template sets it up, and writes
expected.json: the ground truth the C++ interpreter's tests compare against.

    /usr/bin/python3 make_expected.py            # rewrite expected.json
    /usr/bin/python3 make_expected.py --check F  # exit 1 if F differs from a fresh render
"""
import datetime
import glob
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    # transformers' strftime_now formats datetime.now(); here a fixed clock, the one
    # chat_template_test.cpp and hf_jinja_reference.mjs use: 2025-03-04 09:26:53.
    return datetime.datetime(2025, 3, 4, 9, 26, 53).strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers replaces Jinja's tojson (which HTML-escapes) with plain json.dumps.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all():
    env = environment()
    with open(os.path.join(HERE, "conversations.json")) as f:
        conversations = json.load(f)
    results = []
    for path in sorted(glob.glob(os.path.join(HERE, "*.jinja"))):
        name = os.path.basename(path)[: -len(".jinja")]
        with open(path) as f:
            template = env.from_string(f.read())
        for conv in conversations:
            for gen in (True, False):
                entry = {"template": name, "conversation": conv["name"], "add_generation_prompt": gen}
                try:
                    entry["output"] = template.render(messages=conv["messages"], tools=conv.get("tools"),
                                                      add_generation_prompt=gen, bos_token="<s>", eos_token="</s>")
                except TemplateError as e:
                    entry["error"] = str(e)
                results.append(entry)
    return results


def main():
    results = render_all()
    text = json.dumps(results, ensure_ascii=False, indent=1) + "\n"
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2], encoding="utf-8") as f:
            if f.read() != text:
                print("expected.json is stale: rerun make_expected.py", file=sys.stderr)
                return 1
        return 0
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
