#include "distllm/serve/structured/ordered_json.h"

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distllm::structured {
namespace {

using Json = nlohmann::ordered_json;

// nlohmann's SAX interface, building the DOM. Pointers on the stack stay valid: a
// container only grows while it is the innermost open one.
class OrderedDomBuilder {
 public:
  Json take() { return std::move(root_); }

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return put(Json(v)); }
  bool string(Json::string_t& v) { return put(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    open_.push_back(put_container(Json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(Json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    open_.push_back(put_container(Json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    throw e;
  }

 private:
  bool put(Json v) {
    put_container(std::move(v));
    return true;
  }
  // Places `v` in the innermost open container (or as the root); returns where.
  Json* put_container(Json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& top = *open_.back();
    if (top.is_array()) {
      auto& a = top.get_ref<Json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    auto& object = top.get_ref<Json::object_t&>();  // a vector of (key, value)
    auto [at, fresh] = keys_.back().try_emplace(key_, object.size());
    if (!fresh) {
      Json& slot = (object.begin() + static_cast<std::ptrdiff_t>(at->second))->second;
      slot = std::move(v);
      return &slot;
    }
    object.emplace_back(std::move(key_), std::move(v));  // the vector's own: no search
    return &object.back().second;
  }

  Json root_;
  std::vector<Json*> open_;
  std::vector<std::unordered_map<std::string, size_t>> keys_;  // per open object: key -> index
  std::string key_;
};

}  // namespace

nlohmann::ordered_json parse_ordered_json(std::string_view text) {
  OrderedDomBuilder builder;
  Json::sax_parse(text, &builder);
  return builder.take();
}

}  // namespace distllm::structured
