#include "distllm/serve/jinja/lexer.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm::serve::jinja {
namespace {

class TemplateLexer {
 public:
  TemplateLexer(const std::string& src, const std::string& origin) : src_(src), origin_(origin) {}

  std::vector<Segment> run() {
    std::vector<Segment> segs;
    size_t pos = 0;
    bool strip_next = false;  // previous tag ended with '-'
    bool trim_next = false;   // previous tag was a block or comment (trim_blocks)
    while (pos <= src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      } else if (trim_next) {
        if (text.compare(0, 1, "\n") == 0) text.erase(0, 1);
        else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
      }
      const int text_line = line_;
      count_lines(pos, tag == std::string::npos ? src_.size() : tag);
      if (tag == std::string::npos) {
        if (!text.empty()) segs.push_back({SegKind::kText, text, {}, text_line});
        break;
      }
      const char kind = src_[tag + 1];
      const char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {
        // lstrip_blocks: spaces and tabs between the line start and a block tag go.
        // Judged on the source, since trim_blocks may have eaten the newline.
        size_t k = tag;
        while (k > pos && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
        bool line_start = k == 0 || src_[k - 1] == '\n';
        if (line_start) text.erase(text.size() - std::min(text.size(), tag - k));
      }
      if (!text.empty()) segs.push_back({SegKind::kText, text, {}, text_line});
      size_t body = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", body);
        if (end == std::string::npos) fail(line_, "unterminated comment {# ... #}");
        strip_next = src_[end - 1] == '-' && end - 1 >= body;
        trim_next = true;
        count_lines(tag, end + 2);
        pos = end + 2;
        continue;
      }
      Segment seg{kind == '{' ? SegKind::kExpr : SegKind::kStmt, "", {}, line_};
      pos = body;
      strip_next = lex_code(pos, kind == '{' ? "}}" : "%}", seg.toks);
      trim_next = kind == '%';
      if (seg.toks.empty()) fail(seg.line, kind == '{' ? "empty expression {{ }}" : "empty statement {% %}");
      segs.push_back(std::move(seg));
    }
    return segs;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw_error(strprintf("%s: line %d: %s", origin_.c_str(), line, msg.c_str()));
  }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n' ? 1 : 0;
  }

  // Lexes tokens up to `closer` ("}}" or "%}"); returns whether it was "-}}"/"-%}".
  bool lex_code(size_t& p, const char* closer, std::vector<Tok>& out) {
    const size_t n = src_.size();
    while (true) {
      while (p < n && is_space(src_[p])) line_ += src_[p++] == '\n' ? 1 : 0;
      if (p >= n) fail(line_, strprintf("unterminated tag: missing '%s'", closer));
      if (src_[p] == '-' && src_.compare(p + 1, 2, closer) == 0) {
        p += 3;
        return true;
      }
      if (src_.compare(p, 2, closer) == 0) {
        p += 2;
        return false;
      }
      char c = src_[p];
      Tok t;
      t.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        t.kind = TokKind::kName;
        t.text = src_.substr(s, p - s);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t s = p;
        while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            is_float = true;
            p = q;
            while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string digits;
        for (size_t k = s; k < p; ++k)
          if (src_[k] != '_') digits += src_[k];
        t.text = digits;
        if (is_float) {
          t.kind = TokKind::kFloat;
          t.f = std::strtod(digits.c_str(), nullptr);
        } else {
          t.kind = TokKind::kInt;
          errno = 0;
          t.i = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) fail(line_, "integer literal out of range: " + digits);
        }
      } else if (c == '\'' || c == '"') {
        t.kind = TokKind::kString;
        ++p;
        while (true) {
          if (p >= n) fail(t.line, "unterminated string literal");
          char d = src_[p++];
          if (d == c) break;
          if (d == '\n') ++line_;
          if (d != '\\') {
            t.text += d;
            continue;
          }
          if (p >= n) fail(t.line, "unterminated string literal");
          char e = src_[p++];
          switch (e) {
            case 'n': t.text += '\n'; break;
            case 't': t.text += '\t'; break;
            case 'r': t.text += '\r'; break;
            case '\\': t.text += '\\'; break;
            case '\'': t.text += '\''; break;
            case '"': t.text += '"'; break;
            case '0': t.text += '\0'; break;
            case '\n': ++line_; break;  // line continuation
            case 'u':
            case 'x': {
              size_t len = e == 'u' ? 4 : 2;
              if (p + len > n) fail(t.line, "bad escape in string literal");
              std::string hex = src_.substr(p, len);
              if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
                fail(t.line, "bad escape in string literal");
              utf8_append(t.text, static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
              p += len;
              break;
            }
            default:  // Python keeps unknown escapes as written
              t.text += '\\';
              t.text += e;
          }
        }
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        t.kind = TokKind::kOp;
        for (const char* op : kOps2) {
          if (src_.compare(p, 2, op) == 0) {
            t.text = op;
            break;
          }
        }
        if (t.text.empty()) {
          if (std::string("+-*/%~<>()[]{}.,:|=").find(c) == std::string::npos)
            fail(line_, strprintf("unexpected character '%c'", c));
          t.text = std::string(1, c);
        }
        p += t.text.size();
      }
      out.push_back(std::move(t));
    }
  }

  const std::string& src_;
  const std::string& origin_;
  int line_ = 1;
};

}  // namespace

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::vector<Segment> lex_template(const std::string& source, const std::string& origin) {
  return TemplateLexer(source, origin).run();
}

}  // namespace distllm::serve::jinja
