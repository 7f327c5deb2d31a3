// Host mirror of the FP8 quantizers (templates/fp8_quant.cuh): e4m3 encoding and decoding and
// the tile and block rules, bit for bit, for the tests (the CPU test checks the rounding rules,
// the GPU test holds the kernels' bytes and scales to these). Header-only, no CUDA.
//
// e4m3 (OCP FP8, "fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no inf; 0x7F / 0xFF NaN;
// largest finite 448 (0x7E), smallest subnormal 2^-9.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace moejit::fp8 {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr int kTile = 128;

inline float e4m3_to_float(std::uint8_t b) {
    const float sign = (b & 0x80) ? -1.0f : 1.0f;
    const int exp = (b >> 3) & 0xF, mant = b & 0x7;
    if (exp == 0xF && mant == 0x7) return std::nanf("");
    if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // subnormal: m/8 * 2^-6
    return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}

inline bool e4m3_is_nan(std::uint8_t b) { return (b & 0x7F) == 0x7F; }

// cvt.rn.satfinite.e4m3: round to nearest even, magnitudes above 448 after rounding (inf
// included) saturate to 448, NaN -> NaN (0x7F with the input's sign).
inline std::uint8_t float_to_e4m3(float x) {
    const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    if (std::isnan(x)) return sign | 0x7F;
    const float a = std::fabs(x);
    if (a > kE4m3Max) return sign | 0x7E;  // every such value rounds above 448 or to it
    if (a < std::ldexp(1.0f, -6)) {        // subnormal range: steps of 2^-9
        const float m = std::nearbyint(a * 512.0f);  // exact scaling; ties to even
        return sign | static_cast<std::uint8_t>(m);  // m == 8 is 0x08, the smallest normal
    }
    int e = 0;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1
    const int ue = e - 1;
    float m = std::nearbyint(std::ldexp(a, 3 - ue));  // in [8, 16]
    int exp = ue;
    if (m == 16.0f) {
        m = 8.0f;
        ++exp;
    }
    const int code = ((exp + 7) << 3) | (static_cast<int>(m) - 8);
    if (code > 0x7E) return sign | 0x7E;
    return sign | static_cast<std::uint8_t>(code);
}

inline float bf16_to_float(std::uint16_t bits) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// The scale of a tile with this amax (NaN ignored, from 0): amax / 448, or 1 when that is 0.
inline float tile_scale(float amax) {
    const float s = amax / kE4m3Max;
    return s > 0.0f ? s : 1.0f;
}

// x / s as the quantizers compute it: x times 1 / s (rounded once), or x / s where 1 / s
// overflows (s below 2^-128).
inline float scaled_value(float x, float s) {
    const float inv = 1.0f / s;
    if (std::isinf(inv)) return x / s;
    volatile float product = x * inv;  // one rounding, never contracted with anything
    return product;
}

// fmaxf's rule: a NaN operand is ignored.
inline float amax_step(float amax, float v) {
    const float a = std::fabs(v);
    return std::isnan(a) ? amax : (a > amax ? a : amax);
}

struct Quantized {
    std::vector<std::uint8_t> q;
    std::vector<float> scales;
};

// bf16 [rows, k] -> e4m3 [rows, k] + scales [rows, ceil(k/128)].
inline Quantized quantize_rows(const std::vector<std::uint16_t> &x, std::int64_t rows, std::int64_t k) {
    const std::int64_t kb_count = (k + kTile - 1) / kTile;
    Quantized out{std::vector<std::uint8_t>(static_cast<std::size_t>(rows * k)),
                  std::vector<float>(static_cast<std::size_t>(rows * kb_count))};
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t kb = 0; kb < kb_count; ++kb) {
            const std::int64_t c0 = kb * kTile, c1 = std::min<std::int64_t>(k, c0 + kTile);
            float amax = 0.0f;
            for (std::int64_t c = c0; c < c1; ++c) amax = amax_step(amax, bf16_to_float(x[r * k + c]));
            const float s = tile_scale(amax);
            out.scales[r * kb_count + kb] = s;
            for (std::int64_t c = c0; c < c1; ++c) out.q[r * k + c] = float_to_e4m3(scaled_value(bf16_to_float(x[r * k + c]), s));
        }
    return out;
}

