// Activation-quantized formats on the CPU: per-token int8 activations (plain and after RMSNorm), W8A8 per channel
// and per K-block (seed 003), and QServe's W4A8 (QoQ progressive group quantization, and the per-channel
// variant), with exact dequantization and the float64 reference GEMMs. docs/formats.md ("W4A8 (QoQ) and W8A8
// formats") is the specification; tests/test_int8_quant.cpp pins it down.
#include "qdec/int8_quant.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "qdec/formats.h"

namespace qdec {

namespace {

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

Status validate_mk(const char* what, int rows, int k) {
  if (rows < 1) return invalid(std::string(what) + " rows " + std::to_string(rows) + " must be >= 1");
  if (k < 1) return invalid(std::string(what) + " K " + std::to_string(k) + " must be >= 1");
  if (static_cast<long long>(rows) * k > (1LL << 40)) return invalid(std::string(what) + " rows * K is too large");
  return Status::Ok();
}

Status validate_group(const char* what, int group, int k) {
  if (group != 32 && group != 64 && group != 128)
    return invalid(std::string(what) + " " + std::to_string(group) + " is not supported (supported: 32, 64, 128)");
  if (k % group != 0)
    return invalid("K " + std::to_string(k) + " is not a multiple of the " + what + " " + std::to_string(group));
  return Status::Ok();
}

Status validate_gemm_k(int k) {
  if (k > kInt8GemmMaxK)
    return invalid("K " + std::to_string(k) + " exceeds " + std::to_string(kInt8GemmMaxK) +
                   " (int32 accumulation could overflow)");
  return Status::Ok();
}

// The per-row symmetric quantizer of the activations (and of W8 channels): fp32 scale, codes -127..127.
void quantize_row_sym(const float* x, int k, int8_t* q, float* scale, int32_t* sum) {
  float amax = 0.0f;
  for (int c = 0; c < k; ++c)
    if (std::isfinite(x[c])) amax = std::max(amax, std::fabs(x[c]));
  const float s = amax / 127.0f;
  *scale = s;
  int32_t acc = 0;
  for (int c = 0; c < k; ++c) {
    int8_t v = 0;
    if (s != 0.0f && !std::isnan(x[c])) v = static_cast<int8_t>(std::clamp(std::rint(x[c] / s), -127.0f, 127.0f));
    q[c] = v;
    acc += v;
  }
  if (sum) *sum = acc;
}

Status check_finite_row(const char* what, const float* w, int row, int k) {
  for (int c = 0; c < k; ++c)
    if (!std::isfinite(w[c]))
      return invalid(std::string(what) + " weight (" + std::to_string(row) + ", " + std::to_string(c) + ") is " +
                     std::to_string(w[c]) + "; weights must be finite");
  return Status::Ok();
}

// fp16 scale of a weight row: InvalidArgument if it exceeds the fp16 maximum.
Status fp16_scale(const char* what, float s, int row, uint16_t* bits) {
  if (!(s <= 65504.0f))
    return invalid(std::string(what) + " row " + std::to_string(row) + ": scale " + std::to_string(s) +
                   " exceeds the fp16 maximum 65504");
  *bits = float_to_fp16_bits_satfinite(s);
  return Status::Ok();
}

int nibble(const std::vector<uint8_t>& bytes, size_t index) {
  const uint8_t b = bytes[index / 2];
  return index % 2 ? b >> 4 : b & 0x0F;
}
void put_nibble(std::vector<uint8_t>* bytes, size_t index, int v) {
  uint8_t& b = (*bytes)[index / 2];
  b = static_cast<uint8_t>(index % 2 ? (b & 0x0F) | (v << 4) : (b & 0xF0) | v);
}

Status check_activations(const Int8Activations& x) {
  if (x.m < 1 || x.k < 1 || x.q.size() != size_t(x.m) * x.k || x.scale.size() != size_t(x.m) ||
      x.row_sum.size() != size_t(x.m))
    return invalid("activations are not a quantized [" + std::to_string(x.m) + ", " + std::to_string(x.k) +
                   "] tensor (sizes do not match)");
  return Status::Ok();
}

Status check_k_match(int xk, int wk) {
  if (xk != wk) return invalid("activation K " + std::to_string(xk) + " does not match weight K " + std::to_string(wk));
  return validate_gemm_k(xk);
}

int32_t dot_i8(const int8_t* a, const int8_t* b, int k) {
  int32_t acc = 0;
  for (int c = 0; c < k; ++c) acc += int32_t(a[c]) * int32_t(b[c]);
  return acc;
}

}  // namespace

// ---- Activations ---------------------------------------------------------------------------------------------------

Status quantize_activations_int8(const float* x, int m, int k, Int8Activations* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("activation", m, k));
  if (!x) return invalid("activation pointer x is null");
  if (!out) return invalid("output pointer out is null");
  Int8Activations r;
  r.m = m;
  r.k = k;
  r.q.assign(size_t(m) * k, 0);
  r.scale.assign(m, 0.0f);
  r.row_sum.assign(m, 0);
  for (int i = 0; i < m; ++i)
    quantize_row_sym(x + size_t(i) * k, k, r.q.data() + size_t(i) * k, &r.scale[i], &r.row_sum[i]);
  *out = std::move(r);
  return Status::Ok();
}

