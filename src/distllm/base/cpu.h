// Which SIMD paths this process may use, decided once from CPUID (and the OS's
// saved register state, which __builtin_cpu_supports checks).
//
// Kernels ask use_avx2() / use_avx512() and take the best path they have at or
// below the active level. The active level is the best the machine supports,
// capped by the environment variable DISTLLM_ISA=scalar|avx2|avx512 (or the older
// DISTLLM_FORCE_SCALAR=1), or by set_isa_cap() in tests that compare every path
// with the scalar reference.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace distllm {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"
std::optional<Isa> parse_isa(std::string_view text);

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx_vnni = false, amx = false;
  bool amx_int8 = false;  // AMX tiles with int8 dot products (TDPBSSD and kin)
};
const CpuFeatures& cpu_features();
// The features present, space-separated ("avx2 fma f16c avx512f ..."), or "none".
std::string cpu_feature_list();

// The best level this CPU and OS support: avx2 needs AVX2+FMA+F16C; avx512 needs
// AVX-512 F, BW and VL on top.
Isa best_isa();
// best_isa() capped by DISTLLM_ISA / set_isa_cap(). A DISTLLM_ISA value that names
// no level is reported once on stderr and ignored.
Isa active_isa();
// Caps the active level (Isa::kAvx512: no cap). For tests.
void set_isa_cap(Isa cap);

// True when the CPU has AVX2 and FMA (and F16C) and the OS saves YMM state.
bool cpu_has_avx2();
bool use_avx2();    // active_isa() >= kAvx2
bool use_avx512();  // active_isa() >= kAvx512

// AMX int8 tiles (the int8 linears' batched path, linear_bi.h): true when the CPU
// has AMX-TILE and AMX-INT8, the AVX-512 path with VNNI is active, the OS saves the
// tile state and granted this process its use (Linux asks each process to request
// it, once), and neither DISTLLM_AMX=0 nor set_amx_enabled(false) turned it off.
bool use_amx();
// For tests that compare the AMX path with the others.
void set_amx_enabled(bool enabled);

// Tests flip this to compare the vectorised kernels with their scalar references
// (set_isa_cap(kScalar), or no cap).
void set_force_scalar(bool force);

}  // namespace distllm
