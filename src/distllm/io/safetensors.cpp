#include "distllm/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "distllm/base/error.h"

namespace distllm {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header JSON, rejecting duplicate keys (nlohmann would silently keep
// the last one, letting two entries claim the same name).
nlohmann::json parse_header(std::string_view text, const std::string& origin) {
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    throw_error(strprintf("%s: header is not valid JSON: %s", origin.c_str(), e.what()));
  }
  DL_CHECK(duplicate.empty(), "%s: duplicate tensor name '%s' in header", origin.c_str(), duplicate.c_str());
  return j;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.origin_ = path;
  f.file_ = std::make_shared<MappedFile>(path);
  f.validate_and_index({f.file_->data(), f.file_->size()});
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& origin) {
  SafetensorsFile f;
  f.origin_ = origin;
  f.validate_and_index(bytes);
  return f;
}

void SafetensorsFile::validate_and_index(std::span<const uint8_t> bytes) {
  const char* o = origin_.c_str();
  DL_CHECK(bytes.size() >= 8, "%s: truncated file: %zu bytes, need at least 8 for the header length", o,
           bytes.size());
  uint64_t n = read_u64_le(bytes.data());
  DL_CHECK(n <= kMaxHeaderBytes, "%s: header length %llu exceeds the 100 MB limit", o, (unsigned long long)n);
  DL_CHECK(n <= bytes.size() - 8, "%s: truncated file: header length %llu but only %zu bytes follow", o,
           (unsigned long long)n, bytes.size() - 8);
  DL_CHECK(n >= 2, "%s: header length %llu is too small for a JSON object", o, (unsigned long long)n);
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  DL_CHECK(text[0] == '{', "%s: header must start with '{'", o);
  nlohmann::json header = parse_header(text, origin_);
  DL_CHECK(header.is_object(), "%s: header must be a JSON object", o);
  data_ = bytes.data() + 8 + n;
  data_size_ = bytes.size() - 8 - n;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      DL_CHECK(v.is_object(), "%s: __metadata__ must be an object of strings", o);
      for (auto m = v.begin(); m != v.end(); ++m) {
        DL_CHECK(m.value().is_string(), "%s: __metadata__ value for '%s' must be a string", o, m.key().c_str());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const char* tn = name.c_str();
    DL_CHECK(v.is_object(), "%s: tensor '%s': entry must be an object", o, tn);
    auto dt = v.find("dtype");
    DL_CHECK(dt != v.end() && dt->is_string(), "%s: tensor '%s': missing string 'dtype'", o, tn);
    auto dtype = dtype_from_name(dt->get<std::string>());
    DL_CHECK(dtype.has_value(), "%s: tensor '%s': unsupported dtype '%s'", o, tn, dt->get<std::string>().c_str());
    auto sh = v.find("shape");
    DL_CHECK(sh != v.end() && sh->is_array(), "%s: tensor '%s': missing array 'shape'", o, tn);
    TensorInfo t;
    t.name = name;
    t.dtype = *dtype;
    // numel * size in 128-bit so hostile shapes cannot overflow the check.
    unsigned __int128 bytes_needed = dtype_size(t.dtype);
    for (const auto& d : *sh) {
      DL_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
               "%s: tensor '%s': shape entries must be non-negative integers", o, tn);
      uint64_t dim = d.get<uint64_t>();
      DL_CHECK(dim < (1ull << 48), "%s: tensor '%s': dimension %llu is too large", o, tn, (unsigned long long)dim);
      t.shape.push_back(static_cast<int64_t>(dim));
      bytes_needed *= dim;
      DL_CHECK(bytes_needed < (static_cast<unsigned __int128>(1) << 62), "%s: tensor '%s': shape %s is too large", o, tn,
               sh->dump().c_str());
    }
    auto off = v.find("data_offsets");
    DL_CHECK(off != v.end() && off->is_array() && off->size() == 2, "%s: tensor '%s': 'data_offsets' must be [begin, end]",
             o, tn);
    for (const auto& x : *off)
      DL_CHECK(x.is_number_unsigned() || (x.is_number_integer() && x.get<int64_t>() >= 0),
               "%s: tensor '%s': data_offsets must be non-negative integers", o, tn);
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    DL_CHECK(t.begin <= t.end, "%s: tensor '%s': data_offsets begin %llu > end %llu", o, tn,
             (unsigned long long)t.begin, (unsigned long long)t.end);
    DL_CHECK(t.end <= data_size_, "%s: tensor '%s': data_offsets end %llu is past the end of the data (%llu bytes)", o,
             tn, (unsigned long long)t.end, (unsigned long long)data_size_);
    DL_CHECK(static_cast<unsigned __int128>(t.end - t.begin) == bytes_needed,
             "%s: tensor '%s': %llu bytes for dtype %s and shape of %lld elements, expected %llu", o, tn,
             (unsigned long long)(t.end - t.begin), std::string(dtype_name(t.dtype)).c_str(),
             (long long)t.numel(), (unsigned long long)bytes_needed);
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  // Tensors must tile the data section exactly: no gaps, no overlap.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const TensorInfo* t : by_offset) {
    DL_CHECK(t->begin >= cursor, "%s: tensor '%s' overlaps the previous tensor (starts at %llu, previous ends at %llu)",
             o, t->name.c_str(), (unsigned long long)t->begin, (unsigned long long)cursor);
    DL_CHECK(t->begin == cursor, "%s: gap in the data section before tensor '%s' (bytes %llu..%llu unused)", o,
             t->name.c_str(), (unsigned long long)cursor, (unsigned long long)t->begin);
    cursor = t->end;
  }
  DL_CHECK(cursor == data_size_, "%s: data section has %llu bytes but tensors cover only %llu", o,
           (unsigned long long)data_size_, (unsigned long long)cursor);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  DL_CHECK(t != nullptr, "%s: no tensor named '%.*s'", origin_.c_str(), (int)name.size(), name.data());
  return *t;
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorInfo& t) const {
  return {data_ + t.begin, static_cast<size_t>(t.end - t.begin)};
}

