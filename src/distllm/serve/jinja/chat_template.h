// Chat templates: the subset of Jinja2 that Hugging Face chat templates use.
//
// Hugging Face renders `tokenizer_config.json`'s chat_template with Jinja2 in a
// sandbox with trim_blocks and lstrip_blocks on, the loopcontrols extension, and
// the globals raise_exception(msg) and strftime_now(fmt). This is an interpreter for
// that language subset:
//   - {{ }}, {% %}, {# #}, whitespace control (-, +), trim_blocks, lstrip_blocks;
//   - if/elif/else, for (with else, `if` filter, tuple targets, loop.index/index0/
//     revindex/revindex0/first/last/length/previtem/nextitem), set (including
//     `set ns.attr = ...` and block `set`), macro, break/continue, generation;
//   - expressions: literals (strings, numbers, true/false/none, lists, dicts,
//     tuples), attribute / subscript / slice access, + - * / // % ** ~, comparisons,
//     in / not in, and / or / not, `x if c else y`, `is` tests, filters, calls;
//   - filters: trim, upper, lower, capitalize, title, length/count, first, last,
//     join, default/d, tojson (indent, separators, sort_keys), string, int, float,
//     list, items, replace, safe, abs, map, select, reject, selectattr, rejectattr,
//     unique, sort, indent, reverse, dictsort;
//   - tests: defined, undefined, none, string, number, integer, float, boolean,
//     mapping, iterable, sequence, callable, equalto/eq/==, ne, odd, even, true,
//     false, in;
//   - string methods strip/lstrip/rstrip/upper/lower/title/capitalize/startswith/
//     endswith/split/replace/format-free; dict methods items/keys/values/get; list
//     methods append/index; functions raise_exception, range, namespace, dict,
//     strftime_now (on a clock a caller may fix: TemplateClock).
// Anything else (extends, include, import, filter blocks, call blocks, unknown
// filters or tests) is rejected when the template is parsed, with the line number,
// so a model never silently gets a wrong prompt.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "distllm/base/error.h"
#include "distllm/serve/jinja/template_value.h"

namespace distllm::serve {

// An error while rendering: raise_exception() in the template, or an operation the
// data does not allow (the request's messages are unsuitable for this template).
class TemplateError : public Error {
 public:
  using Error::Error;
};

// What strftime_now() formats: the local time now, unless a caller (a test) fixes it.
using TemplateClock = std::function<std::tm()>;

class ChatTemplate {
 public:
  // Throws distllm::Error naming `origin` and the line for a syntax error or a
  // feature this interpreter does not implement.
  static ChatTemplate parse(const std::string& source, const std::string& origin = "chat template");
  // Renders with `variables` (an object: messages, add_generation_prompt,
  // bos_token, eos_token, ...). Throws TemplateError.
  std::string render(const TemplateValue& variables, const TemplateClock& clock = {}) const;
  const std::string& source() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace distllm::serve
