// The part of the int8 tiles (linear_bi_q8_*.cpp) that is the same for every ISA:
// walking the row groups and choosing the tile height. Each ISA's file includes it
// inside its own namespace after defining q8_group_tile<MR>. Not a normal header:
// no include guard, no includes of its own.

namespace {

template <int MR>
void q8_tile_rows(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w, const float* bias,
                  int g0, int g1) {
  for (int g = g0; g < g1; ++g) {
    const int n0 = g * PackedLinear::kRows;
    const int n_valid = w.N() - n0 < PackedLinear::kRows ? w.N() - n0 : PackedLinear::kRows;
    q8_group_tile<MR>(out, ldo, x, row0, static_cast<const int8_t*>(w.group_data(g)), w.group_scales(g),
                      w.k_chunks(), bias, n0, n_valid);
  }
}

}  // namespace

void linear_bi_q8_tile(float* out, int64_t ldo, const Q8Rows& x, int64_t row0, const PackedLinear& w,
                       const float* bias, int mr, int g0, int g1) {
  switch (mr) {
    case 1: q8_tile_rows<1>(out, ldo, x, row0, w, bias, g0, g1); break;
    case 2: q8_tile_rows<2>(out, ldo, x, row0, w, bias, g0, g1); break;
    default: q8_tile_rows<3>(out, ldo, x, row0, w, bias, g0, g1); break;
  }
}
