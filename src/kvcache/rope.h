// RoPE as the append kernel applies it, defined once for the CPU reference and the kernel so that the two
// produce identical bits (docs/kvcache.md, "RoPE"). sin and cos come from a small double-precision routine
// written only with explicit fma and rounded products (no operation a compiler could contract differently on
// the host and the device); the rotation itself is two float fmas.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

namespace qdec::rope {

QDEC_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
QDEC_HD float mulf_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
QDEC_HD double fma_rn(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
QDEC_HD float fmaf_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

// sin and cos of x for |x| <= 2^24 (positions up to 2^24 times frequencies <= 1): reduction by pi/2 in two
// parts (the first has 33 significant bits, so k * part1 is exact for |k| < 2^20 and the error for larger k
// stays below 1e-9 rad), then Taylor polynomials on |r| <= pi/4 (truncation error below 1e-19).
QDEC_HD void sincos_ref(double x, double* s, double* c) {
  constexpr double kTwoOverPi = 6.36619772367581382433e-01;
  constexpr double kPio2Hi = 1.57079632673412561417e+00;
  constexpr double kPio2Lo = 6.07710050650619224932e-11;
  const double k = rint(mul_rn(x, kTwoOverPi));
  double r = fma_rn(-k, kPio2Hi, x);
  r = fma_rn(-k, kPio2Lo, r);
  const double r2 = mul_rn(r, r);
  // sin r = r (1 - r^2/3! + r^4/5! - ...), cos r = 1 - r^2/2! + r^4/4! - ...
  double ps = -1.0 / 1307674368000.0;  // -1/15!
  ps = fma_rn(ps, r2, 1.0 / 6227020800.0);
  ps = fma_rn(ps, r2, -1.0 / 39916800.0);
  ps = fma_rn(ps, r2, 1.0 / 362880.0);
  ps = fma_rn(ps, r2, -1.0 / 5040.0);
  ps = fma_rn(ps, r2, 1.0 / 120.0);
  ps = fma_rn(ps, r2, -1.0 / 6.0);
  const double sin_r = fma_rn(mul_rn(ps, r2), r, r);
  double pc = 1.0 / 20922789888000.0;  // 1/16!
  pc = fma_rn(pc, r2, -1.0 / 87178291200.0);
  pc = fma_rn(pc, r2, 1.0 / 479001600.0);
  pc = fma_rn(pc, r2, -1.0 / 3628800.0);
  pc = fma_rn(pc, r2, 1.0 / 40320.0);
  pc = fma_rn(pc, r2, -1.0 / 720.0);
  pc = fma_rn(pc, r2, 1.0 / 24.0);
  pc = fma_rn(pc, r2, -0.5);
  const double cos_r = fma_rn(pc, r2, 1.0);
  const int q = static_cast<int>(static_cast<long long>(k) & 3);
  // Quadrant q: sin(x) = sin r, cos r, -sin r, -cos r; cos(x) = cos r, -sin r, -cos r, sin r.
  const double s_abs = (q & 1) ? cos_r : sin_r;
  const double c_abs = (q & 1) ? sin_r : cos_r;
  *s = (q & 2) ? -s_abs : s_abs;
  *c = (q == 1 || q == 2) ? -c_abs : c_abs;
}

// Frequency of rotary pair i: theta^(-2i / rotary_dim), in double (computed on the host, passed to kernels).
inline double inv_freq(float theta, int i, int rotary_dim) {
  return std::pow(static_cast<double>(theta), -2.0 * i / rotary_dim);
}

// sin and cos of pair i's angle at `position`, rounded to float (what the rotation uses).
QDEC_HD void pair_sincos(double inv_freq_i, int position, float* s, float* c) {
  double sd, cd;
  sincos_ref(mul_rn(static_cast<double>(position), inv_freq_i), &sd, &cd);
  *s = static_cast<float>(sd);
  *c = static_cast<float>(cd);
}

// Rotated value of dim d (< rotary_dim) given itself, its partner and its pair's sin and cos: the pair
// (a, b) = (x[first], x[second]) turns into (a c - b s, b c + a s).
QDEC_HD float rotate_sc(bool is_first, float self, float partner, float s, float c) {
  return is_first ? fmaf_rn(self, c, -mulf_rn(partner, s)) : fmaf_rn(self, c, mulf_rn(partner, s));
}

QDEC_HD float rotate(bool is_first, float self, float partner, double inv_freq_i, int position) {
  float s, c;
  pair_sincos(inv_freq_i, position, &s, &c);
  return rotate_sc(is_first, self, partner, s, c);
}

// Partner dim and pair index of dim d (< rotary_dim): style 1 = rotate-half, 2 = interleaved.
QDEC_HD void pair_of(int style, int rotary_dim, int d, int* partner, int* pair, bool* is_first) {
  if (style == 1) {
    const int half = rotary_dim / 2;
    *is_first = d < half;
    *pair = *is_first ? d : d - half;
    *partner = *is_first ? d + half : d - half;
  } else {
    *is_first = (d & 1) == 0;
    *pair = d >> 1;
    *partner = d ^ 1;
  }
}

}  // namespace qdec::rope
