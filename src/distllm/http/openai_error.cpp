#include "distllm/http/openai_error.h"

namespace distllm::http {

using Json = nlohmann::ordered_json;

Json openai_error(int status, std::string_view message, std::string_view param, std::string_view code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  Json err = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return Json{{"error", err}};
}

std::string openai_error_text(int status, std::string_view message, std::string_view param, std::string_view code) {
  return openai_error(status, message, param, code).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string openai_error_events(int status, std::string_view message, std::string_view code) {
  return "data: " + openai_error_text(status, message, "", code) + "\n\ndata: [DONE]\n\n";
}

}  // namespace distllm::http
