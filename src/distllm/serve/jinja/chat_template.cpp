#include "distllm/serve/jinja/chat_template.h"

#include "distllm/serve/jinja/context.h"
#include "distllm/serve/jinja/lexer.h"
#include "distllm/serve/jinja/nodes.h"
#include "distllm/serve/jinja/template_parser.h"

namespace distllm::serve {

using V = TemplateValue;

struct ChatTemplate::Impl {
  std::string source;
  jinja::Body body;
};

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->body = jinja::parse_template(jinja::lex_template(impl->source, origin), origin);
  ChatTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

std::string ChatTemplate::render(const TemplateValue& variables, const TemplateClock& clock) const {
  jinja::Ctx ctx;
  ctx.clock = clock ? &clock : nullptr;
  ctx.scopes.emplace_back();
  auto& globals = ctx.scopes.back();
  for (const char* f : {"raise_exception", "range", "namespace", "dict", "strftime_now"}) globals[f] = V::function(f);
  if (variables.is_object())
    for (const auto& [k, v] : variables.fields()) globals[k] = v;
  ctx.scopes.emplace_back();  // the template's own top-level variables
  std::string out;
  jinja::render_body(impl_->body, ctx, out);
  return out;
}

const std::string& ChatTemplate::source() const { return impl_->source; }

}  // namespace distllm::serve