Status quantize_activations_int8_bf16(const uint16_t* x_bits, int m, int k, Int8Activations* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("activation", m, k));
  if (!x_bits) return invalid("activation pointer x_bits is null");
  std::vector<float> x(size_t(m) * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_to_float(x_bits[i]);
  return quantize_activations_int8(x.data(), m, k, out);
}

namespace {
// One chunk's part of the RMSNorm sum of squares (qdec/int8_quant.h): n <= 8 elements, an fp32 FMA chain, or the
// float64 sum where that chain is not finite. The GPU kernels (act_quant.cu, chunk_ss) compute the same bits.
double chunk_sum_squares(const float* x, int n) {
  float p = x[0] * x[0];
  for (int i = 1; i < n; ++i) p = std::fma(x[i], x[i], p);
  if (std::isfinite(p)) return double(p);
  double d = 0.0;
  for (int i = 0; i < n; ++i) d += double(x[i]) * double(x[i]);
  return d;
}
}  // namespace

Status rmsnorm_quantize_int8(const float* x, const float* weight, int m, int k, float eps, Int8Activations* out,
                             float* y_out) {
  QDEC_RETURN_IF_ERROR(validate_mk("activation", m, k));
  if (!x) return invalid("activation pointer x is null");
  if (!weight) return invalid("RMSNorm weight pointer is null");
  if (!out) return invalid("output pointer out is null");
  if (!std::isfinite(eps) || eps < 0.0f)
    return invalid("RMSNorm eps " + std::to_string(eps) + " must be finite and >= 0");
  std::vector<float> y(size_t(m) * k);
  for (int i = 0; i < m; ++i) {
    const float* xr = x + size_t(i) * k;
    double ss = 0.0;
    for (int c = 0; c < k; c += 8) ss += chunk_sum_squares(xr + c, std::min(8, k - c));
    const float ms = static_cast<float>(ss / k);
    const float r = 1.0f / std::sqrt(ms + eps);
    for (int c = 0; c < k; ++c) y[size_t(i) * k + c] = (xr[c] * r) * weight[c];
  }
  QDEC_RETURN_IF_ERROR(quantize_activations_int8(y.data(), m, k, out));
  if (y_out) std::copy(y.begin(), y.end(), y_out);
  return Status::Ok();
}

