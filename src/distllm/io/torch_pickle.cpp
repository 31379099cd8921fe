#include "distllm/io/torch_pickle.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "distllm/base/error.h"

namespace distllm {

namespace {

// What the restricted unpickler can hold. Objects live in an arena and refer to each
// other by pointer, so a pickle that makes a container hold itself cannot leak.
struct Obj {
  enum Kind { kNone, kBool, kInt, kStr, kTuple, kList, kDict, kGlobal, kStorage, kTensor } kind = kNone;
  int64_t i = 0;                                 // kBool, kInt; kTensor: index into the result
  std::string s;                                 // kStr
  std::vector<Obj*> items;                       // kTuple, kList
  std::vector<std::pair<Obj*, Obj*>> dict;       // kDict, in insertion order
  enum Callable { kOrderedDict, kRebuildTensor, kRebuildParameter, kStorageType } callable = kOrderedDict;  // kGlobal
  DType dtype = DType::kF32;                     // kGlobal storage type, kStorage
  std::span<const uint8_t> storage;              // kStorage: its bytes in the archive
  std::string key;                               // kStorage
};

const char* kind_name(const Obj* o) {
  static const char* names[] = {"None", "bool", "int", "str", "tuple", "list", "dict", "global", "storage", "tensor"};
  return names[o->kind];
}

// The globals a state dict needs, and nothing else.
bool resolve_global(const std::string& module, const std::string& name, Obj& out) {
  out.kind = Obj::kGlobal;
  if (module == "collections" && name == "OrderedDict") out.callable = Obj::kOrderedDict;
  else if (module == "torch._utils" && name == "_rebuild_tensor_v2") out.callable = Obj::kRebuildTensor;
  else if (module == "torch._utils" && name == "_rebuild_parameter") out.callable = Obj::kRebuildParameter;
  else if (module == "torch" && name == "FloatStorage") out.dtype = DType::kF32;
  else if (module == "torch" && name == "HalfStorage") out.dtype = DType::kF16;
  else if (module == "torch" && name == "BFloat16Storage") out.dtype = DType::kBF16;
  else return false;
  if (module == "torch") out.callable = Obj::kStorageType;
  return true;
}

class Unpickler {
 public:
  // `max_copied`: the most bytes non-contiguous tensors may be gathered into, so a
  // pickle that rebuilds one strided storage many times cannot exhaust memory.
  Unpickler(std::span<const uint8_t> pickle, const ZipArchive& zip, std::string prefix, std::string origin,
            uint64_t max_copied)
      : p_(pickle), zip_(zip), prefix_(std::move(prefix)), origin_(std::move(origin)), copy_budget_(max_copied) {}

  // Runs the pickle to STOP and returns the object it built.
  Obj* run();
  std::vector<TensorInfo> tensors;
  std::vector<std::span<const uint8_t>> bytes;
  std::vector<std::unique_ptr<uint8_t[]>> copies;

 private:
  std::span<const uint8_t> p_;
  size_t at_ = 0;
  const ZipArchive& zip_;
  std::string prefix_, origin_;
  uint64_t copy_budget_;
  std::vector<std::unique_ptr<Obj>> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Obj*> memo_;
  std::map<std::string, Obj*> storages_;  // key -> storage, so shared storages stay shared