void SafetensorsFile::read_f32(const TensorInfo& t, float* out) const {
  convert_to_f32(t.dtype, data_ + t.begin, out, static_cast<size_t>(t.numel()));
}

std::vector<float> SafetensorsFile::read_f32(std::string_view name) const {
  const TensorInfo& t = get(name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  read_f32(t, out.data());
  return out;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
  DL_CHECK(name != "__metadata__", "'__metadata__' is not a valid tensor name");
  for (const auto& e : entries_) DL_CHECK(e.name != name, "duplicate tensor name '%s'", name.c_str());
  uint64_t n = 1;
  for (int64_t d : shape) {
    DL_CHECK(d >= 0, "tensor '%s': negative dimension", name.c_str());
    n *= static_cast<uint64_t>(d);
  }
  entries_.push_back(Entry{name, dtype, std::move(shape), data, {}, n * dtype_size(dtype)});
}

void SafetensorsWriter::add_converted(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                      const float* data) {
  add(name, dtype, std::move(shape), nullptr);
  Entry& e = entries_.back();
  e.owned.resize(e.size);
  convert_from_f32(dtype, data, e.owned.data(), e.size / dtype_size(dtype));
  e.data = e.owned.data();
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::ordered() const {
  // Larger element sizes first keeps every tensor aligned to its own dtype size
  // (the header is padded to 8 bytes); ties keep insertion order.
  std::vector<const Entry*> out;
  for (const auto& e : entries_) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry* a, const Entry* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });
  return out;
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t n = 0;
  for (const auto& e : entries_) n += e.size;
  return n;
}

std::string SafetensorsWriter::header() const {
  // Keep insertion order in the JSON text (ordered_json) for readable headers.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    j["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const Entry* e : ordered()) {
    nlohmann::ordered_json t;
    t["dtype"] = std::string(dtype_name(e->dtype));
    t["shape"] = e->shape;
    t["data_offsets"] = {offset, offset + e->size};
    j[e->name] = t;
    offset += e->size;
  }
  std::string text = j.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

void SafetensorsWriter::write(const std::string& path) const { write(path, nullptr); }

void SafetensorsWriter::write(const std::string& path, const std::function<void(const void*, size_t)>& observe) const {
  std::string head = header();
  write_file_atomic_with(path, [&](int fd) {
    write_all(fd, head.data(), head.size(), path);
    if (observe) observe(head.data(), head.size());
    for (const Entry* e : ordered()) {
      if (e->size == 0) continue;
      write_all(fd, e->data, e->size, path);
      if (observe) observe(e->data, e->size);
    }
  });
}

}  // namespace distllm
