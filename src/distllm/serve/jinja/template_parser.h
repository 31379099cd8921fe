// Statement parser: lexed segments become the node tree (if/elif/else, for,
// set, macro, ...), with every block checked for its end tag.
#pragma once

#include <string>
#include <vector>

#include "distllm/serve/jinja/ast.h"
#include "distllm/serve/jinja/lexer.h"

namespace distllm::serve::jinja {

// Throws distllm::Error naming `origin` and the line.
Body parse_template(std::vector<Segment> segments, const std::string& origin);

}  // namespace distllm::serve::jinja