  [[noreturn]] void fail(const std::string& why) const {
    throw_error(strprintf("%s: data.pkl byte %zu: %s", origin_.c_str(), at_, why.c_str()));
  }
  uint64_t read_le(int n) {
    if (p_.size() - at_ < static_cast<size_t>(n)) fail("the pickle ends in the middle of an opcode (truncated?)");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p_[at_ + i];
    at_ += n;
    return v;
  }
  std::string read_bytes(uint64_t n) {
    if (n > TorchCheckpointFile::kMaxString)
      fail(strprintf("a string of %llu bytes (at most %llu)", (unsigned long long)n,
                     (unsigned long long)TorchCheckpointFile::kMaxString));
    if (p_.size() - at_ < n) fail("the pickle ends in the middle of a string (truncated?)");
    std::string s(reinterpret_cast<const char*>(p_.data() + at_), n);
    at_ += n;
    return s;
  }
  std::string read_line() {
    size_t end = at_;
    while (end < p_.size() && p_[end] != '\n' && end - at_ < 256) ++end;
    if (end >= p_.size() || p_[end] != '\n') fail("GLOBAL: unterminated module or name");
    std::string s(reinterpret_cast<const char*>(p_.data() + at_), end - at_);
    at_ = end + 1;
    return s;
  }
  Obj* make(Obj::Kind kind) {
    if (arena_.size() >= TorchCheckpointFile::kMaxObjects) fail("too many objects");
    arena_.push_back(std::make_unique<Obj>());
    arena_.back()->kind = kind;
    return arena_.back().get();
  }
  void push(Obj* o) {
    if (stack_.size() >= TorchCheckpointFile::kMaxStack) fail("the stack is too deep");
    stack_.push_back(o);
  }
  Obj* pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
    Obj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj* top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
    return stack_.back();
  }
  // The objects pushed since the last MARK, which is removed.
  std::vector<Obj*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    std::vector<Obj*> items(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void memo_put(uint64_t index) {
    if (memo_.size() >= TorchCheckpointFile::kMaxMemo && !memo_.count(index)) fail("the memo is too large");
    memo_[index] = top();
  }
  Obj* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(strprintf("memo entry %llu was never stored", (unsigned long long)index));
    return it->second;
  }
  Obj* tuple(std::vector<Obj*> items) {
    Obj* t = make(Obj::kTuple);
    t->items = std::move(items);
    return t;
  }
  void set_items(Obj* dict, const std::vector<Obj*>& kv) {
    if (dict->kind != Obj::kDict) fail(strprintf("SETITEM(S) on a %s", kind_name(dict)));
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    for (size_t i = 0; i < kv.size(); i += 2) dict->dict.emplace_back(kv[i], kv[i + 1]);
  }
  void append(Obj* list, const std::vector<Obj*>& items) {
    if (list->kind != Obj::kList) fail(strprintf("APPEND(S) on a %s", kind_name(list)));
    list->items.insert(list->items.end(), items.begin(), items.end());
  }
  int64_t as_int(const Obj* o, const char* what) {
    if (o->kind != Obj::kInt) fail(strprintf("%s must be an int, not %s", what, kind_name(o)));
    return o->i;
  }
  Obj* persistent_load(Obj* pid);
  Obj* reduce(Obj* callable, Obj* args);
  Obj* rebuild_tensor(const std::vector<Obj*>& args);
};

Obj* Unpickler::persistent_load(Obj* pid) {
  if (pid->kind != Obj::kTuple || pid->items.size() != 5 || pid->items[0]->kind != Obj::kStr ||
      pid->items[0]->s != "storage")
    fail("a persistent id must be ('storage', StorageType, key, location, numel)");
  Obj* type = pid->items[1];
  if (type->kind != Obj::kGlobal || type->callable != Obj::kStorageType) fail("persistent id: not a storage type");
  if (pid->items[2]->kind != Obj::kStr) fail("persistent id: the storage key must be a str");
  const std::string& key = pid->items[2]->s;
  const int64_t numel = as_int(pid->items[4], "persistent id: numel");
  auto seen = storages_.find(key);
  if (seen != storages_.end()) {
    if (seen->second->dtype != type->dtype) fail(strprintf("storage '%s' is used with two dtypes", key.c_str()));
    return seen->second;
  }
  const std::span<const uint8_t>* entry = zip_.find(prefix_ + "data/" + key);
  if (entry == nullptr) fail(strprintf("storage '%s' has no entry %sdata/%s in the archive", key.c_str(), prefix_.c_str(), key.c_str()));
  const uint64_t esize = dtype_size(type->dtype);
  if (numel < 0 || static_cast<uint64_t>(numel) > entry->size() / esize)
    fail(strprintf("storage '%s' claims %lld elements; its entry holds %zu bytes", key.c_str(), (long long)numel, entry->size()));
  Obj* s = make(Obj::kStorage);
  s->dtype = type->dtype;
  s->key = key;
  s->storage = entry->subspan(0, static_cast<size_t>(numel) * esize);
  storages_[key] = s;
  return s;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
Obj* Unpickler::rebuild_tensor(const std::vector<Obj*>& args) {
  if (args.size() < 4) fail("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)");
  const Obj* storage = args[0];
  if (storage->kind != Obj::kStorage) fail(strprintf("_rebuild_tensor_v2: the storage is a %s", kind_name(storage)));
  const int64_t offset = as_int(args[1], "_rebuild_tensor_v2: storage_offset");
  const Obj* size = args[2];
  const Obj* stride = args[3];
  if (size->kind != Obj::kTuple || stride->kind != Obj::kTuple || size->items.size() != stride->items.size())
    fail("_rebuild_tensor_v2: size and stride must be tuples of the same length");
  if (size->items.size() > static_cast<size_t>(TorchCheckpointFile::kMaxDims)) fail("_rebuild_tensor_v2: too many dimensions");
  const int64_t storage_numel = static_cast<int64_t>(storage->storage.size() / dtype_size(storage->dtype));
  if (offset < 0 || offset > storage_numel) fail("_rebuild_tensor_v2: storage_offset outside the storage");
  std::vector<int64_t> shape, strides;
  int64_t numel = 1, last = offset;  // last: the highest element index the tensor reads
  for (size_t d = 0; d < size->items.size(); ++d) {
    const int64_t n = as_int(size->items[d], "a tensor size"), s = as_int(stride->items[d], "a tensor stride");
    if (n < 0 || s < 0 || n > storage_numel + 1 || s > storage_numel + 1)
      fail(strprintf("_rebuild_tensor_v2: size %lld / stride %lld out of range for a storage of %lld elements",
                     (long long)n, (long long)s, (long long)storage_numel));
    shape.push_back(n);
    strides.push_back(s);
    if (n == 0) numel = 0;
    else if (numel != 0) {
      if (__builtin_mul_overflow(numel, n, &numel) || numel > storage_numel)
        // A state dict's tensors never hold more elements than their storage; refusing more bounds the copies.
        fail("_rebuild_tensor_v2: the tensor has more elements than its storage");
    }
    int64_t extent = 0;
    if (n > 0 && (__builtin_mul_overflow(n - 1, s, &extent) || __builtin_add_overflow(last, extent, &last)))
      fail("_rebuild_tensor_v2: extent overflows");
  }
  if (numel > 0 && last >= storage_numel)
    fail(strprintf("_rebuild_tensor_v2: the tensor reads element %lld of a storage of %lld", (long long)last,
                   (long long)storage_numel));
  const size_t esize = dtype_size(storage->dtype);
  bool contiguous = true;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1, expect = 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expect) contiguous = false;
    expect *= shape[d];
  }
  std::span<const uint8_t> data;
  if (contiguous || numel == 0) {
    data = storage->storage.subspan(static_cast<size_t>(offset) * esize, static_cast<size_t>(numel) * esize);
  } else {  // gather row-major
    const uint64_t copy_bytes = static_cast<uint64_t>(numel) * esize;
    if (copy_bytes > copy_budget_) fail("non-contiguous tensors would need more copies than the archive's size");
    copy_budget_ -= copy_bytes;
    copies.push_back(std::make_unique<uint8_t[]>(static_cast<size_t>(numel) * esize));
    uint8_t* out = copies.back().get();
    std::vector<int64_t> idx(shape.size(), 0);
    const uint8_t* base = storage->storage.data();
    for (int64_t k = 0; k < numel; ++k) {
      int64_t src = offset;
      for (size_t d = 0; d < shape.size(); ++d) src += idx[d] * strides[d];
      std::memcpy(out + static_cast<size_t>(k) * esize, base + static_cast<size_t>(src) * esize, esize);
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    data = {out, static_cast<size_t>(numel) * esize};
  }
  Obj* t = make(Obj::kTensor);
  t->i = static_cast<int64_t>(tensors.size());
  TensorInfo info;
  info.dtype = storage->dtype;
  info.shape = std::move(shape);
  tensors.push_back(std::move(info));
  bytes.push_back(data);
  return t;
}

Obj* Unpickler::reduce(Obj* callable, Obj* args) {
  if (callable->kind != Obj::kGlobal) fail(strprintf("REDUCE calls a %s", kind_name(callable)));
  if (args->kind != Obj::kTuple) fail("REDUCE's arguments must be a tuple");
  switch (callable->callable) {
    case Obj::kOrderedDict:
      if (!args->items.empty()) fail("OrderedDict() takes no arguments here");
      return make(Obj::kDict);
    case Obj::kRebuildTensor: return rebuild_tensor(args->items);
    case Obj::kRebuildParameter:  // _rebuild_parameter(data, requires_grad, backward_hooks)
      if (args->items.empty() || args->items[0]->kind != Obj::kTensor) fail("_rebuild_parameter needs a tensor");
      return args->items[0];
    case Obj::kStorageType: break;
  }
  fail("a storage type is not callable here");
}

Obj* Unpickler::run() {
  while (true) {
    if (at_ >= p_.size()) fail("the pickle ends without STOP (truncated?)");
    const uint8_t op = p_[at_++];
    switch (op) {
      case 0x80: read_le(1); break;  // PROTO
      case 0x95: read_le(8); break;  // FRAME: frames only group opcodes
      case '.': {                    // STOP
        Obj* result = pop();
        return result;
      }
      case '}': push(make(Obj::kDict)); break;
      case ')': push(tuple({})); break;
      case ']': push(make(Obj::kList)); break;
      case '(':
        if (marks_.size() >= TorchCheckpointFile::kMaxStack) fail("too many MARKs");
        marks_.push_back(stack_.size());
        break;
      case 'X':
      case 0x8c:
      case 0x8d: {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
        const uint64_t n = read_le(op == 'X' ? 4 : op == 0x8c ? 1 : 8);
        Obj* s = make(Obj::kStr);
        s->s = read_bytes(n);
        push(s);
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = read_line();
        std::string name = read_line();
        Obj* g = make(Obj::kGlobal);
        if (!resolve_global(module, name, *g))
          fail(strprintf("refused global %s.%s: a checkpoint's pickle may only rebuild tensors (allowed: "
                         "collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter, "
                         "torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage)",
                         module.c_str(), name.c_str()));
        push(g);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Obj* name = pop();
        Obj* module = pop();
        if (module->kind != Obj::kStr || name->kind != Obj::kStr) fail("STACK_GLOBAL needs two strings");
        Obj* g = make(Obj::kGlobal);
        if (!resolve_global(module->s, name->s, *g))
          fail(strprintf("refused global %s.%s: a checkpoint's pickle may only rebuild tensors", module->s.c_str(),
                         name->s.c_str()));
        push(g);
        break;
      }
      case 'Q': push(persistent_load(pop())); break;  // BINPERSID
      case 't': push(tuple(pop_mark())); break;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<Obj*> items(static_cast<size_t>(op - 0x84));
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(tuple(std::move(items)));
        break;
      }
      case 'J':
      case 'K':
      case 'M': {  // BININT (signed 4), BININT1, BININT2 (unsigned)
        const uint64_t v = read_le(op == 'J' ? 4 : op == 'K' ? 1 : 2);
        Obj* o = make(Obj::kInt);
        o->i = op == 'J' ? static_cast<int64_t>(static_cast<int32_t>(v)) : static_cast<int64_t>(v);
        push(o);
        break;
      }
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        const uint64_t n = read_le(1);
        if (n > 8) fail("LONG1 wider than 64 bits");
        uint64_t v = n == 0 ? 0 : read_le(static_cast<int>(n));
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        Obj* o = make(Obj::kInt);
        o->i = static_cast<int64_t>(v);
        push(o);
        break;
      }
      case 0x88:
      case 0x89: {
        Obj* o = make(Obj::kBool);
        o->i = op == 0x88;
        push(o);
        break;
      }
      case 'N': push(make(Obj::kNone)); break;
      case 'R': {
        Obj* args = pop();
        Obj* callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 's': {
        Obj* v = pop();
        Obj* k = pop();
        set_items(top(), {k, v});
        break;
      }
      case 'u': {
        std::vector<Obj*> kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case 'a': {
        Obj* v = pop();
        append(top(), {v});
        break;
      }
      case 'e': {
        std::vector<Obj*> items = pop_mark();
        append(top(), items);
        break;
      }
      case 'q': memo_put(read_le(1)); break;
      case 'r': memo_put(read_le(4)); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'h': push(memo_get(read_le(1))); break;
      case 'j': push(memo_get(read_le(4))); break;
      case 'b': {  // BUILD: only a state dict's _metadata on an OrderedDict, ignored
        pop();
        if (top()->kind != Obj::kDict) fail(strprintf("BUILD on a %s", kind_name(top())));
        break;
      }
      default: fail(strprintf("opcode 0x%02x is not one a torch.save state dict uses", op));
    }
  }
}

}  // namespace

