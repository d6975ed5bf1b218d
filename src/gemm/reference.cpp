// CPU side of the GEMM family: float64 reference GEMM and direct convolution (the tests' ground truth), and the
// conv weight reorder [Co, Ci, Kh, Kw] -> [Co, Kh, Kw, Ci] before quantization.
#include <algorithm>
#include <string>
#include <vector>

#include "qdec/gemm.h"

namespace qdec {

namespace {
double act_f64(double v, Activation a) {
  if (a == Activation::kReLU) return v < 0 ? 0 : v;
  if (a == Activation::kReLU6) return v < 0 ? 0 : (v > 6 ? 6 : v);
  return v;
}
}  // namespace

void gemm_reference(int m, int n, int k, const double* x, const double* w, const double* bias, Activation act,
                    double* y) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      const double* xr = x + size_t(i) * k;
      const double* wr = w + size_t(j) * k;
      for (int c = 0; c < k; ++c) s += xr[c] * wr[c];
      y[size_t(i) * n + j] = act_f64(s + (bias ? bias[j] : 0.0), act);
    }
  }
}

void conv2d_reference(const Conv2dParams& p, const double* x, const double* w, const double* bias, double* y) {
  const int oh = p.out_h(), ow = p.out_w();
  for (int b = 0; b < p.batch; ++b) {
    for (int co = 0; co < p.out_channels; ++co) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          double s = bias ? bias[co] : 0.0;
          for (int ci = 0; ci < p.in_channels; ++ci) {
            for (int ky = 0; ky < p.kernel_h; ++ky) {
              const int iy = oy * p.stride_h - p.pad_h + ky * p.dilation_h;
              if (iy < 0 || iy >= p.in_h) continue;
              for (int kx = 0; kx < p.kernel_w; ++kx) {
                const int ix = ox * p.stride_w - p.pad_w + kx * p.dilation_w;
                if (ix < 0 || ix >= p.in_w) continue;
                s += x[((size_t(b) * p.in_channels + ci) * p.in_h + iy) * p.in_w + ix] *
                     w[((size_t(co) * p.in_channels + ci) * p.kernel_h + ky) * p.kernel_w + kx];
              }
            }
          }
          y[((size_t(b) * p.out_channels + co) * oh + oy) * ow + ox] = act_f64(s, p.act);
        }
      }
    }
  }
}

Status quantize_conv_weights(const float* w, int co, int ci, int kh, int kw, const WeightFormat& format,
                             PackedWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_weight_format(format));
  if (co < 1 || ci < 1 || kh < 1 || kw < 1)
    return Status(StatusCode::kInvalidArgument, "conv weight dims " + std::to_string(co) + "x" + std::to_string(ci) +
                                                    "x" + std::to_string(kh) + "x" + std::to_string(kw) +
                                                    " must all be >= 1");
  if (format.group_size != 0 && ci % format.group_size != 0)
    return Status(StatusCode::kInvalidArgument, "in_channels " + std::to_string(ci) +
                                                    " is not a multiple of the group size " +
                                                    std::to_string(format.group_size) + " (groups run along Ci)");
  const int k = kh * kw * ci;
  std::vector<float> r(size_t(co) * k);
  for (int o = 0; o < co; ++o)
    for (int c = 0; c < ci; ++c)
      for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x)
          r[size_t(o) * k + (y * kw + x) * ci + c] = w[((size_t(o) * ci + c) * kh + y) * kw + x];
  return quantize_weights(r.data(), co, k, format, out);
}

}  // namespace qdec
