// Chat templates come from model directories: any text must parse or fail with
// distllm::Error, and any template that parses must render or fail with
// TemplateError, within bounded time and memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "distllm/serve/jinja/chat_template.h"
#include "distllm/serve/jinja/template_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace distllm::serve;
  std::string src(reinterpret_cast<const char*>(data), size);
  static const TemplateValue vars = template_value_from_json(nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Bye"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": null})"));
  try {
    ChatTemplate t = ChatTemplate::parse(src, "fuzz");
    t.render(vars);
  } catch (const distllm::Error&) {
  }
  return 0;
}
