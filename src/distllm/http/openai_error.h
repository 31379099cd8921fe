// The OpenAI error object every error response of the server and the router
// carries: {"error": {"message", "type", "param", "code"}}, with the type chosen
// from the status as OpenAI does (authentication_error, not_found_error,
// rate_limit_error, server_error, invalid_request_error). Also what a stream that
// ends in an error sends as its last event (vLLM and OpenAI do the same).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace distllm::http {

// "" for param or code: null in the object.
nlohmann::ordered_json openai_error(int status, std::string_view message, std::string_view param = "",
                                    std::string_view code = "");
// The same, serialized (invalid UTF-8 in the message is replaced, never thrown on).
std::string openai_error_text(int status, std::string_view message, std::string_view param = "",
                              std::string_view code = "");
// A server-sent event carrying the error object, then the stream's end:
// "data: {"error": {...}}\n\ndata: [DONE]\n\n".
std::string openai_error_events(int status, std::string_view message, std::string_view code);

}  // namespace distllm::http
