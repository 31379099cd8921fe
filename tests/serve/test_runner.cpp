#include "serve/test_runner.h"

#include <chrono>
#include <thread>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"

namespace distllm::serve::testing {

TestRunner::TestRunner(TestRunnerOptions options) : options_(options), delay_ms_(options.step_delay_ms) {}

void TestRunner::allocate_kv(int num_blocks, int block_size) {
  DL_CHECK(slots_.empty(), "test runner: allocate_kv called twice");
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  slots_.assign(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size), Slot{});
}

uint64_t TestRunner::value_at(int32_t token, int32_t pos, uint64_t digest) {
  return mix64(digest ^ mix64((static_cast<uint64_t>(static_cast<uint32_t>(token)) << 32) | static_cast<uint32_t>(pos)));
}

void TestRunner::logits_for(uint64_t value, int32_t copy_token, float* out) const {
  for (int t = 0; t < options_.vocab_size; ++t) {
    float u = static_cast<float>(mix64(value ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1))) >> 40) / 16777216.0f;
    // Printable ASCII is likelier, so greedy text is readable; other bytes still
    // occur when sampling (exercising the UTF-8 handling).
    out[t] = (t >= 32 && t < 127) ? 4.0f * u : 4.0f * u - 6.0f;
  }
  if (options_.eos_token >= 0 && options_.eos_token < options_.vocab_size) {
    bool eos = options_.eos_permille > 0 && static_cast<int>(mix64(value) % 1000) < options_.eos_permille;
    out[options_.eos_token] = eos ? 10.0f : -20.0f;
  }
  if (options_.copy_period > 0 && copy_token >= 0 &&
      static_cast<int>((mix64(value) >> 20) % 1000) >= options_.copy_break_permille) {
    out[copy_token] += 8.0f;
  }
}

void TestRunner::execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) {
  DL_CHECK(!slots_.empty(), "test runner: execute before allocate_kv");
  if (int ms = delay_ms_.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  size_t need = 0;
  for (const auto& c : batch) {
    DL_CHECK(c.request_id != fail_id_.load(), "test runner: injected failure for request %llu",
             static_cast<unsigned long long>(c.request_id));
    DL_CHECK(c.num_logits >= 0 && c.num_logits <= static_cast<int>(c.tokens.size()),
             "test runner: request %llu asks for %d logits rows of a %zu-token chunk",
             static_cast<unsigned long long>(c.request_id), c.num_logits, c.tokens.size());
    need += static_cast<size_t>(c.num_logits);
  }
  logits.assign(need * static_cast<size_t>(options_.vocab_size), 0.0f);
  size_t row = 0;
  for (const auto& c : batch) {
    DL_CHECK(!c.tokens.empty(), "test runner: empty chunk for request %llu", static_cast<unsigned long long>(c.request_id));
    int32_t end = c.start_pos + static_cast<int32_t>(c.tokens.size());
    DL_CHECK(end <= options_.max_context, "test runner: position %d past max context", end);
    DL_CHECK(static_cast<int64_t>(c.block_table.size()) * block_size_ >= end,
             "test runner: block table of request %llu covers %zu blocks, needs positions up to %d",
             static_cast<unsigned long long>(c.request_id), c.block_table.size(), end);
    auto slot_of = [&](int32_t pos) -> Slot& {
      int32_t block = c.block_table[static_cast<size_t>(pos / block_size_)];
      DL_CHECK(block >= 0 && block < num_blocks_, "test runner: block id %d out of range", block);
      return slots_[static_cast<size_t>(block) * block_size_ + static_cast<size_t>(pos % block_size_)];
    };
    const int32_t n = static_cast<int32_t>(c.tokens.size());
    for (int32_t i = 0; i < static_cast<int32_t>(c.tokens.size()); ++i) {
      int32_t pos = c.start_pos + i;
      uint64_t digest = 0x1234;
      for (int32_t q = 0; q < pos; ++q) {
        const Slot& s = slot_of(q);
        DL_CHECK(s.pos == q, "test runner: request %llu position %d reads a slot holding position %d",
                 static_cast<unsigned long long>(c.request_id), q, s.pos);
        digest = mix64(digest ^ s.value);
      }
      Slot& own = slot_of(pos);
      own.pos = pos;
      own.token = c.tokens[static_cast<size_t>(i)];
      own.value = value_at(own.token, pos, digest);
      if (i >= n - c.num_logits) {
        int32_t copy_token = -1;
        const int32_t src = pos + 1 - options_.copy_period;
        if (options_.copy_period > 0 && src >= 0) {
          const Slot& s = slot_of(src);
          DL_CHECK(s.pos == src, "test runner: request %llu position %d reads a slot holding position %d",
                   static_cast<unsigned long long>(c.request_id), src, s.pos);
          copy_token = s.token;
        }
        logits_for(own.value, copy_token, logits.data() + row++ * static_cast<size_t>(options_.vocab_size));
      }
    }
  }
  steps_++;
  int seqs = static_cast<int>(batch.size());
  if (seqs > max_batch_.load()) max_batch_ = seqs;
  if (record_) {
    std::lock_guard<std::mutex> lock(record_mu_);
    batches_.push_back(batch);
  }
}

std::vector<std::vector<SequenceChunk>> TestRunner::recorded() {
  std::lock_guard<std::mutex> lock(record_mu_);
  return batches_;
}

std::vector<float> TestRunner::reference_logits(const std::vector<int32_t>& tokens) const {
  std::vector<uint64_t> values;
  for (size_t p = 0; p < tokens.size(); ++p) {
    uint64_t digest = 0x1234;
    for (size_t q = 0; q < p; ++q) digest = mix64(digest ^ values[q]);
    values.push_back(value_at(tokens[p], static_cast<int32_t>(p), digest));
  }
  std::vector<float> out(static_cast<size_t>(options_.vocab_size));
  const int64_t src = static_cast<int64_t>(tokens.size()) - options_.copy_period;
  const int32_t copy_token = options_.copy_period > 0 && src >= 0 ? tokens[static_cast<size_t>(src)] : -1;
  logits_for(values.back(), copy_token, out.data());
  return out;
}

std::vector<int32_t> TestRunner::reference_greedy(const std::vector<int32_t>& prompt, int num_tokens) const {
  std::vector<int32_t> tokens = prompt, out;
  for (int i = 0; i < num_tokens; ++i) {
    std::vector<float> l = reference_logits(tokens);
    int32_t best = 0;
    for (int32_t t = 1; t < static_cast<int32_t>(l.size()); ++t)
      if (l[static_cast<size_t>(t)] > l[static_cast<size_t>(best)]) best = t;
    out.push_back(best);
    tokens.push_back(best);
  }
  return out;
}

}  // namespace distllm::serve::testing