Status rmsnorm_quantize_int8_bf16(const uint16_t* x_bits, const uint16_t* weight_bits, int m, int k, float eps,
                                  Int8Activations* out, float* y_out) {
  QDEC_RETURN_IF_ERROR(validate_mk("activation", m, k));
  if (!x_bits) return invalid("activation pointer x_bits is null");
  if (!weight_bits) return invalid("RMSNorm weight pointer is null");
  std::vector<float> x(size_t(m) * k), w(k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_to_float(x_bits[i]);
  for (int c = 0; c < k; ++c) w[c] = bf16_bits_to_float(weight_bits[c]);
  return rmsnorm_quantize_int8(x.data(), w.data(), m, k, eps, out, y_out);
}

void dequantize_activations_f64(const Int8Activations& x, double* out) {
  for (int i = 0; i < x.m; ++i)
    for (int c = 0; c < x.k; ++c) out[size_t(i) * x.k + c] = double(x.q[size_t(i) * x.k + c]) * double(x.scale[i]);
}

// ---- W8A8 per channel ----------------------------------------------------------------------------------------------

Status quantize_int8_channels(const float* w, int n, int k, Int8ChannelWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("weight", n, k));
  if (!w) return invalid("weight pointer w is null");
  if (!out) return invalid("output pointer out is null");
  Int8ChannelWeights r;
  r.n = n;
  r.k = k;
  r.q.assign(size_t(n) * k, 0);
  r.scale.assign(n, 0.0f);
  for (int i = 0; i < n; ++i) {
    QDEC_RETURN_IF_ERROR(check_finite_row("int8", w + size_t(i) * k, i, k));
    quantize_row_sym(w + size_t(i) * k, k, r.q.data() + size_t(i) * k, &r.scale[i], nullptr);
  }
  *out = std::move(r);
  return Status::Ok();
}

void dequantize_int8_channels_f64(const Int8ChannelWeights& w, double* out) {
  for (int i = 0; i < w.n; ++i)
    for (int c = 0; c < w.k; ++c) out[size_t(i) * w.k + c] = double(w.q[size_t(i) * w.k + c]) * double(w.scale[i]);
}

Status w8a8_gemm_reference(const Int8Activations& x, const Int8ChannelWeights& w, const float* bias, double* y,
                           int32_t* acc_out) {
  QDEC_RETURN_IF_ERROR(check_activations(x));
  if (w.n < 1 || w.q.size() != size_t(w.n) * w.k || w.scale.size() != size_t(w.n))
    return invalid("int8 weights are not a quantized [" + std::to_string(w.n) + ", " + std::to_string(w.k) +
                   "] tensor (sizes do not match)");
  QDEC_RETURN_IF_ERROR(check_k_match(x.k, w.k));
  if (!y) return invalid("output pointer y is null");
  for (int i = 0; i < x.m; ++i) {
    for (int j = 0; j < w.n; ++j) {
      const int32_t acc = dot_i8(x.q.data() + size_t(i) * x.k, w.q.data() + size_t(j) * w.k, x.k);
      if (acc_out) acc_out[size_t(i) * w.n + j] = acc;
      double v = double(acc) * double(x.scale[i]) * double(w.scale[j]);
      if (bias) v += double(bias[j]);
      y[size_t(i) * w.n + j] = v;
    }
  }
  return Status::Ok();
}

// ---- W8A8 per K-block ----------------------------------------------------------------------------------------------

