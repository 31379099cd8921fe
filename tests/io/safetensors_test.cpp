#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/io/safetensors.h"

namespace distllm {
namespace {

std::string image(const std::string& header, const std::string& data, std::optional<uint64_t> header_len = {}) {
  uint64_t n = header_len.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    SafetensorsFile::parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, WriterOutputIsPaddedAlignedAndReadsBack) {
  char tmpl[] = "/tmp/distllm_st_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/a.safetensors";
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  std::vector<uint8_t> u = {1, 2, 3, 4, 5};
  std::vector<int64_t> l = {-7, 1ll << 40};
  std::vector<float> h = {0.5f, 65504.0f, -1e-5f, 3.14159f};
  SafetensorsWriter w;
  w.add("bytes", DType::kU8, {5}, u.data());
  w.add_f32("floats", {3}, f.data());
  w.add("longs", DType::kI64, {2}, l.data());
  w.add_converted("half", DType::kF16, {2, 2}, h.data());
  w.add_converted("brain", DType::kBF16, {4}, h.data());
  float scalar = 42.0f;
  w.add_f32("scalar", {}, &scalar);
  w.set_metadata("format", "pt");
  w.write(path);
  std::string head = w.header();
  EXPECT_EQ(head.size() % 8, 0u);
  EXPECT_EQ(head.back(), ' ');  // padded with spaces

  auto st = SafetensorsFile::open(path);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.read_f32("floats"), f);
  EXPECT_EQ(st.read_f32("bytes"), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(st.read_f32("longs")[1], static_cast<float>(1ll << 40));
  auto half = st.read_f32("half");
  EXPECT_EQ(half[1], 65504.0f);
  EXPECT_NEAR(half[3], 3.14159f, 2e-3);
  auto brain = st.read_f32("brain");
  EXPECT_NEAR(brain[3], 3.14159f, 2e-2);
  EXPECT_EQ(st.get("scalar").shape.size(), 0u);
  EXPECT_EQ(st.read_f32("scalar")[0], 42.0f);
  // Every tensor starts aligned to its element size in the file.
  for (const auto& t : st.tensors()) EXPECT_EQ((head.size() + t.begin) % dtype_size(t.dtype), 0u) << t.name;
  EXPECT_EQ(st.find("nope"), nullptr);
  std::filesystem::remove_all(tmpl);
}

TEST(Safetensors, F16AndBF16ConversionsAreExact) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 1e-8f, 70000.0f}) {
    float back = f16_to_f32(f32_to_f16(v));
    if (std::fabs(v) > 65520.0f) {
      EXPECT_TRUE(std::isinf(back));
    } else if (std::fabs(v) < 2.98e-8f) {
      EXPECT_EQ(back, 0.0f);
    } else {
      EXPECT_NEAR(back, v, std::fabs(v) * 1e-3 + 6e-8) << v;
    }
  }
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {  // every f16 value round-trips exactly
    float f = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), bits);
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Safetensors, MalformedFilesGetExactErrors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(parse_error(image(ok, std::string(8, 'x'))), "");
  EXPECT_EQ(parse_error("1234"), "t.safetensors: truncated file: 4 bytes, need at least 8 for the header length");
  EXPECT_EQ(parse_error(image(ok, "", 1ull << 62)), "t.safetensors: header length 4611686018427387904 exceeds the 100 MB limit");
  EXPECT_EQ(parse_error(image(ok, "", 1ull << 63)),
            "t.safetensors: header length 9223372036854775808 exceeds the 100 MB limit");
  EXPECT_EQ(parse_error(image(ok, "", 500)),
            "t.safetensors: truncated file: header length 500 but only " + std::to_string(ok.size()) + " bytes follow");
  EXPECT_EQ(parse_error(image("[1,2]   ", "")), "t.safetensors: header must start with '{'");
  EXPECT_NE(parse_error(image("{\"a\":\xff}", "")).find("t.safetensors: header is not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error(image("{\"\xc3\x28\":1}", "")).find("header is not valid JSON"), std::string::npos);
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              std::string(8, 'x'))),
            "t.safetensors: duplicate tensor name 'a' in header");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': unsupported dtype 'F33'");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': 8 bytes for dtype F32 and shape of 3 elements, expected 12");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': 8 bytes for dtype F16 and shape of 2 elements, expected 4");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': data_offsets end 16 is past the end of the data (8 bytes)");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': data_offsets begin 8 > end 0");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, 'x'))),
            "t.safetensors: tensor 'a': shape entries must be non-negative integers");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                              std::string(8, 'x'))),
            "t.safetensors: tensor 'a': shape [4294967296,4294967296] is too large");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                              std::string(6, 'x'))),
            "t.safetensors: tensor 'b' overlaps the previous tensor (starts at 2, previous ends at 4)");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x'))),
            "t.safetensors: gap in the data section before tensor 'a' (bytes 0..4 unused)");
  EXPECT_EQ(parse_error(image(ok, std::string(12, 'x'))), "t.safetensors: data section has 12 bytes but tensors cover only 8");
  EXPECT_EQ(parse_error(image(R"({"__metadata__":{"k":1}})", "")), "t.safetensors: __metadata__ value for 'k' must be a string");
  EXPECT_EQ(parse_error(image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "xxxx")),
            "t.safetensors: tensor 'a': missing string 'dtype'");
  EXPECT_EQ(parse_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx")),
            "t.safetensors: tensor 'a': 'data_offsets' must be [begin, end]");
}

}  // namespace
}  // namespace distllm
