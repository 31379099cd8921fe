#include "distllm/serve/jinja/template_parser.h"

#include <set>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/serve/jinja/expr_parser.h"
#include "distllm/serve/jinja/nodes.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;
namespace {

class TemplateParser {
 public:
  TemplateParser(std::vector<Segment> segs, const std::string& origin) : segs_(std::move(segs)), origin_(origin) {}

  Body parse() {
    std::string ended;
    Body body = parse_body({}, &ended);
    return body;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw_error(strprintf("%s: line %d: %s", origin_.c_str(), line, msg.c_str()));
  }

  // Parses until one of `enders` (left unconsumed at i_) or the end of input.
  Body parse_body(const std::set<std::string>& enders, std::string* ended_by) {
    Body body;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == SegKind::kText) {
        auto n = std::make_unique<TextNode>();
        n->text = seg.text;
        n->line = seg.line;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (seg.kind == SegKind::kExpr) {
        ExprParser p(seg.toks, 0, origin_, seg.line);
        auto n = std::make_unique<OutputNode>();
        n->expr = p.expression();
        p.expect_end();
        n->line = seg.line;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      const Tok& kw = seg.toks[0];
      if (kw.kind != TokKind::kName) fail(seg.line, "expected a statement keyword, got '" + kw.text + "'");
      if (enders.count(kw.text)) {
        *ended_by = kw.text;
        return body;
      }
      ++i_;
      body.push_back(statement(seg));
    }
    if (!enders.empty()) {
      std::string list;
      for (const auto& e : enders) list += (list.empty() ? "" : " or ") + ("{% " + e + " %}");
      fail(segs_.empty() ? 1 : segs_.back().line, "unexpected end of template: expected " + list);
    }
    return body;
  }

  // Consumes the ender segment, checking it has no extra tokens.
  void end_tag(const char* name) {
    const Segment& seg = segs_[i_];
    if (seg.toks.size() != 1) fail(seg.line, strprintf("unexpected tokens after '%s'", name));
    ++i_;
  }

  std::unique_ptr<Node> statement(const Segment& seg) {
    const std::string& kw = seg.toks[0].text;
    ExprParser p(seg.toks, 1, origin_, seg.line);
    if (kw == "if") {
      auto n = std::make_unique<IfNode>();
      n->line = seg.line;
      ExprPtr cond = p.expression();
      p.expect_end();
      while (true) {
        std::string ended;
        Body b = parse_body({"elif", "else", "endif"}, &ended);
        n->branches.emplace_back(std::move(cond), std::move(b));
        const Segment& end = segs_[i_];
        if (ended == "endif") {
          end_tag("endif");
          return n;
        }
        ++i_;
        if (ended == "else") {
          if (end.toks.size() != 1) fail(end.line, "unexpected tokens after 'else'");
          Body eb = parse_body({"endif"}, &ended);
          n->branches.emplace_back(nullptr, std::move(eb));
          end_tag("endif");
          return n;
        }
        ExprParser ep(end.toks, 1, origin_, end.line);
        cond = ep.expression();
        ep.expect_end();
      }
    }
    if (kw == "for") {
      auto n = std::make_unique<ForNode>();
      n->line = seg.line;
      n->targets.push_back(p.expect_identifier("a loop variable"));
      while (p.accept_op(",")) n->targets.push_back(p.expect_identifier("a loop variable"));
      if (!p.accept_name("in")) p.fail("expected 'in' in for loop");
      n->iterable = p.or_expression();
      if (p.accept_name("if")) n->filter = p.expression();
      if (p.accept_name("recursive")) p.fail("recursive for loops are not supported");
      p.expect_end();
      std::string ended;
      n->body = parse_body({"else", "endfor"}, &ended);
      if (ended == "else") {
        end_tag("else");
        n->else_body = parse_body({"endfor"}, &ended);
      }
      end_tag("endfor");
      return n;
    }
    if (kw == "set") {
      auto n = std::make_unique<SetNode>();
      n->line = seg.line;
      n->targets.push_back(p.expect_identifier("a variable name"));
      if (p.accept_op(".")) {
        n->attr = p.expect_identifier("an attribute name");
      } else {
        while (p.accept_op(",")) n->targets.push_back(p.expect_identifier("a variable name"));
      }
      if (p.accept_op("=")) {
        n->value = p.expression();
        // `set a, b = x, y`: a tuple without parentheses.
        if (p.is_op(",")) {
          auto tup = std::make_unique<Expr>();
          tup->kind = Expr::kTuple;
          tup->line = seg.line;
          tup->args.push_back(std::move(n->value));
          while (p.accept_op(",")) tup->args.push_back(p.expression());
          n->value = std::move(tup);
        }
        p.expect_end();
        return n;
      }
      p.expect_end();
      if (!n->attr.empty() || n->targets.size() != 1) p.fail("a block set takes one variable name");
      std::string ended;
      n->body = parse_body({"endset"}, &ended);
      end_tag("endset");
      return n;
    }
    if (kw == "macro") {
      auto n = std::make_unique<MacroNode>();
      n->line = seg.line;
      n->macro = std::make_shared<TemplateMacro>();
      n->macro->name = p.expect_identifier("a macro name");
      p.expect_op("(");
      while (!p.is_op(")")) {
        n->macro->params.push_back(p.expect_identifier("a parameter name"));
        if (p.accept_op("=")) n->defaults.push_back(p.expression());
        else n->defaults.push_back(nullptr);
        if (!p.accept_op(",")) break;
      }
      p.expect_op(")");
      p.expect_end();
      std::string ended;
      n->body = parse_body({"endmacro"}, &ended);
      end_tag("endmacro");
      for (const auto& d : n->defaults) n->macro->defaults.push_back(d.get());
      n->macro->body = &n->body;
      return n;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      auto n = std::make_unique<FlowNode>();
      n->line = seg.line;
      n->flow = kw == "break" ? Ctx::Flow::kBreak : Ctx::Flow::kContinue;
      return n;
    }
    if (kw == "generation") {
      p.expect_end();
      auto n = std::make_unique<BlockNode>();
      n->line = seg.line;
      std::string ended;
      n->body = parse_body({"endgeneration"}, &ended);
      end_tag("endgeneration");
      return n;
    }
    static const std::set<std::string> kEnders = {"endif", "endfor", "endset", "endmacro", "elif", "else", "endgeneration"};
    if (kEnders.count(kw)) fail(seg.line, "unexpected '{% " + kw + " %}'");
    fail(seg.line, "unsupported statement '{% " + kw + " %}'");
  }

  std::vector<Segment> segs_;
  const std::string& origin_;
  size_t i_ = 0;
};

}  // namespace

Body parse_template(std::vector<Segment> segments, const std::string& origin) {
  return TemplateParser(std::move(segments), origin).parse();
}

}  // namespace distllm::serve::jinja
