#include "distllm/base/cpu.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace distllm {
namespace {

CpuFeatures detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);  // clang 14 lacks "f16c" here
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  // Leaf 7 sub-leaf 1: AVX-VNNI (eax bit 4) and AVX512_BF16 (eax bit 5). Sub-leaf 0
  // edx bit 24: AMX tiles. Only meaningful when the OS saves the wider state, which
  // the AVX-512 check above already implies for the 512-bit ones.
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx_vnni = f.avx2 && (eax & (1u << 4));
    f.avx512_bf16 = f.avx512f && (eax & (1u << 5));
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.amx = (edx & (1u << 24)) != 0;
    f.amx_int8 = f.amx && (edx & (1u << 25)) != 0;
  }
  return f;
}

Isa detect_best() {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) return Isa::kScalar;
  if (f.avx512f && f.avx512bw && f.avx512vl) return Isa::kAvx512;
  return Isa::kAvx2;
}

Isa cap_from_environment() {
  const char* force = std::getenv("DISTLLM_FORCE_SCALAR");
  if (force != nullptr && force[0] != '\0' && std::strcmp(force, "0") != 0) return Isa::kScalar;
  const char* env = std::getenv("DISTLLM_ISA");
  if (env == nullptr || env[0] == '\0') return Isa::kAvx512;
  if (std::optional<Isa> isa = parse_isa(env)) return *isa;
  std::fprintf(stderr, "[warn] DISTLLM_ISA=%s names no ISA level (scalar, avx2, avx512); ignored\n", env);
  return Isa::kAvx512;
}

std::atomic<int>& isa_cap() {
  static std::atomic<int> cap{static_cast<int>(cap_from_environment())};
  return cap;
}

// The OS side of AMX: XCR0 must enable the tile config and data state (bits 17,
// 18), and Linux hands the 8 KB of tile data to a process only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile
// instruction faults. Asked once; threads started later inherit the grant.
bool amx_granted() {
  static const bool granted = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_int8) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    constexpr unsigned kTileState = (1u << 17) | (1u << 18);
    if ((lo & kTileState) != kTileState) return false;
#ifdef __linux__
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return granted;
}

std::atomic<bool>& amx_enabled() {
  static std::atomic<bool> enabled{[] {
    const char* env = std::getenv("DISTLLM_AMX");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }()};
  return enabled;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view text) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (text == isa_name(isa)) return isa;
  return std::nullopt;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_feature_list() {
  const CpuFeatures& f = cpu_features();
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx, "amx");
  add(f.amx_int8, "amx_int8");
  return out.empty() ? "none" : out;
}

Isa best_isa() {
  static const Isa best = detect_best();
  return best;
}

Isa active_isa() {
  const int cap = isa_cap().load(std::memory_order_relaxed);
  const int best = static_cast<int>(best_isa());
  return static_cast<Isa>(cap < best ? cap : best);
}

void set_isa_cap(Isa cap) { isa_cap().store(static_cast<int>(cap)); }

bool cpu_has_avx2() { return best_isa() >= Isa::kAvx2; }
bool use_avx2() { return active_isa() >= Isa::kAvx2; }
bool use_avx512() { return active_isa() >= Isa::kAvx512; }

bool use_amx() {
  return amx_enabled().load(std::memory_order_relaxed) && use_avx512() && cpu_features().avx512_vnni && amx_granted();
}

void set_amx_enabled(bool enabled) { amx_enabled().store(enabled); }

void set_force_scalar(bool force) { set_isa_cap(force ? Isa::kScalar : Isa::kAvx512); }

}  // namespace distllm
