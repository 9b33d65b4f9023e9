// Out-of-place matrix transposes for the CPU kernels: the whole-sequence dW products take their
// left operand ([x, h]ᵀ, [L·B] columns) built contiguous by these, and CudnnRNN writes its
// weight gradients back into the params' layout with them.
//
// float32 goes through register tiles, 16 x 16 on AVX-512 (16 loads, 64 shuffles, 16 stores per
// tile), 8 x 8 on AVX2 (8 loads, 24 shuffles, 8 stores), the widest the CPU (and cpu::isa())
// has: the plain tiled loop, one element at a time, is several times slower than the tiles on
// BlockLSTM's [x, h]ᵀ, and ATen's transposing copy runs on one thread. Everything else takes
// the plain loop.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>

#include "cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TLG_HAVE_REGISTER_TILES 1
#endif

namespace torch_lstm_grad::cpu {

namespace detail {

// dst[j, i] = src[i, j] for i in [i0, i1), j in [j0, j1), one element at a time.
template <typename T>
inline void transpose_scalar(const T* src, int64_t lds, T* dst, int64_t ldd, int64_t i0,
                             int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t i = i0; i < i1; ++i) dst[j * ldd + i] = src[i * lds + j];
  }
}

#if defined(TLG_HAVE_REGISTER_TILES)
// GCC 12's unmasked AVX-512 shuffles pass _mm512_undefined_ps(), which it defines as a
// self-initialised variable, and -Wall then reports "'__Y' is used uninitialized" once per
// shuffle inlined here (GCC bug 105593, fixed in GCC 13). Nothing is read uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// One 16 x 16 float tile: dst rows j = 0..15 get src columns j. Unpacking pairs of rows (32, then
// 64 bits) leaves, in 128-bit lane l of vector 4g + c, column 4l + c of rows 4g..4g+3; two rounds
// of 128-bit lane shuffles then gather the four row groups of each column.
__attribute__((target("avx512f"))) inline void transpose_16x16(const float* src, int64_t lds,
                                                                float* dst, int64_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {
    // Lanes l of the row groups' vectors A, B, C, D (rows 0-3, 4-7, 8-11, 12-15) for column
    // 4l + c: [A0 A1 B0 B1], [A2 A3 B2 B3], [C0 C1 D0 D1], [C2 C3 D2 D3], then [Al Bl Cl Dl].
    const __m512 v0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    _mm512_storeu_ps(dst + (c + 0) * ldd, _mm512_shuffle_f32x4(v0, v2, 0x88));
    _mm512_storeu_ps(dst + (c + 4) * ldd, _mm512_shuffle_f32x4(v0, v2, 0xDD));
    _mm512_storeu_ps(dst + (c + 8) * ldd, _mm512_shuffle_f32x4(v1, v3, 0x88));
    _mm512_storeu_ps(dst + (c + 12) * ldd, _mm512_shuffle_f32x4(v1, v3, 0xDD));
  }
}

#pragma GCC diagnostic pop

// One 8 x 8 float tile, the AVX2 form of transpose_16x16. Unpacking pairs of rows (32, then 64
// bits) leaves, in 128-bit lane l of vector 4g + c, column 4l + c of rows 4g..4g+3; one 128-bit
// lane exchange then joins the two row groups' halves of each column.
__attribute__((target("avx2"))) inline void transpose_8x8(const float* src, int64_t lds,
                                                           float* dst, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}

// Rows [j0, j1) of dst, j1 - j0 a multiple of the tile width W: full W x W tiles by Tile (a call
// each: the tile functions are compiled for their instruction set), the ragged end of i
// element-wise. Along src's rows first: walking down a column strip instead (16 dst rows at a
// time) would read src at a stride of whole rows, several times slower even on cache-resident
// matrices of a few thousand rows.
template <int64_t W, void (*Tile)(const float*, int64_t, float*, int64_t)>
void transpose_rows_in_tiles(const float* src, int64_t m, int64_t lds, float* dst, int64_t ldd,
                             int64_t j0, int64_t j1) {
  const int64_t whole = m / W * W;
  for (int64_t i = 0; i < whole; i += W) {
    for (int64_t j = j0; j < j1; j += W) Tile(src + i * lds + j, lds, dst + j * ldd + i, ldd);
  }
  transpose_scalar(src, lds, dst, ldd, whole, m, j0, j1);
}
#endif