Status quantize_int8_blocks(const float* x, int rows, int k, int block, Int8BlockQuant* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("block-quantized", rows, k));
  QDEC_RETURN_IF_ERROR(validate_group("block size", block, k));
  if (!x) return invalid("input pointer x is null");
  if (!out) return invalid("output pointer out is null");
  Int8BlockQuant r;
  r.rows = rows;
  r.k = k;
  r.block = block;
  const int nb = k / block;
  r.q.assign(size_t(rows) * k, 0);
  r.scale.assign(size_t(rows) * nb, 0.0f);
  r.offset.assign(size_t(rows) * nb, 0.0f);
  r.block_sum.assign(size_t(rows) * nb, 0);
  for (int i = 0; i < rows; ++i) {
    for (int b = 0; b < nb; ++b) {
      const float* xb = x + size_t(i) * k + size_t(b) * block;
      int8_t* qb = r.q.data() + size_t(i) * k + size_t(b) * block;
      float lo = 0.0f, hi = 0.0f;
      bool any = false;
      for (int c = 0; c < block; ++c) {
        if (!std::isfinite(xb[c])) continue;
        lo = any ? std::min(lo, xb[c]) : xb[c];
        hi = any ? std::max(hi, xb[c]) : xb[c];
        any = true;
      }
      const float s = (hi - lo) / 255.0f;
      const size_t mi = size_t(i) * nb + b;
      int32_t sum = 0;
      if (s == 0.0f || !std::isfinite(s)) {
        // A constant block (or none finite) is exact with codes 0. hi - lo overflowing float would give s = inf:
        // not reachable from finite inputs below 2^127, kept as "codes 0" for safety.
        r.scale[mi] = 0.0f;
        r.offset[mi] = lo;
        for (int c = 0; c < block; ++c) qb[c] = 0;
      } else {
        const float o = lo + 128.0f * s;
        r.scale[mi] = s;
        r.offset[mi] = o;
        for (int c = 0; c < block; ++c) {
          int8_t v = 0;
          if (!std::isnan(xb[c])) v = static_cast<int8_t>(std::clamp(std::rint((xb[c] - o) / s), -128.0f, 127.0f));
          qb[c] = v;
          sum += v;
        }
      }
      r.block_sum[mi] = sum;
    }
  }
  *out = std::move(r);
  return Status::Ok();
}

void dequantize_int8_blocks_f64(const Int8BlockQuant& x, double* out) {
  const int nb = x.num_blocks();
  for (int i = 0; i < x.rows; ++i)
    for (int c = 0; c < x.k; ++c) {
      const size_t mi = size_t(i) * nb + c / x.block;
      out[size_t(i) * x.k + c] = double(x.scale[mi]) * double(x.q[size_t(i) * x.k + c]) + double(x.offset[mi]);
    }
}

Status w8a8_block_gemm_reference(const Int8BlockQuant& a, const Int8BlockQuant& b, const float* bias, double* y) {
  for (const Int8BlockQuant* t : {&a, &b}) {
    const int nb = t->num_blocks();
    if (t->rows < 1 || t->block < 1 || t->k % t->block != 0 || t->q.size() != size_t(t->rows) * t->k ||
        t->scale.size() != size_t(t->rows) * nb || t->offset.size() != size_t(t->rows) * nb ||
        t->block_sum.size() != size_t(t->rows) * nb)
      return invalid("block-quantized operand [" + std::to_string(t->rows) + ", " + std::to_string(t->k) + "] block " +
                     std::to_string(t->block) + " has inconsistent sizes");
  }
  if (a.k != b.k) return invalid("operand K " + std::to_string(a.k) + " != " + std::to_string(b.k));
  if (a.block != b.block)
    return invalid("operand blocks " + std::to_string(a.block) + " and " + std::to_string(b.block) + " differ");
  if (!y) return invalid("output pointer y is null");
  const int nb = a.num_blocks(), L = a.block;
  for (int i = 0; i < a.rows; ++i) {
    for (int j = 0; j < b.rows; ++j) {
      double v = 0.0;
      for (int blk = 0; blk < nb; ++blk) {
        const size_t ai = size_t(i) * nb + blk, bi = size_t(j) * nb + blk;
        const int32_t c =
            dot_i8(a.q.data() + size_t(i) * a.k + size_t(blk) * L, b.q.data() + size_t(j) * b.k + size_t(blk) * L, L);
        const double sa = a.scale[ai], oa = a.offset[ai], sb = b.scale[bi], ob = b.offset[bi];
        v += sa * sb * double(c) + sa * ob * double(a.block_sum[ai]) + oa * sb * double(b.block_sum[bi]) +
             double(L) * oa * ob;
      }
      if (bias) v += double(bias[j]);
      y[size_t(i) * b.rows + j] = v;
    }
  }
  return Status::Ok();
}

