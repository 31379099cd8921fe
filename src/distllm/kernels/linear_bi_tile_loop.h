// The part of linear_bi's tile kernels that is the same for every ISA: walking the
// row groups of a packed f32 weight, and choosing the tile height.
// Each ISA's file includes this inside its own namespace (compiled with its own
// target flags), after defining `group_tile<MR, W>` and the weight loader
// F32Weights; it then gets that ISA's linear_bi_tile (int8 and bf16 weights have
// their own tiles: linear_bi_rows_tile_loop.h).
// Not a normal header: no include guard, no includes of its own.

namespace {

template <int MR, class W>
void tile_rows(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias, int g0,
               int g1, int prefetch_groups, int phase, int period) {
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  const char* end = static_cast<const char*>(w.group_data(0)) + groups * w.group_bytes();
  const int64_t ahead = prefetch_groups * w.group_bytes();
  for (int g = g0; g < g1; ++g) {
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    group_tile<MR, W>(out, ldo, x, ldx, static_cast<const typename W::Elem*>(w.group_data(g)), w.k_chunks(), w.K(), bias, n0, n_valid, ahead, end, phase,
                      period);
  }
}

template <class W>
void tile_dispatch(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                   int mr, int g0, int g1, int prefetch_groups, int phase, int period) {
  switch (mr) {
    case 1: tile_rows<1, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
    case 2: tile_rows<2, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
    default: tile_rows<3, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_groups, phase, period); break;
  }
}

}  // namespace

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int prefetch_groups, int phase, int period) {
  DL_CHECK(w.dtype() == DType::kF32, "internal error: %s weights run in their own tiles (linear_bi_rows_tile_loop.h)",
           dtype_short_name(w.dtype()));
  tile_dispatch<F32Weights>(out, ldo, x, ldx, w, bias, mr, g0, g1, prefetch_groups, phase, period);
}
