#include "distllm/train/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"

namespace distllm {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_manifest(const std::string& manifest) {
  try {
    return nlohmann::json::parse(read_file(manifest));
  } catch (const nlohmann::json::exception& e) {
    throw_error(strprintf("%s: not valid JSON: %s", manifest.c_str(), e.what()));
  }
}

}  // namespace

bool TokenDataset::has_split(const std::string& path, const std::string& split) {
  if (!is_directory(path)) return split == "train";
  const std::string manifest = join_path(path, "manifest.json");
  if (file_exists(manifest)) {
    const nlohmann::json m = read_manifest(manifest);
    auto shards = m.find("shards");
    if (shards == m.end() || !shards->is_object()) return false;
    auto list = shards->find(split);
    return list != shards->end() && list->is_array() && !list->empty();
  }
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (starts_with(name, split + "_") && ends_with(name, ".tok")) return true;
  }
  return false;
}

TokenDataset TokenDataset::open(const std::string& path, const std::string& split) {
  DL_CHECK(file_exists(path), "%s: no such token file or directory", path.c_str());
  if (!is_directory(path)) return open_files({path});
  if (split == "all") {
    TokenDataset d = open(path, "train");
    if (has_split(path, "val")) {
      TokenDataset v = open(path, "val");
      for (Shard& s : v.shards_) d.shards_.push_back(std::move(s));
      d.total_ += v.total_;
      d.text_bytes_ = d.text_bytes_ != 0 && v.text_bytes_ != 0 ? d.text_bytes_ + v.text_bytes_ : 0;
    }
    d.origin_ = path + " (all splits)";
    return d;
  }
  std::vector<std::string> files;
  std::string manifest = join_path(path, "manifest.json");
  uint32_t manifest_vocab = 0;
  uint64_t split_bytes = 0;
  if (file_exists(manifest)) {
    const nlohmann::json m = read_manifest(manifest);
    auto shards = m.find("shards");
    DL_CHECK(shards != m.end() && shards->is_object(), "%s: missing object 'shards'", manifest.c_str());
    auto list = shards->find(split);
    DL_CHECK(list != shards->end() && list->is_array(), "%s: no '%s' split", manifest.c_str(), split.c_str());
    for (const auto& f : *list) {
      DL_CHECK(f.is_string(), "%s: shard names must be strings", manifest.c_str());
      const std::string shard = join_path(path, f.get<std::string>());
      DL_CHECK(file_exists(shard), "%s: the '%s' shard %s it lists is missing", manifest.c_str(), split.c_str(),
               f.get<std::string>().c_str());
      files.push_back(shard);
    }
    if (auto v = m.find("vocab_size"); v != m.end()) {
      DL_CHECK(v->is_number_unsigned() && v->get<uint64_t>() > 0 && v->get<uint64_t>() <= (1u << 31),
               "%s: 'vocab_size' must be a positive integer", manifest.c_str());
      manifest_vocab = v->get<uint32_t>();
    }
    // `text_bytes`: {"train": N, "val": M} (older manifests lack it: bpb unknown).
    if (auto b = m.find("text_bytes"); b != m.end()) {
      DL_CHECK(b->is_object(), "%s: 'text_bytes' must be an object of split sizes", manifest.c_str());
      if (auto n = b->find(split); n != b->end()) {
        DL_CHECK(n->is_number_unsigned(), "%s: 'text_bytes.%s' must be a non-negative integer", manifest.c_str(),
                 split.c_str());
        split_bytes = n->get<uint64_t>();
      }
    }
  } else {
    for (const auto& entry : fs::directory_iterator(path)) {
      std::string name = entry.path().filename().string();
      if (starts_with(name, split + "_") && ends_with(name, ".tok")) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  }
  DL_CHECK(!files.empty(), "%s: no '%s' token shards found", path.c_str(), split.c_str());
  TokenDataset d = open_files(files);
  d.origin_ = path + " (" + split + ")";
  if (manifest_vocab != 0) {
    // Shards of another tokenizer than the manifest names would train a model of
    // the wrong vocabulary without a word: their headers and ids must agree with it.
    for (const Shard& s : d.shards_)
      DL_CHECK(s.file->vocab_size() == 0 || s.file->vocab_size() == manifest_vocab,
               "%s: written for a vocabulary of %u tokens, but %s says %u", s.name.c_str(), s.file->vocab_size(),
               manifest.c_str(), manifest_vocab);
    d.check_tokens_below(static_cast<int>(std::min<uint32_t>(manifest_vocab, INT32_MAX)));
    d.vocab_size_ = manifest_vocab;
  }
  d.text_bytes_ = split_bytes;
  return d;
}

TokenDataset TokenDataset::open_files(const std::vector<std::string>& files) {
  TokenDataset d;
  for (const auto& f : files) {
    Shard s;
    s.file = std::make_shared<TokenFile>(f);
    s.size = s.file->size();
    s.name = f;
    if (s.file->vocab_size() != 0) {
      DL_CHECK(d.vocab_size_ == 0 || d.vocab_size_ == s.file->vocab_size(),
               "%s: vocabulary size %u differs from the other shards' %u", f.c_str(), s.file->vocab_size(),
               d.vocab_size_);
      d.vocab_size_ = s.file->vocab_size();
    }
    d.total_ += s.size;
    d.shards_.push_back(std::move(s));
  }
  d.origin_ = files.size() == 1 ? files[0] : strprintf("%zu token files", files.size());
  return d;
}

TokenDataset TokenDataset::from_tokens(std::vector<uint32_t> tokens, uint32_t vocab_size, std::string origin) {
  TokenDataset d;
  Shard s;
  s.size = tokens.size();
  s.memory = std::make_shared<std::vector<uint32_t>>(std::move(tokens));
  s.name = origin;
  d.total_ = s.size;
  d.vocab_size_ = vocab_size;
  d.origin_ = std::move(origin);
  d.shards_.push_back(std::move(s));
  return d;
}

double TokenDataset::bits_per_byte(double loss_nats_per_token) const {
  if (text_bytes_ == 0 || total_ == 0) return 0.0;
  return loss_nats_per_token / std::log(2.0) * static_cast<double>(total_) / static_cast<double>(text_bytes_);
}

uint64_t TokenDataset::num_windows(int T) const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s.size > static_cast<uint64_t>(T) ? s.size - T : 0;
  return n;
}

