#include "distllm/io/zip_reader.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr size_t kMaxEntries = 1 << 20;

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bounds-checked little-endian reads from the archive.
struct Cursor {
  std::span<const uint8_t> bytes;
  const std::string& origin;
  void need(uint64_t at, uint64_t n, const char* what) const {
    DL_CHECK(at <= bytes.size() && n <= bytes.size() - at, "%s: truncated zip archive (%s at byte %llu runs past its %zu bytes)",
             origin.c_str(), what, (unsigned long long)at, bytes.size());
  }
  uint64_t u(uint64_t at, int n, const char* what) const {
    need(at, static_cast<uint64_t>(n), what);
    return le(bytes.data() + at, n);
  }
};

}  // namespace

ZipArchive ZipArchive::open(const std::string& path) {
  ZipArchive z;
  z.origin_ = path;
  z.file_ = std::make_shared<MappedFile>(path);
  z.index({z.file_->data(), z.file_->size()});
  return z;
}

ZipArchive ZipArchive::parse(std::span<const uint8_t> bytes, const std::string& origin) {
  ZipArchive z;
  z.origin_ = origin;
  z.index(bytes);
  return z;
}

const std::span<const uint8_t>* ZipArchive::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

void ZipArchive::index(std::span<const uint8_t> bytes) {
  const char* o = origin_.c_str();
  Cursor c{bytes, origin_};
  DL_CHECK(bytes.size() >= 22, "%s: not a zip archive (%zu bytes; torch.save's format is a zip)", o, bytes.size());
  // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = bytes.size() > 22 + 65535 ? bytes.size() - 22 - 65535 : 0;
  for (uint64_t at = bytes.size() - 22 + 1; at-- > lowest;)
    if (le(bytes.data() + at, 4) == kEndOfCentralDir) {
      eocd = at;
      break;
    }
  DL_CHECK(eocd != UINT64_MAX,
           "%s: not a zip archive (no end-of-central-directory record; a pytorch_model.bin from torch < 1.6 uses the "
           "legacy format, which is not supported: re-save it with a newer torch or as safetensors)",
           o);
  DL_CHECK(c.u(eocd + 4, 2, "disk number") == 0 && c.u(eocd + 6, 2, "disk number") == 0,
           "%s: multi-disk zip archives are not supported", o);
  uint64_t count = c.u(eocd + 10, 2, "entry count");
  uint64_t cd_size = c.u(eocd + 12, 4, "central directory size");
  uint64_t cd_offset = c.u(eocd + 16, 4, "central directory offset");
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    DL_CHECK(eocd >= 20 && c.u(eocd - 20, 4, "zip64 locator") == kZip64EndLocator,
             "%s: zip64 fields without a zip64 end-of-central-directory locator", o);
    uint64_t z64 = c.u(eocd - 20 + 8, 8, "zip64 record offset");
    DL_CHECK(c.u(z64, 4, "zip64 record") == kZip64End, "%s: bad zip64 end-of-central-directory record", o);
    count = c.u(z64 + 32, 8, "zip64 entry count");
    cd_size = c.u(z64 + 40, 8, "zip64 central directory size");
    cd_offset = c.u(z64 + 48, 8, "zip64 central directory offset");
  }
  DL_CHECK(count <= kMaxEntries, "%s: %llu zip entries (at most %zu)", o, (unsigned long long)count, kMaxEntries);
  c.need(cd_offset, cd_size, "central directory");
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    DL_CHECK(c.u(at, 4, "central directory entry") == kCentralHeader, "%s: bad central directory entry %llu", o,
             (unsigned long long)i);
    const uint64_t flags = c.u(at + 8, 2, "flags"), method = c.u(at + 10, 2, "method");
    uint64_t csize = c.u(at + 20, 4, "size"), usize = c.u(at + 24, 4, "size");
    const uint64_t name_len = c.u(at + 28, 2, "name length"), extra_len = c.u(at + 30, 2, "extra length"),
                   comment_len = c.u(at + 32, 2, "comment length");
    uint64_t local = c.u(at + 42, 4, "local header offset");
    c.need(at + 46, name_len + extra_len + comment_len, "entry name");
    std::string name(reinterpret_cast<const char*>(bytes.data() + at + 46), name_len);
    // The zip64 extra field holds, in this order, whichever of the three is 0xFFFFFFFF.
    for (uint64_t e = at + 46 + name_len, end = e + extra_len; e + 4 <= end;) {
      const uint64_t id = le(bytes.data() + e, 2), len = le(bytes.data() + e + 2, 2);
      DL_CHECK(e + 4 + len <= end, "%s: entry '%s': malformed extra field", o, name.c_str());
      if (id == 0x0001) {
        uint64_t f = e + 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xFFFFFFFF) return;
          DL_CHECK(f + 8 <= e + 4 + len, "%s: entry '%s': short zip64 extra field", o, name.c_str());
          v = le(bytes.data() + f, 8);
          f += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      e += 4 + len;
    }
    DL_CHECK((flags & 1) == 0, "%s: entry '%s' is encrypted", o, name.c_str());
    DL_CHECK(method == 0, "%s: entry '%s' is compressed (method %llu); torch.save stores entries uncompressed", o,
             name.c_str(), (unsigned long long)method);
    DL_CHECK(csize == usize, "%s: entry '%s': stored size %llu differs from its size %llu", o, name.c_str(),
             (unsigned long long)csize, (unsigned long long)usize);
    DL_CHECK(c.u(local, 4, "local header") == kLocalHeader, "%s: entry '%s': bad local header", o, name.c_str());
    const uint64_t data = local + 30 + c.u(local + 26, 2, "local name length") + c.u(local + 28, 2, "local extra length");
    c.need(data, csize, "entry data");
    DL_CHECK(entries_.emplace(name, bytes.subspan(data, csize)).second, "%s: entry '%s' appears twice", o, name.c_str());
    at += 46 + name_len + extra_len + comment_len;
  }
}

}  // namespace distllm
