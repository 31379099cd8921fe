// The part of linear_bi's tile kernels that is the same for every ISA: walking the
// row groups of a packed f32 weight, and choosing the tile height.
// Each ISA's file includes this inside its own namespace (compiled with its own
// target flags), after defining `group_tile<MR, W>` and the weight loader
// F32TileWeights (its f32 loader; kGroupsPerTile = 2 when group_tile takes two
// groups at once); it then gets that ISA's linear_bi_tile (int8 and bf16 weights have
// their own tiles: linear_bi_rows_tile_loop.h).
// Not a normal header: no include guard, no includes of its own.

namespace {

// How many row groups the ISA's group_tile takes per call (W::kGroupsPerTile, else 1).
template <class W>
constexpr int groups_per_tile() {
  if constexpr (requires { W::kGroupsPerTile; }) return W::kGroupsPerTile;
  else return 1;
}

// The most rows one tile call takes (W::kMaxRows, else 3). A batch larger than that
// is cut into tiles of W::kSweepRows where the ISA names it (linear_bi_tile_rows).
template <class W>
constexpr int max_tile_rows() {
  if constexpr (requires { W::kMaxRows; }) return W::kMaxRows;
  else return 3;
}

template <class W>
constexpr int sweep_tile_rows() {
  if constexpr (requires { W::kSweepRows; }) return W::kSweepRows;
  else return max_tile_rows<W>();
}

template <int MR, class W>
void tile_rows(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias, int g0,
               int g1, int64_t prefetch_bytes, int phase, int period) {
  const int groups = (w.N() + PackedLinear::kRows - 1) / PackedLinear::kRows;
  const char* end = static_cast<const char*>(w.group_data(0)) + groups * w.group_bytes();
  const int64_t ahead = prefetch_bytes;
  int g = g0;
  if constexpr (groups_per_tile<W>() == 2 && MR <= 6) {
    // Pairs of groups (the ISA's group_tile takes NG = 2), then the odd one alone.
    // Taller tiles take one group: 2 x MR x 2 accumulators would not fit in registers.
    for (; g + 1 < g1; g += 2) {
      const int n0 = g * PackedLinear::kRows;
      const int last = w.N() - n0 - PackedLinear::kRows;
      group_tile<MR, W, 2>(out, ldo, x, ldx, static_cast<const typename W::Elem*>(w.group_data(g)), w.k_chunks(), w.K(),
                           bias, n0, PackedLinear::kRows, ahead, end, phase, period,
                           w.group_bytes() / static_cast<int64_t>(sizeof(typename W::Elem)),
                           last < PackedLinear::kRows ? last : PackedLinear::kRows);
    }
  }
  for (; g < g1; ++g) {
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    group_tile<MR, W>(out, ldo, x, ldx, static_cast<const typename W::Elem*>(w.group_data(g)), w.k_chunks(), w.K(), bias, n0, n_valid, ahead, end, phase,
                      period);
  }
}

template <class W>
void tile_dispatch(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                   int mr, int g0, int g1, int64_t prefetch_bytes, int phase, int period) {
  if constexpr (max_tile_rows<W>() >= 8) {
    switch (mr) {
      case 7: return tile_rows<7, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period);
      case 8: return tile_rows<8, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period);
      default: break;
    }
  }
  if constexpr (max_tile_rows<W>() >= 6) {
    switch (mr) {
      case 4: return tile_rows<4, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period);
      case 5: return tile_rows<5, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period);
      case 6: return tile_rows<6, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period);
      default: break;
    }
  }
  switch (mr) {
    case 1: tile_rows<1, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period); break;
    case 2: tile_rows<2, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period); break;
    default: tile_rows<3, W>(out, ldo, x, ldx, w, bias, g0, g1, prefetch_bytes, phase, period); break;
  }
}

}  // namespace

int linear_bi_tile_max_rows() { return max_tile_rows<F32TileWeights>(); }

int linear_bi_tile_rows(int64_t batch) {
  return batch > max_tile_rows<F32TileWeights>() ? sweep_tile_rows<F32TileWeights>() : max_tile_rows<F32TileWeights>();
}

void linear_bi_tile(float* out, int64_t ldo, const float* x, int64_t ldx, const PackedLinear& w, const float* bias,
                    int mr, int g0, int g1, int64_t prefetch_bytes, int phase, int period) {
  DL_CHECK(w.dtype() == DType::kF32, "internal error: %s weights run in their own tiles (linear_bi_rows_tile_loop.h)",
           dtype_short_name(w.dtype()));
  tile_dispatch<F32TileWeights>(out, ldo, x, ldx, w, bias, mr, g0, g1, prefetch_bytes, phase, period);
}
