#include "distllm/serve/structured/json_schema_to_grammar.h"

#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "distllm/serve/structured/ordered_json.h"
#include "distllm/serve/structured/regex_to_grammar.h"

namespace distllm::structured {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr int64_t kMaxMagnitude = 999999999999999;  // 15 digits: exact in a double

const std::set<std::string> kAnnotations = {"$schema", "$id", "$comment", "title", "description",
                                            "default", "examples", "deprecated", "readOnly",
                                            "writeOnly", "$defs", "definitions"};
const std::set<std::string> kSupported = {
    "type", "enum", "const", "anyOf", "oneOf", "$ref", "properties", "required",
    "additionalProperties", "items", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

Expr digits(int n) { return Expr::repeat(Expr::char_class({{'0', '9'}}), n, n); }

// Decimal strings of equal length between lo and hi (no sign, lo <= hi).
Expr same_length_range(const std::string& lo, const std::string& hi) {
  size_t n = lo.size();
  if (n == 0) return Expr::empty();
  if (lo == hi) return Expr::literal(lo);
  if (lo.find_first_not_of('0', 1) == std::string::npos && hi.find_first_not_of('9', 1) == std::string::npos)
    return Expr::seq({Expr::char_class({{static_cast<uint32_t>(lo[0]), static_cast<uint32_t>(hi[0])}}),
                      digits(static_cast<int>(n - 1))});
  std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  if (lo[0] == hi[0]) return Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(rest_lo, rest_hi)});
  std::vector<Expr> alts;
  alts.push_back(Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(rest_lo, std::string(n - 1, '9'))}));
  if (hi[0] - lo[0] > 1)
    alts.push_back(Expr::seq({Expr::char_class({{static_cast<uint32_t>(lo[0] + 1), static_cast<uint32_t>(hi[0] - 1)}}),
                              digits(static_cast<int>(n - 1))}));
  alts.push_back(Expr::seq({Expr::literal(hi.substr(0, 1)), same_length_range(std::string(n - 1, '0'), rest_hi)}));
  return Expr::alt(std::move(alts));
}

