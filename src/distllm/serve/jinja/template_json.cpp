#include "distllm/serve/jinja/template_json.h"

namespace distllm::serve {

TemplateValue template_value_from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return TemplateValue::none();
    case nlohmann::ordered_json::value_t::boolean: return TemplateValue::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return TemplateValue::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return TemplateValue::integer(static_cast<int64_t>(u));
      return TemplateValue::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return TemplateValue::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return TemplateValue::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      TemplateValue::Array items;
      for (const auto& x : j) items.push_back(template_value_from_json(x));
      return TemplateValue::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      TemplateValue::Object fields;
      for (auto it = j.begin(); it != j.end(); ++it) fields.emplace_back(it.key(), template_value_from_json(it.value()));
      return TemplateValue::object(std::move(fields));
    }
    default: return TemplateValue();
  }
}

}  // namespace distllm::serve