void TokenDataset::window(uint64_t k, int T, int32_t* out) const {
  for (const auto& s : shards_) {
    uint64_t w = s.size > static_cast<uint64_t>(T) ? s.size - T : 0;
    if (k < w) {
      if (s.file) {
        s.file->read(k, T + 1, out);
      } else {
        for (int i = 0; i <= T; ++i) out[i] = static_cast<int32_t>((*s.memory)[k + i]);
      }
      return;
    }
    k -= w;
  }
  throw_error(strprintf("%s: window index out of range", origin_.c_str()));
}

void TokenDataset::check_tokens_below(int vocab) const {
  for (const auto& s : shards_) {
    uint32_t mx = 0;
    if (s.file) {
      mx = s.file->max_token();
    } else {
      for (uint32_t t : *s.memory) mx = std::max(mx, t);
    }
    DL_CHECK(s.size == 0 || mx < static_cast<uint32_t>(vocab),
             "%s: token id %u is outside the model's vocabulary of %d (data from another tokenizer?)", s.name.c_str(),
             mx, vocab);
  }
}

BatchSampler::BatchSampler(const TokenDataset& data, int batch, int seq_len, uint64_t seed, int rank, int world)
    : data_(data), B_(batch), T_(seq_len), seed_(seed), rank_(rank), world_(world) {
  DL_CHECK(batch > 0 && seq_len > 0, "batch and sequence length must be positive");
  DL_CHECK(world > 0 && rank >= 0 && rank < world, "rank %d outside world of %d", rank, world);
  windows_ = data.num_windows(seq_len);
  DL_CHECK(windows_ > 0, "%s: %llu tokens is too few for sequences of %d (+1) tokens", data.origin().c_str(),
           (unsigned long long)data.size(), seq_len);
  scratch_.resize(seq_len + 1);
}

void BatchSampler::next(int32_t* tokens, int32_t* targets) {
  for (int b = 0; b < B_; ++b) {
    uint64_t j = (position_ * world_ + rank_) * B_ + b;
    CounterRng rng(seed_, /*stream=*/0x5A3D1E, j);
    data_.window(rng.below(windows_), T_, scratch_.data());
    std::copy(scratch_.begin(), scratch_.begin() + T_, tokens + static_cast<int64_t>(b) * T_);
    std::copy(scratch_.begin() + 1, scratch_.end(), targets + static_cast<int64_t>(b) * T_);
  }
  ++position_;
}

}  // namespace distllm