// bf16 [experts, n, k] -> e4m3 [experts, n, k] + scales [experts, ceil(n/128), ceil(k/128)].
inline Quantized quantize_blocks(const std::vector<std::uint16_t> &w, std::int64_t experts, std::int64_t n,
                                 std::int64_t k) {
    const std::int64_t nb_count = (n + kTile - 1) / kTile, kb_count = (k + kTile - 1) / kTile;
    Quantized out{std::vector<std::uint8_t>(static_cast<std::size_t>(experts * n * k)),
                  std::vector<float>(static_cast<std::size_t>(experts * nb_count * kb_count))};
    for (std::int64_t e = 0; e < experts; ++e)
        for (std::int64_t nb = 0; nb < nb_count; ++nb)
            for (std::int64_t kb = 0; kb < kb_count; ++kb) {
                const std::int64_t r0 = nb * kTile, r1 = std::min<std::int64_t>(n, r0 + kTile);
                const std::int64_t c0 = kb * kTile, c1 = std::min<std::int64_t>(k, c0 + kTile);
                const std::int64_t base = e * n * k;
                float amax = 0.0f;
                for (std::int64_t r = r0; r < r1; ++r)
                    for (std::int64_t c = c0; c < c1; ++c) amax = amax_step(amax, bf16_to_float(w[base + r * k + c]));
                const float s = tile_scale(amax);
                out.scales[(e * nb_count + nb) * kb_count + kb] = s;
                for (std::int64_t r = r0; r < r1; ++r)
                    for (std::int64_t c = c0; c < c1; ++c)
                        out.q[base + r * k + c] = float_to_e4m3(scaled_value(bf16_to_float(w[base + r * k + c]), s));
            }
    return out;
}

// Weight-gradient operands (quantize_cols_kernel): bf16 [rows, c] with rows grouped per expert
// by offsets [E+1] -> e4m3 [c, padded_rows] (transposed) + scales [padded_rows / 128, c], one per
// 128 rows x 1 column; expert e's rows fill padded blocks [cum[e], cum[e+1]) (cum: exclusive
// prefix sum of ceil(count_e / 128)), the rest of its last block zeros. Offsets are bounded as
// the device bounds them (sched::expert_rows: each clamped into [0, rows], end >= begin), blocks
// at or past padded_rows / 128 are not written; bytes and scales never written stay `fill`.
struct QuantizedCols {
    std::vector<std::uint8_t> q;
    std::vector<float> scales;
    std::vector<std::int64_t> cum;  // [E+1] padded block offsets (unbounded)
};
inline QuantizedCols quantize_cols(const std::vector<std::uint16_t> &x, std::int64_t rows, std::int64_t c,
                                   const std::vector<std::int32_t> &offsets, std::int64_t padded_rows,
                                   std::uint8_t fill_q = 0, float fill_scale = 0.0f) {
    const std::int64_t experts = static_cast<std::int64_t>(offsets.size()) - 1, blocks = padded_rows / kTile;
    QuantizedCols out{std::vector<std::uint8_t>(static_cast<std::size_t>(c * padded_rows), fill_q),
                      std::vector<float>(static_cast<std::size_t>(blocks * c), fill_scale),
                      std::vector<std::int64_t>(static_cast<std::size_t>(experts + 1), 0)};
    auto clamp_row = [&](std::int64_t v) { return std::min<std::int64_t>(std::max<std::int64_t>(v, 0), rows); };
    for (std::int64_t e = 0; e < experts; ++e) {
        const std::int64_t begin = clamp_row(offsets[e]), end = std::max(clamp_row(offsets[e + 1]), begin);
        const std::int64_t first = out.cum[e], count = (end - begin + kTile - 1) / kTile;
        out.cum[e + 1] = first + count;
        for (std::int64_t j = 0; j < count && first + j < blocks; ++j) {
            const std::int64_t pb = first + j, row0 = begin + j * kTile, valid = std::min<std::int64_t>(kTile, end - row0);
            for (std::int64_t col = 0; col < c; ++col) {
                float amax = 0.0f;
                for (std::int64_t r = 0; r < valid; ++r) amax = amax_step(amax, bf16_to_float(x[(row0 + r) * c + col]));
                const float s = tile_scale(amax);
                out.scales[pb * c + col] = s;
                for (std::int64_t r = 0; r < kTile; ++r)
                    out.q[col * padded_rows + pb * kTile + r] =
                        r < valid ? float_to_e4m3(scaled_value(bf16_to_float(x[(row0 + r) * c + col]), s)) : 0;
            }
        }
    }
    return out;
}

}  // namespace moejit::fp8
