// The part of the bf16 tiles (which take prepared activation rows, Bf16Rows;
// linear_bi_bf16_*.cpp) that is the same for every ISA: walking the row groups and
// choosing the tile height. Each file includes it inside its own namespace after
// defining rows_group_tile<MR>(..., const Rows& x, ...); a file that defines DISTLLM_ROWS_TILE_PAIRS before it has
// rows_group_tile<MR, NG> take 1 or 2 row groups and up to 6 rows per call. Not a
// normal header: no include guard, no includes.

namespace {

// With DISTLLM_ROWS_TILE_PAIRS the file defines rows_group_tile<MR, NG>, NG being 1
// or 2; a pair's second group may be partial (n_valid is the last group's).
template <int MR, class Rows>
void rows_tile_range(float* out, int64_t ldo, const Rows& x, int64_t row0, const PackedLinear& w, const float* bias,
                     int g0, int g1) {
  int g = g0;
#ifdef DISTLLM_ROWS_TILE_PAIRS
  for (; g + 1 < g1; g += 2) {
    const int n0 = g * PackedLinear::kRows;
    const int last = w.N() - n0 - PackedLinear::kRows;
    rows_group_tile<MR, 2>(out, ldo, x, row0, w, g, bias, n0, last < PackedLinear::kRows ? last : PackedLinear::kRows);
  }
#endif
  for (; g < g1; ++g) {
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    rows_group_tile<MR>(out, ldo, x, row0, w, g, bias, n0, n_valid);
  }
}

// The most rows rows_tile takes per call, tied to the cases it dispatches: a file
// reports this (its linear_bi_*_tile_max_rows), never a number of its own.
#ifdef DISTLLM_ROWS_TILE_PAIRS
constexpr int kRowsTileMaxRows = 6;
#else
constexpr int kRowsTileMaxRows = 3;
#endif

template <class Rows>
void rows_tile(float* out, int64_t ldo, const Rows& x, int64_t row0, const PackedLinear& w, const float* bias, int mr,
               int g0, int g1) {
  switch (mr) {
    case 1: rows_tile_range<1>(out, ldo, x, row0, w, bias, g0, g1); break;
    case 2: rows_tile_range<2>(out, ldo, x, row0, w, bias, g0, g1); break;
#ifdef DISTLLM_ROWS_TILE_PAIRS
    case 4: rows_tile_range<4>(out, ldo, x, row0, w, bias, g0, g1); break;
    case 5: rows_tile_range<5>(out, ldo, x, row0, w, bias, g0, g1); break;
    case 6: rows_tile_range<6>(out, ldo, x, row0, w, bias, g0, g1); break;
#endif
    default: rows_tile_range<3>(out, ldo, x, row0, w, bias, g0, g1); break;
  }
}

}  // namespace