TorchCheckpointFile TorchCheckpointFile::open(const std::string& path) {
  TorchCheckpointFile f;
  f.archive_ = ZipArchive::open(path);
  f.load();
  return f;
}

TorchCheckpointFile TorchCheckpointFile::parse(std::span<const uint8_t> bytes, const std::string& origin) {
  TorchCheckpointFile f;
  f.archive_ = ZipArchive::parse(bytes, origin);
  f.load();
  return f;
}

void TorchCheckpointFile::load() {
  const char* o = origin().c_str();
  // torch.save names every entry "<archive name>/...": find the one data.pkl.
  std::string prefix;
  const std::span<const uint8_t>* pickle = nullptr;
  for (const auto& [name, bytes] : archive_.entries()) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    DL_CHECK(pickle == nullptr, "%s: more than one data.pkl in the archive", o);
    prefix = name.substr(0, slash + 1);
    pickle = &bytes;
  }
  DL_CHECK(pickle != nullptr, "%s: no <name>/data.pkl in the archive (not a torch.save file?)", o);
  if (const auto* order = archive_.find(prefix + "byteorder")) {
    const std::string_view b(reinterpret_cast<const char*>(order->data()), order->size());
    DL_CHECK(b == "little", "%s: byteorder '%.*s'; only little-endian checkpoints are supported", o,
             static_cast<int>(std::min<size_t>(b.size(), 16)), b.data());
  }
  uint64_t archive_bytes = 0;
  for (const auto& entry : archive_.entries()) archive_bytes += entry.second.size();
  Unpickler u(*pickle, archive_, prefix, origin(), archive_bytes);
  const Obj* root = u.run();
  DL_CHECK(root->kind == Obj::kDict, "%s: the pickle holds a %s, not a state dict", o, kind_name(root));
  std::map<std::string, bool> names;
  for (const auto& [k, v] : root->dict) {
    DL_CHECK(k->kind == Obj::kStr, "%s: a state dict key is a %s, not a str", o, kind_name(k));
    DL_CHECK(v->kind == Obj::kTensor, "%s: '%s' is a %s, not a tensor", o, k->s.c_str(), kind_name(v));
    DL_CHECK(names.emplace(k->s, true).second, "%s: tensor '%s' appears twice", o, k->s.c_str());
    TensorInfo info = u.tensors[static_cast<size_t>(v->i)];
    info.name = k->s;
    tensors_.push_back(std::move(info));
    bytes_.push_back(u.bytes[static_cast<size_t>(v->i)]);
  }
  copies_ = std::move(u.copies);
}

}  // namespace distllm