// Decimal integers in [a, b] without sign or leading zeros (0 <= a <= b).
Expr natural_range(int64_t a, int64_t b) {
  std::vector<Expr> alts;
  int64_t p = 1;  // 10^(len-1)
  for (int len = 1; len <= 16; ++len, p *= 10) {
    int64_t lo = std::max<int64_t>(a, len == 1 ? 0 : p);
    int64_t hi = std::min<int64_t>(b, p * 10 - 1);
    if (lo <= hi) alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  return Expr::alt(std::move(alts));
}

Expr integer_range(int64_t lo, int64_t hi) {
  std::vector<Expr> alts;
  if (lo < 0) alts.push_back(Expr::seq({Expr::literal("-"), natural_range(-std::min<int64_t>(hi, -1), -lo)}));
  if (hi >= 0) alts.push_back(natural_range(std::max<int64_t>(lo, 0), hi));
  return Expr::alt(std::move(alts));
}

Expr fraction() { return Expr::seq({Expr::literal("."), Expr::repeat(Expr::char_class({{'0', '9'}}), 1, 15)}); }

// Magnitudes in [a, b] written with an optional fraction: integer part in [a, b-1]
// with any fraction, or b itself with an all-zero fraction.
Expr magnitude_range(int64_t a, int64_t b) {
  Expr top = Expr::seq({Expr::literal(std::to_string(b)),
                        Expr::optional(Expr::seq({Expr::literal("."), Expr::repeat(Expr::literal("0"), 1, 15)}))});
  if (a == b) return top;
  return Expr::alt({Expr::seq({natural_range(a, b - 1), Expr::optional(fraction())}), top});
}

const char* kFormats[][2] = {
    {"date",
     "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))"},
    {"time", "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"},
    {"date-time",
     "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))"
     "T(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email",
     "[a-zA-Z0-9_+-]{1,20}(?:\\.[a-zA-Z0-9_+-]{1,20}){0,3}@[a-zA-Z0-9]{1,20}(?:-[a-zA-Z0-9]{1,20}){0,2}"
     "(?:\\.[a-zA-Z0-9]{1,20}(?:-[a-zA-Z0-9]{1,20}){0,2}){1,3}"},
    {"ipv4", "(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"},
};

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  Grammar run() {
    Expr top = visit(root_, 0);
    builder_.define("root", std::move(top));
    return builder_.build("root");
  }

  // root ::= one of the shared rules (e.g. "object" for json_object mode).
  Grammar run_with_root(const std::string& rule) {
    builder_.define("root", basic(rule));
    return builder_.build("root");
  }

  // The shared rules of plain JSON, defined on first use.
  Expr basic(const std::string& name) {
    // Mark before building: "value" and "object" refer to each other.
    if (basics_.insert(name).second) {
      if (name == "ws") {
        builder_.define(name, Expr::optional(Expr::literal(" ")));
      } else if (name == "char") {
        Expr hex = Expr::char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
        // \u escapes, minus surrogates (D800-DFFF) whose pairing would change lengths.
        Expr u = Expr::alt({Expr::seq({Expr::char_class({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                                       Expr::repeat(hex, 3, 3)}),
                            Expr::seq({Expr::char_class({{'d', 'd'}, {'D', 'D'}}), Expr::char_class({{'0', '7'}}),
                                       Expr::repeat(hex, 2, 2)})});
        builder_.define(name, Expr::alt({Expr::char_class({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true),
                                         Expr::seq({Expr::literal("\\"),
                                                    Expr::alt({Expr::char_class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'},
                                                                                 {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                                               Expr::seq({Expr::literal("u"), u})})})}));
      } else if (name == "string") {
        builder_.define(name, Expr::seq({Expr::literal("\""), Expr::star(basic("char")), Expr::literal("\"")}));
      } else if (name == "integer") {
        builder_.define(name, integer_range(-kMaxMagnitude, kMaxMagnitude));
      } else if (name == "number") {
        builder_.define(name, Expr::seq({basic("integer"), Expr::optional(fraction()),
                                         Expr::optional(Expr::seq({Expr::char_class({{'e', 'e'}, {'E', 'E'}}),
                                                                   Expr::optional(Expr::char_class({{'+', '+'}, {'-', '-'}})),
                                                                   Expr::repeat(Expr::char_class({{'0', '9'}}), 1, 2)}))}));
      } else if (name == "boolean") {
        builder_.define(name, Expr::alt({Expr::literal("true"), Expr::literal("false")}));
      } else if (name == "null") {
        builder_.define(name, Expr::literal("null"));
      } else if (name == "value") {
        builder_.define(name, Expr::alt({basic("object"), basic("array"), basic("string"), basic("number"),
                                         basic("boolean"), basic("null")}));
      } else if (name == "object") {
        Expr pair = Expr::seq({basic("string"), Expr::literal(":"), basic("ws"), basic("value")});
        builder_.define(name, Expr::seq({Expr::literal("{"),
                                         Expr::optional(Expr::seq({pair, Expr::star(Expr::seq({Expr::literal(","), basic("ws"), pair}))})),
                                         Expr::literal("}")}));
      } else if (name == "array") {
        builder_.define(name, Expr::seq({Expr::literal("["),
                                         Expr::optional(Expr::seq({basic("value"), Expr::star(Expr::seq({Expr::literal(","), basic("ws"), basic("value")}))})),
                                         Expr::literal("]")}));
      }
    }
    return Expr::ref(name);
  }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw GrammarError("JSON Schema: " + what); }

  std::string fresh(const std::string& hint) { return strprintf("%s-%d", hint.c_str(), counter_++); }

  Expr named(Expr e, const std::string& hint) {
    std::string name = fresh(hint);
    builder_.define(name, std::move(e));
    return Expr::ref(name);
  }

  static void check_keywords(const json& s) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kSupported.count(it.key()) && !kAnnotations.count(it.key()))
        fail("unsupported JSON Schema keyword '" + it.key() + "'");
    }
  }

  static void only_annotations_besides(const json& s, const std::string& keyword, const std::set<std::string>& allowed = {}) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != keyword && !kAnnotations.count(it.key()) && !allowed.count(it.key()))
        fail("keyword '" + it.key() + "' next to '" + keyword + "' is unsupported");
    }
  }

  static bool matches_type(const json& v, const std::string& t) {
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  std::vector<std::string> types(const json& s) {
    std::vector<std::string> out;
    if (!s.contains("type")) return out;
    const json& t = s["type"];
    if (t.is_string()) {
      out.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (auto& x : t) {
        if (!x.is_string()) fail("'type' entries must be strings");
        out.push_back(x.get<std::string>());
      }
    } else {
      fail("'type' must be a string or a non-empty array of strings");
    }
    for (auto& x : out) {
      if (x != "string" && x != "number" && x != "integer" && x != "boolean" && x != "null" && x != "object" && x != "array")
        fail("unknown type '" + x + "'");
    }
    return out;
  }

  Expr visit(const json& s, int depth) {
    if (depth > kMaxDepth) fail("schema nested too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("schema 'false' matches nothing");
      return basic("value");
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean");
    check_keywords(s);
    if (s.contains("$ref")) {
      only_annotations_besides(s, "$ref");
      return ref(s["$ref"], depth);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      std::string key = s.contains("anyOf") ? "anyOf" : "oneOf";
      only_annotations_besides(s, key);
      const json& list = s[key];
      if (!list.is_array() || list.empty()) fail("'" + key + "' must be a non-empty array");
      std::vector<Expr> alts;
      for (auto& sub : list) alts.push_back(visit(sub, depth + 1));
      return named(Expr::alt(std::move(alts)), "alt");
    }
    auto ts = types(s);
    if (s.contains("const") || s.contains("enum")) {
      std::string key = s.contains("const") ? "const" : "enum";
      only_annotations_besides(s, key, {"type"});
      std::vector<json> values;
      if (key == "const") {
        values.push_back(s["const"]);
      } else {
        if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' must be a non-empty array");
        for (auto& v : s["enum"]) values.push_back(v);
      }
      std::vector<Expr> alts;
      for (auto& v : values) {
        bool ok = ts.empty();
        for (auto& t : ts) ok = ok || matches_type(v, t);
        if (ok) alts.push_back(Expr::literal(v.dump()));
      }
      if (alts.empty()) fail("no '" + key + "' value has the schema's type");
      return Expr::alt(std::move(alts));
    }
    if (ts.empty()) {
      // No type: infer it from the keywords present, else any value.
      for (auto* k : {"properties", "required", "additionalProperties"})
        if (s.contains(k)) ts.push_back("object");
      for (auto* k : {"items", "minItems", "maxItems"})
        if (s.contains(k) && ts.empty()) ts.push_back("array");
      for (auto* k : {"minLength", "maxLength", "pattern", "format"})
        if (s.contains(k) && ts.empty()) ts.push_back("string");
      for (auto* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(k) && ts.empty()) ts.push_back("number");
      if (ts.empty()) return basic("value");
    }
    std::vector<Expr> alts;
    for (auto& t : ts) {
      if (t == "string") alts.push_back(string_schema(s));
      else if (t == "integer") alts.push_back(numeric_schema(s, true));
      else if (t == "number") alts.push_back(numeric_schema(s, false));
      else if (t == "boolean") alts.push_back(basic("boolean"));
      else if (t == "null") alts.push_back(basic("null"));
      else if (t == "object") alts.push_back(object_schema(s, depth));
      else if (t == "array") alts.push_back(array_schema(s, depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr ref(const json& r, int depth) {
    if (!r.is_string()) fail("'$ref' must be a string");
    std::string path = r.get<std::string>();
    auto it = refs_.find(path);
    if (it != refs_.end()) return Expr::ref(it->second);
    const json* target = nullptr;
    if (path == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        std::string p = prefix;
        if (path.compare(0, p.size(), p) == 0) {
          std::string section = p.substr(2, p.size() - 3);
          std::string name = path.substr(p.size());
          target = definition(section, name);
        }
      }
    }
    if (!target) fail("unsupported or unresolvable '$ref' \"" + path + "\" (only #, #/$defs/NAME and #/definitions/NAME)");
    std::string name = fresh("ref");
    refs_[path] = name;
    builder_.define(name, visit(*target, depth + 1));
    return Expr::ref(name);
  }

  // root_[section][name], or null. Indexed on first use: an ordered_json object is
  // searched linearly, and a schema may hold thousands of definitions and refs.
  const json* definition(const std::string& section, const std::string& name) {
    auto [it, fresh_section] = definitions_.try_emplace(section);
    if (fresh_section && root_.is_object() && root_.contains(section) && root_[section].is_object()) {
      for (auto d = root_[section].begin(); d != root_[section].end(); ++d) it->second.emplace(d.key(), &d.value());
    }
    auto d = it->second.find(name);
    return d == it->second.end() ? nullptr : d->second;
  }

  static int count_keyword(const json& s, const char* key, int fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(std::string("'") + key + "' must be a non-negative integer");
    int64_t n = v.get<int64_t>();
    if (n > kMaxRepeat) fail(strprintf("'%s' over the supported limit of %d", key, kMaxRepeat));
    return static_cast<int>(n);
  }

  Expr string_schema(const json& s) {
    Expr q = Expr::literal("\"");
    if (s.contains("format")) {
      for (auto* k : {"minLength", "maxLength", "pattern"})
        if (s.contains(k)) fail(std::string("'format' together with '") + k + "' is unsupported");
      if (!s["format"].is_string()) fail("'format' must be a string");
      std::string f = s["format"].get<std::string>();
      for (auto& entry : kFormats) {
        if (f == entry[0]) return named(Expr::seq({q, regex_to_expr(entry[1], {true}).expr, q}), "format");
      }
      fail("unsupported JSON Schema format '" + f + "'");
    }
    if (s.contains("pattern")) {
      for (auto* k : {"minLength", "maxLength"})
        if (s.contains(k)) fail(std::string("'pattern' together with '") + k + "' is unsupported");
      if (!s["pattern"].is_string()) fail("'pattern' must be a string");
      RegexExpr r;
      try {
        r = regex_to_expr(s["pattern"].get<std::string>(), {true});
      } catch (const GrammarError& e) {
        fail(std::string("'pattern': ") + e.what());
      }
      std::vector<Expr> items{q};
      if (!r.anchored_start) items.push_back(Expr::star(basic("char")));
      items.push_back(std::move(r.expr));
      if (!r.anchored_end) items.push_back(Expr::star(basic("char")));
      items.push_back(q);
      return named(Expr::seq(std::move(items)), "pattern");
    }
    int min = count_keyword(s, "minLength", 0);
    int max = count_keyword(s, "maxLength", -1);
    if (min == 0 && max < 0) return basic("string");
    if (max >= 0 && max < min) fail("'maxLength' is below 'minLength'");
    return named(Expr::seq({q, Expr::repeat(basic("char"), min, max), q}), "string");
  }

  static double bound(const json& s, const char* key) {
    const json& v = s[key];
    if (!v.is_number()) fail(std::string("'") + key + "' must be a number");
    return v.get<double>();
  }

  Expr numeric_schema(const json& s, bool integer) {
    bool bounded = false;
    double lo = -static_cast<double>(kMaxMagnitude), hi = static_cast<double>(kMaxMagnitude);
    if (s.contains("minimum")) lo = std::max(lo, std::ceil(bound(s, "minimum"))), bounded = true;
    if (s.contains("maximum")) hi = std::min(hi, std::floor(bound(s, "maximum"))), bounded = true;
    if (s.contains("exclusiveMinimum")) lo = std::max(lo, std::floor(bound(s, "exclusiveMinimum")) + 1), bounded = true;
    if (s.contains("exclusiveMaximum")) hi = std::min(hi, std::ceil(bound(s, "exclusiveMaximum")) - 1), bounded = true;
    if (!bounded) return basic(integer ? "integer" : "number");
    lo = std::max(lo, -static_cast<double>(kMaxMagnitude));
    hi = std::min(hi, static_cast<double>(kMaxMagnitude));
    if (lo > hi) fail(integer ? "no integer lies between the minimum and the maximum"
                              : "no number lies between the minimum and the maximum (bounds are rounded to integers)");
    int64_t a = static_cast<int64_t>(lo), b = static_cast<int64_t>(hi);
    if (integer) return named(integer_range(a, b), "integer");
    std::vector<Expr> alts;
    if (a < 0) alts.push_back(Expr::seq({Expr::literal("-"), magnitude_range(std::max<int64_t>(0, -b), -a)}));
    if (b >= 0) alts.push_back(magnitude_range(std::max<int64_t>(a, 0), b));
    return named(Expr::alt(std::move(alts)), "number");
  }

  Expr object_schema(const json& s, int depth) {
    Expr open = Expr::literal("{"), close = Expr::literal("}");
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) fail("'properties' must be an object");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("'required' must be an array of strings");
      for (auto& r : s["required"]) {
        if (!r.is_string()) fail("'required' must be an array of strings");
        required.push_back(r.get<std::string>());
      }
    }
    struct Prop {
      std::string name;
      const json* schema;
      bool required;
    };
    std::vector<Prop> list;
    static const json any = true;
    // Sets, not lookups in the lists: an ordered_json object is searched linearly.
    const std::set<std::string> required_set(required.begin(), required.end());
    std::set<std::string> prop_names;
    for (auto it = props.begin(); it != props.end(); ++it) {
      list.push_back({it.key(), &it.value(), required_set.count(it.key()) > 0});
      prop_names.insert(it.key());
    }
    for (auto& r : required) {
      if (!prop_names.count(r)) list.push_back({r, &any, true});
    }
    if (list.empty()) {
      if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
        Expr value = visit(s["additionalProperties"], depth + 1);
        Expr pair = named(Expr::seq({basic("string"), Expr::literal(":"), basic("ws"), value}), "entry");
        return named(Expr::seq({open, Expr::optional(Expr::seq({pair, Expr::star(Expr::seq({Expr::literal(","), basic("ws"), pair}))})), close}),
                     "map");
      }
      // No properties at all: any object, unless additional ones are forbidden.
      if (s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
          !s["additionalProperties"].get<bool>())
        return Expr::literal("{}");
      return basic("object");
    }
    // after[i]: properties i.. when something was written before (each preceded by
    // ","); first[i]: properties i.. when nothing was written yet.
    size_t n = list.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    std::string base = fresh("obj");
    for (size_t i = 0; i <= n; ++i) {
      after[i] = strprintf("%s-after%zu", base.c_str(), i);
      first[i] = strprintf("%s-first%zu", base.c_str(), i);
    }
    builder_.define(after[n], Expr::empty());
    builder_.define(first[n], Expr::empty());
    for (size_t i = n; i-- > 0;) {
      Expr value = visit(*list[i].schema, depth + 1);
      Expr kv = named(Expr::seq({Expr::literal(json(list[i].name).dump()), Expr::literal(":"), basic("ws"), value}), "prop");
      Expr with_comma = Expr::seq({Expr::literal(","), basic("ws"), kv, Expr::ref(after[i + 1])});
      Expr lead = Expr::seq({kv, Expr::ref(after[i + 1])});
      if (list[i].required) {
        builder_.define(after[i], std::move(with_comma));
        builder_.define(first[i], std::move(lead));
      } else {
        builder_.define(after[i], Expr::alt({std::move(with_comma), Expr::ref(after[i + 1])}));
        builder_.define(first[i], Expr::alt({std::move(lead), Expr::ref(first[i + 1])}));
      }
    }
    return named(Expr::seq({open, Expr::ref(first[0]), close}), "object");
  }

  Expr array_schema(const json& s, int depth) {
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
      fail("unsupported JSON Schema keyword 'uniqueItems' (only false)");
    if (s.contains("items") && s["items"].is_array()) fail("'items' as an array (tuple validation) is unsupported");
    int min = count_keyword(s, "minItems", 0);
    int max = count_keyword(s, "maxItems", -1);
    if (max >= 0 && max < min) fail("'maxItems' is below 'minItems'");
    if (max == 0) return Expr::literal("[]");
    Expr item = s.contains("items") ? visit(s["items"], depth + 1) : basic("value");
    item = named(std::move(item), "item");
    Expr more = Expr::seq({Expr::literal(","), basic("ws"), item});
    Expr body;
    if (min == 0)
      body = Expr::optional(Expr::seq({item, Expr::repeat(more, 0, max < 0 ? -1 : max - 1)}));
    else
      body = Expr::seq({item, Expr::repeat(more, min - 1, max < 0 ? -1 : max - 1)});
    return named(Expr::seq({Expr::literal("["), std::move(body), Expr::literal("]")}), "array");
  }

  const json& root_;
  GrammarBuilder builder_;
  std::map<std::string, std::string> refs_;
  std::map<std::string, std::unordered_map<std::string, const json*>> definitions_;
  std::set<std::string> basics_;
  int counter_ = 0;
};

}  // namespace

Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

Grammar json_schema_to_grammar(std::string_view schema_text) {
  json schema;
  try {
    schema = parse_ordered_json(schema_text);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(std::string("JSON Schema is not valid JSON: ") + e.what());
  }
  return json_schema_to_grammar(schema);
}

Grammar json_object_grammar() {
  static const json kAny = json::object();
  return Converter(kAny).run_with_root("object");
}

Grammar choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) throw GrammarError("guided_choice must list at least one string");
  std::vector<Expr> alts;
  for (auto& c : choices) alts.push_back(Expr::literal(c));
  GrammarBuilder b;
  b.define("root", Expr::alt(std::move(alts)));
  return b.build("root");
}

}  // namespace distllm::structured
