// The part of the tiles that take prepared activation rows (int8: Q8Rows, bf16:
// Bf16Rows; linear_bi_q8_*.cpp, linear_bi_bf16_*.cpp) that is the same for every
// ISA: walking the row groups and choosing the tile height. Each file includes it
// inside its own namespace after defining rows_group_tile<MR>(..., const Rows& x,
// ...) for its Rows type. Not a normal header: no include guard, no includes.

namespace {

template <int MR, class Rows>
void rows_tile_range(float* out, int64_t ldo, const Rows& x, int64_t row0, const PackedLinear& w, const float* bias,
                     int g0, int g1) {
  for (int g = g0; g < g1; ++g) {
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    rows_group_tile<MR>(out, ldo, x, row0, w, g, bias, n0, n_valid);
  }
}

template <class Rows>
void rows_tile(float* out, int64_t ldo, const Rows& x, int64_t row0, const PackedLinear& w, const float* bias, int mr,
               int g0, int g1) {
  switch (mr) {
    case 1: rows_tile_range<1>(out, ldo, x, row0, w, bias, g0, g1); break;
    case 2: rows_tile_range<2>(out, ldo, x, row0, w, bias, g0, g1); break;
    default: rows_tile_range<3>(out, ldo, x, row0, w, bias, g0, g1); break;
  }
}

}  // namespace