// ---- W4A8 QoQ per group --------------------------------------------------------------------------------------------

int QoQGroupWeights::code(int row, int col) const {
  return nibble(codes, size_t(row) * k + col);
}
int QoQGroupWeights::zero(int row, int group) const {
  const size_t zrow = static_cast<size_t>(num_groups() + 1) / 2;  // bytes of zeros per row
  return nibble(group_zeros, size_t(row) * zrow * 2 + group);
}

Status qoq_quantize_int8_channels(const float* w, int n, int k, int8_t* q8, uint16_t* s0_bits) {
  QDEC_RETURN_IF_ERROR(validate_mk("weight", n, k));
  if (!w) return invalid("weight pointer w is null");
  if (!q8 || !s0_bits) return invalid("output pointer q8 or s0_bits is null");
  for (int i = 0; i < n; ++i) {
    const float* wr = w + size_t(i) * k;
    QDEC_RETURN_IF_ERROR(check_finite_row("qoq", wr, i, k));
    float amax = 0.0f;
    for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(wr[c]));
    QDEC_RETURN_IF_ERROR(fp16_scale("qoq", amax / float(kQoQProtectiveMax), i, &s0_bits[i]));
    const float s = fp16_bits_to_float(s0_bits[i]);
    const float p = float(kQoQProtectiveMax);
    for (int c = 0; c < k; ++c)
      q8[size_t(i) * k + c] = s == 0.0f ? int8_t{0} : static_cast<int8_t>(std::clamp(std::rint(wr[c] / s), -p, p));
  }
  return Status::Ok();
}

Status qoq_quantize_int8_groups(const int8_t* q8, const uint16_t* s0_bits, int n, int k, int group_size,
                                QoQGroupWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("weight", n, k));
  QDEC_RETURN_IF_ERROR(validate_group("group size", group_size, k));
  if (!q8 || !s0_bits) return invalid("input pointer q8 or s0_bits is null");
  if (!out) return invalid("output pointer out is null");
  QoQGroupWeights r;
  r.n = n;
  r.k = k;
  r.group_size = group_size;
  const int g = k / group_size, zrow = (g + 1) / 2;
  r.codes.assign(size_t(n) * k / 2, 0);
  r.group_scales.assign(size_t(n) * g, 0);
  r.group_zeros.assign(size_t(n) * zrow, 0);
  r.channel_scales.assign(s0_bits, s0_bits + n);
  for (int i = 0; i < n; ++i) {
    for (int gi = 0; gi < g; ++gi) {
      const int8_t* qg = q8 + size_t(i) * k + size_t(gi) * group_size;
      int lo = 0, hi = 0;
      for (int c = 0; c < group_size; ++c) {
        lo = std::min(lo, int(qg[c]));
        hi = std::max(hi, int(qg[c]));
      }
      const int s1 = std::max(1, (hi - lo + 14) / 15);              // ceil, 1..17
      const int z = static_cast<int>(std::rint(double(-lo) / s1));  // 0..15 (exact division, RNE ties)
      r.group_scales[size_t(i) * g + gi] = static_cast<uint8_t>(s1);
      put_nibble(&r.group_zeros, size_t(i) * zrow * 2 + gi, z);
      for (int c = 0; c < group_size; ++c) {
        const int q = std::clamp(static_cast<int>(std::rint(double(qg[c]) / s1)) + z, 0, 15);
        put_nibble(&r.codes, size_t(i) * k + size_t(gi) * group_size + c, q);
      }
    }
  }
  *out = std::move(r);
  return Status::Ok();
}