// The width of the register tiles float32 transposes take here: 16 (AVX-512), 8 (AVX2), or 0
// (none: the plain loop).
inline int64_t transpose_tile() {
#if defined(TLG_HAVE_REGISTER_TILES)
  static const int64_t tile = cpu::isa() == Isa::kAvx512 && cpu_has("avx512_f") ? 16
                              : cpu::isa() >= Isa::kAvx2 && cpu_has("avx2")    ? 8
                                                                                : 0;
  return tile;
#else
  return 0;
#endif
}

// Rows [j0, j1) of dst = srcᵀ (src [m, ·] with row stride lds) in transpose_tile()'s tiles;
// j1 - j0 a multiple of the tile, which must not be 0.
inline void transpose_rows_tiled(const float* src, int64_t m, int64_t lds, float* dst,
                                 int64_t ldd, int64_t j0, int64_t j1) {
#if defined(TLG_HAVE_REGISTER_TILES)
  if (transpose_tile() == 16) {
    return transpose_rows_in_tiles<16, transpose_16x16>(src, m, lds, dst, ldd, j0, j1);
  }
  return transpose_rows_in_tiles<8, transpose_8x8>(src, m, lds, dst, ldd, j0, j1);
#else
  TORCH_INTERNAL_ASSERT(false, "transpose_rows_tiled: built without x86 register tiles");
#endif
}

}  // namespace detail

// dst[j, i] = src[i, j] for an [m, n] src with row stride lds, into rows of stride ldd, split
// over the threads by blocks of dst rows. Other types (or no register tiles) in 32 x 32 tiles of
// the plain loop, so both sides of a tile stay in cache.
template <typename T>
void transpose(const T* src, int64_t m, int64_t n, int64_t lds, T* dst, int64_t ldd) {
  if constexpr (std::is_same_v<T, float>) {
    if (const int64_t tile = detail::transpose_tile(); tile > 0) {
      const int64_t whole = n / tile * tile;
      at::parallel_for(0, whole / tile, 64 / tile, [&](int64_t c0, int64_t c1) {
        detail::transpose_rows_tiled(src, m, lds, dst, ldd, c0 * tile, c1 * tile);
      });
      detail::transpose_scalar(src, lds, dst, ldd, 0, m, whole, n);
      return;
    }
  }
  constexpr int64_t kTile = 32;
  at::parallel_for(0, (n + kTile - 1) / kTile, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t jb = c0 * kTile; jb < std::min(n, c1 * kTile); jb += kTile) {
      for (int64_t ib = 0; ib < m; ib += kTile) {
        detail::transpose_scalar(src, lds, dst, ldd, ib, std::min(m, ib + kTile), jb,
                                 std::min(n, jb + kTile));
      }
    }
  });
}

// dst = srcᵀ (src [m, n], dst an [n, m] view): float32/64 and bfloat16 with unit-stride rows in
// parallel (ATen's transposing copy runs on one thread), anything else by ATen.
inline void transpose_into(at::Tensor& dst, const at::Tensor& src) {
  if (src.scalar_type() != dst.scalar_type() || dst.stride(1) != 1 || src.stride(1) != 1 ||
      src.scalar_type() == at::kHalf) {
    dst.copy_(src.t());
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, src.scalar_type(), "transpose_into", [&] {
    transpose(src.const_data_ptr<scalar_t>(), src.size(0), src.size(1), src.stride(0),
              dst.data_ptr<scalar_t>(), dst.stride(0));
  });
}

}  // namespace torch_lstm_grad::cpu
