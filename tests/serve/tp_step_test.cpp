// The step message of tensor-parallel serving (serve/tp_step.h): what rank 0 encodes
// the other ranks decode to the same chunks; a damaged message is refused.
#include <gtest/gtest.h>

#include "distllm/base/error.h"
#include "distllm/serve/tp_step.h"

namespace distllm::serve {
namespace {

TEST(TpStep, RoundTripsEveryField) {
  std::vector<SequenceChunk> batch(3);
  batch[0].request_id = 7, batch[0].tokens = {1, 2, 3}, batch[0].start_pos = 0, batch[0].block_table = {4};
  batch[0].num_logits = 1;
  batch[1].tokens = {9}, batch[1].start_pos = 40, batch[1].block_table = {0, 5, 6}, batch[1].num_logits = 1;
  batch[2].tokens = {8, 8, 8, 8, 8}, batch[2].start_pos = 16, batch[2].block_table = {2, 3}, batch[2].num_logits = 0;
  std::vector<SequenceChunk> got = decode_tp_step(encode_tp_step(batch));
  ASSERT_EQ(got.size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(got[i].tokens, batch[i].tokens);
    EXPECT_EQ(got[i].start_pos, batch[i].start_pos);
    EXPECT_EQ(got[i].block_table, batch[i].block_table);
    EXPECT_EQ(got[i].num_logits, batch[i].num_logits);
  }
  EXPECT_TRUE(decode_tp_step(encode_tp_step({})).empty());
}

TEST(TpStep, RefusesDamagedMessages) {
  std::vector<SequenceChunk> batch(1);
  batch[0].tokens = {1, 2}, batch[0].block_table = {0}, batch[0].num_logits = 1;
  std::vector<int32_t> words = encode_tp_step(batch);
  std::vector<int32_t> truncated(words.begin(), words.end() - 1), longer = words, negative = words;
  longer.push_back(0);
  negative[1] = -1;  // the first chunk's token count
  EXPECT_THROW(decode_tp_step(truncated), Error);
  EXPECT_THROW(decode_tp_step(longer), Error);
  EXPECT_THROW(decode_tp_step(negative), Error);
  EXPECT_THROW(decode_tp_step(std::vector<int32_t>{}), Error);
}

}  // namespace
}  // namespace distllm::serve
