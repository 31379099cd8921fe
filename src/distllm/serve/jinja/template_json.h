// JSON (nlohmann, insertion-ordered like Python dicts) to chat-template values.
#pragma once

#include <nlohmann/json.hpp>

#include "distllm/serve/jinja/template_value.h"

namespace distllm::serve {

TemplateValue template_value_from_json(const nlohmann::ordered_json& j);

}  // namespace distllm::serve