Status qoq_quantize_weights(const float* w, int n, int k, int group_size, QoQGroupWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("weight", n, k));
  QDEC_RETURN_IF_ERROR(validate_group("group size", group_size, k));
  std::vector<int8_t> q8(size_t(n) * k);
  std::vector<uint16_t> s0(n);
  QDEC_RETURN_IF_ERROR(qoq_quantize_int8_channels(w, n, k, q8.data(), s0.data()));
  return qoq_quantize_int8_groups(q8.data(), s0.data(), n, k, group_size, out);
}

void qoq_dequantize_int32(const QoQGroupWeights& w, int32_t* out) {
  for (int i = 0; i < w.n; ++i)
    for (int c = 0; c < w.k; ++c) {
      const int gi = c / w.group_size;
      out[size_t(i) * w.k + c] = (w.code(i, c) - w.zero(i, gi)) * w.scale(i, gi);
    }
}

Status qoq_dequantize_int8(const QoQGroupWeights& w, int8_t* out) {
  if (!out) return invalid("output pointer out is null");
  std::vector<int32_t> v(size_t(w.n) * w.k);
  qoq_dequantize_int32(w, v.data());
  Status first = Status::Ok();
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = static_cast<int8_t>(static_cast<uint8_t>(v[i] & 0xFF));
    if (first.ok() && (v[i] < -128 || v[i] > 127))
      first = invalid("qoq weight (" + std::to_string(i / w.k) + ", " + std::to_string(i % w.k) + ") dequantizes to " +
                      std::to_string(v[i]) +
                      ", outside int8 (its int8 intermediate left the protective range [-119, 119])");
  }
  return first;
}

void qoq_dequantize_f64(const QoQGroupWeights& w, double* out) {
  std::vector<int32_t> v(size_t(w.n) * w.k);
  qoq_dequantize_int32(w, v.data());
  for (int i = 0; i < w.n; ++i) {
    const double s0 = fp16_bits_to_float(w.channel_scales[i]);
    for (int c = 0; c < w.k; ++c) out[size_t(i) * w.k + c] = double(v[size_t(i) * w.k + c]) * s0;
  }
}

Status w4a8_group_gemm_reference(const Int8Activations& x, const QoQGroupWeights& w, const float* bias, double* y) {
  QDEC_RETURN_IF_ERROR(check_activations(x));
  if (w.n < 1 || w.group_size < 1 || w.k % w.group_size != 0 || w.codes.size() != size_t(w.n) * w.k / 2 ||
      w.group_scales.size() != size_t(w.n) * w.num_groups() ||
      w.group_zeros.size() != size_t(w.n) * ((w.num_groups() + 1) / 2) || w.channel_scales.size() != size_t(w.n))
    return invalid("qoq weights [" + std::to_string(w.n) + ", " + std::to_string(w.k) + "] group " +
                   std::to_string(w.group_size) + " have inconsistent sizes");
  QDEC_RETURN_IF_ERROR(check_k_match(x.k, w.k));
  if (!y) return invalid("output pointer y is null");
  std::vector<int32_t> w32(size_t(w.n) * w.k);
  qoq_dequantize_int32(w, w32.data());
  for (int i = 0; i < x.m; ++i) {
    const int8_t* xr = x.q.data() + size_t(i) * x.k;
    for (int j = 0; j < w.n; ++j) {
      const int32_t* wr = w32.data() + size_t(j) * w.k;
      // int64: equal to the kernel's int32 sum under the protective range; no overflow for codes outside it.
      int64_t acc = 0;
      for (int c = 0; c < x.k; ++c) acc += int64_t(xr[c]) * wr[c];
      double v = double(acc) * double(x.scale[i]) * double(fp16_bits_to_float(w.channel_scales[j]));
      if (bias) v += double(bias[j]);
      y[size_t(i) * w.n + j] = v;
    }
  }
  return Status::Ok();
}

// ---- W4A8 per channel ----------------------------------------------------------------------------------------------

