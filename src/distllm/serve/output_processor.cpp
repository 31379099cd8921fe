#include "distllm/serve/output_processor.h"

#include <algorithm>

namespace distllm::serve {

void OutputProcessor::init_request(EngineRequest& r) const {
  r.detok = std::make_unique<Detokenizer>(codec_.stream_decoder(), r.req.stop, r.req.include_stop_str_in_output);
  if (r.req.min_tokens > 0) {
    r.detok->set_stops_armed(false);
    if (!r.req.ignore_eos && codec_.eos_token_id() >= 0) r.min_tokens_suppressed.push_back(codec_.eos_token_id());
    for (int32_t t : r.req.stop_token_ids) r.min_tokens_suppressed.push_back(t);
  }
}

OutputProcessor::TokenOutput OutputProcessor::append_token(EngineRequest& r, const SampleResult& sample, double now) {
  const int32_t token = sample.token;
  const int64_t generated_before = r.seq.num_generated();
  r.seq.tokens.push_back(token);
  metrics_.add_generation_tokens(1);
  if (generated_before == 0) {
    metrics_.observe_ttft(now - r.arrival);
    metrics_.add_prompt_tokens(r.seq.num_prompt_tokens);
  } else {
    metrics_.observe_itl(now - r.last_token);
  }
  r.last_token = now;

  TokenOutput out;
  OutputDelta& d = out.delta;
  d.index = r.index;
  d.token_ids.push_back(token);
  FinishReason reason = FinishReason::kNone;
  const auto& stop_ids = r.req.stop_token_ids;
  const bool is_eos = !r.req.ignore_eos && token == codec_.eos_token_id();
  const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
  // Structured output: the grammar follows every token; once only EOS could
  // follow, the output is complete.
  bool grammar_complete = false;
  if (r.grammar) {
    if (!r.grammar->accept(token)) {
      out.finish = FinishReason::kError;
      out.error = "internal error: a sampled token does not fit the request's grammar";
      out.delta = OutputDelta{};  // the token is not part of the output
      return out;
    }
    grammar_complete = r.grammar->complete();
  }
  // A stop token's text is not part of the output, except a stop_token_ids token
  // with include_stop_str_in_output (as vLLM does it; EOS never has text).
  if (is_eos || (is_stop_id && !r.req.include_stop_str_in_output)) {
    reason = FinishReason::kStop;
  } else {
    if (r.seq.num_generated() >= r.req.min_tokens) r.detok->set_stops_armed(true);
    Detokenizer::Output o = r.detok->push(token);
    d.text = std::move(o.text);
    if (sample.has_logprobs) d.logprobs.push_back(sample.logprobs);
    if (o.stopped || is_stop_id) reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone && grammar_complete) reason = FinishReason::kStop;
  if (reason == FinishReason::kNone &&
      (r.seq.num_generated() >= r.req.max_tokens || static_cast<int64_t>(r.seq.tokens.size()) >= max_model_len_)) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) {
    Detokenizer::Output tail = r.detok->finish();  // text held back for a stop string that never came
    d.text += tail.text;
    if (tail.stopped) reason = FinishReason::kStop;
  }
  out.finish = reason;
  return out;
}

OutputDelta OutputProcessor::final_delta(const EngineRequest& r, FinishReason reason, const std::string& error,
                                         OutputDelta* last, double now) {
  OutputDelta d;
  if (last) d = std::move(*last);  // the final token and the finish travel together
  d.index = r.index;
  d.finish = reason;
  d.error = error;
  d.prompt_tokens = r.seq.num_prompt_tokens;
  d.completion_tokens = static_cast<int>(r.seq.num_generated());
  d.cached_tokens = r.cached_tokens;
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kLength:
      metrics_.observe_e2e(now - r.arrival);
      metrics_.count_finished(reason == FinishReason::kStop ? ServeMetrics::Finish::kStop : ServeMetrics::Finish::kLength);
      break;
    case FinishReason::kAbort: metrics_.count_finished(ServeMetrics::Finish::kAborted); break;
    case FinishReason::kError: metrics_.count_finished(ServeMetrics::Finish::kFailed); break;
    case FinishReason::kNone: DL_ASSERT(false);
  }
  return d;
}

}  // namespace distllm::serve