int QoQChannelWeights::code(int row, int col) const {
  return nibble(codes, size_t(row) * k + col);
}

Status qoq_quantize_channels(const float* w, int n, int k, QoQChannelWeights* out) {
  QDEC_RETURN_IF_ERROR(validate_mk("weight", n, k));
  if (k % 2 != 0) return invalid("K " + std::to_string(k) + " must be even (two uint4 codes per byte)");
  if (!w) return invalid("weight pointer w is null");
  if (!out) return invalid("output pointer out is null");
  QoQChannelWeights r;
  r.n = n;
  r.k = k;
  r.codes.assign(size_t(n) * k / 2, 0);
  r.scales.assign(n, 0);
  r.zeros.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    const float* wr = w + size_t(i) * k;
    QDEC_RETURN_IF_ERROR(check_finite_row("qoq per-channel", wr, i, k));
    float lo = 0.0f, hi = 0.0f;
    for (int c = 0; c < k; ++c) {
      lo = std::min(lo, wr[c]);
      hi = std::max(hi, wr[c]);
    }
    QDEC_RETURN_IF_ERROR(fp16_scale("qoq per-channel", (hi - lo) / 15.0f, i, &r.scales[i]));
    const float s = fp16_bits_to_float(r.scales[i]);
    if (s == 0.0f) continue;  // z = 0, codes 0
    const float z = std::clamp(std::rint(-lo / s), 0.0f, 15.0f);
    r.zeros[i] = static_cast<uint8_t>(z);
    for (int c = 0; c < k; ++c)
      put_nibble(&r.codes, size_t(i) * k + c, static_cast<int>(std::clamp(std::rint(wr[c] / s) + z, 0.0f, 15.0f)));
  }
  *out = std::move(r);
  return Status::Ok();
}

void qoq_channel_dequantize_int8(const QoQChannelWeights& w, int8_t* out) {
  for (int i = 0; i < w.n; ++i)
    for (int c = 0; c < w.k; ++c) out[size_t(i) * w.k + c] = static_cast<int8_t>(w.code(i, c) - (w.zeros[i] & 0x0F));
}

void qoq_channel_dequantize_f64(const QoQChannelWeights& w, double* out) {
  for (int i = 0; i < w.n; ++i) {
    const double s = fp16_bits_to_float(w.scales[i]);
    for (int c = 0; c < w.k; ++c) out[size_t(i) * w.k + c] = double(w.code(i, c) - (w.zeros[i] & 0x0F)) * s;
  }
}

Status w4a8_channel_gemm_reference(const Int8Activations& x, const QoQChannelWeights& w, const float* bias, double* y) {
  QDEC_RETURN_IF_ERROR(check_activations(x));
  if (w.n < 1 || w.k % 2 != 0 || w.codes.size() != size_t(w.n) * w.k / 2 || w.scales.size() != size_t(w.n) ||
      w.zeros.size() != size_t(w.n))
    return invalid("qoq per-channel weights [" + std::to_string(w.n) + ", " + std::to_string(w.k) +
                   "] have inconsistent sizes");
  QDEC_RETURN_IF_ERROR(check_k_match(x.k, w.k));
  if (!y) return invalid("output pointer y is null");
  for (int i = 0; i < x.m; ++i) {
    const int8_t* xr = x.q.data() + size_t(i) * x.k;
    for (int j = 0; j < w.n; ++j) {
      int32_t acc = 0;
      for (int c = 0; c < x.k; ++c) acc += int32_t(xr[c]) * w.code(j, c);
      const int32_t corrected = acc - int32_t(w.zeros[j] & 0x0F) * x.row_sum[i];
      double v = double(x.scale[i]) * double(fp16_bits_to_float(w.scales[j])) * double(corrected);
      if (bias) v += double(bias[j]);
      y[size_t(i) * w.n + j] = v;
    }
  }
  return Status::Ok();
}

}  // namespace qdec
