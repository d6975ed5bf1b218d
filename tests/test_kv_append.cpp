// The fused append kernel (RoPE + quantize + scatter into pages) against its CPU ground truth, bit for bit
// over the whole pool (untouched bytes included), for every format, head_dim, RoPE style, decode and ragged
// prefill appends, on shuffled block tables and a pool poisoned with random bytes. Also RoPE against a
// float64 formula, the reference against the formats library, paged attention fed by the kernel, and bad
// input (validated before any launch, so those cases run without a GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "qdec/attention.h"
#include "qdec/kv_cache.h"
#include "qdec/page_manager.h"
#include "test_util.h"

namespace qdec {
namespace {

using test::DeviceBuffer;

// ---- RoPE -----------------------------------------------------------------------------------------

TEST(Rope, MatchesFloat64Formula) {
  QDEC_TEST_RNG(rng);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved})
    for (int rot : {128, 64, 34})
      for (int pos : {0, 1, 7, 1000, 131071, 1 << 20}) {
        const int D = 128;
        std::vector<float> x(D), y(D);
        for (auto& v : x) v = nd(rng);
        y = x;
        rope_row_reference(style, D, rot, 500000.f, pos, y.data());
        double num = 0, den = 0;
        for (int d = 0; d < D; ++d) {
          double expect = x[d];
          if (d < rot) {
            const bool half = style == RopeStyle::kHalf;
            const int i = half ? (d < rot / 2 ? d : d - rot / 2) : d / 2;
            const bool first = half ? d < rot / 2 : d % 2 == 0;
            const int partner = half ? (first ? d + rot / 2 : d - rot / 2) : (d ^ 1);
            const double ang = pos * std::pow(500000.0, -2.0 * i / rot);
            expect = first ? x[d] * std::cos(ang) - x[partner] * std::sin(ang)
                           : x[d] * std::cos(ang) + x[partner] * std::sin(ang);
          }
          num += (y[d] - expect) * (y[d] - expect);
          den += expect * expect;
        }
        EXPECT_LE(std::sqrt(num / den), 2e-7) << rope_style_name(style) << " rot " << rot << " pos " << pos;
      }
}

TEST(Rope, PositionZeroIsIdentityAndNoneIsNoop) {
  std::vector<float> x(64), y;
  std::iota(x.begin(), x.end(), -3.f);
  y = x;
  rope_row_reference(RopeStyle::kHalf, 64, 0, 10000.f, 0, y.data());
  EXPECT_EQ(x, y);
  rope_row_reference(RopeStyle::kNone, 64, 0, 10000.f, 77, y.data());
  EXPECT_EQ(x, y);
}

// ---- Problem set-up ---------------------------------------------------------------------------------

struct Problem {
  KvPageLayout layout;
  int batch = 0;
  int max_pages_per_seq = 0;
  int num_pages = 0;
  std::vector<int32_t> table;       // [batch][max_pages_per_seq], unused entries -1
  std::vector<int32_t> start_pos;   // [batch]
  std::vector<int32_t> cu;          // [batch + 1], empty for decode
  std::vector<uint16_t> k, v;       // new rows
  std::vector<uint8_t> pool;        // host image
  std::vector<int32_t> free_pages;  // shuffled pages no sequence holds yet
  int num_tokens() const { return cu.empty() ? batch : cu.back(); }
};

uint16_t to_bits(float x, DType dt) {
  return dt == DType::kBF16 ? float_to_bf16_bits(x) : float_to_fp16_bits(x);
}

// Rows with outlier channels, plus (when `specials`) a few rows of zeros, huge values, Inf and NaN.
void fill_rows(std::mt19937_64& rng, std::vector<uint16_t>& rows, int D, DType dt, bool specials) {
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int d = static_cast<int>(i % D);
    rows[i] = to_bits(nd(rng) * (d % 16 == 5 ? 8.f : 1.f) + (d % 7 == 0 ? 0.5f : 0.f), dt);
  }
  if (!specials) return;
  const size_t n_rows = rows.size() / D;
  for (size_t r = 0; r < n_rows; r += 7) {
    uint16_t* row = rows.data() + r * D;
    switch ((r / 7) % 4) {
      case 0:
        std::fill(row, row + D, uint16_t{0});
        break;
      case 1:
        row[3] = to_bits(dt == DType::kBF16 ? 3e38f : 65000.f, dt);
        row[D - 1] = to_bits(dt == DType::kBF16 ? -2e38f : -60000.f, dt);
        break;
      case 2:
        row[1] = to_bits(INFINITY, dt);
        row[9] = to_bits(-INFINITY, dt);
        break;
      case 3:
        row[2] = to_bits(NAN, dt);
        break;
    }
  }
}

// Random shuffled block tables with spare pages, random start positions (any slot of a block16, up to
// max_start), and either one new token per sequence or ragged runs (0..40 tokens, spanning block16 and page
// boundaries). table_cols > 0 sets max_pages_per_seq (it must hold max_start + 2 tokens).
Problem make_problem(std::mt19937_64& rng, const KvPageLayout& layout, int batch, bool prefill, DType dt,
                     int table_cols = 0, int max_start = 255) {
  Problem pr;
  pr.layout = layout;
  pr.batch = batch;
  pr.max_pages_per_seq = table_cols > 0 ? table_cols : (400 + layout.page_size - 1) / layout.page_size + 1;
  pr.num_pages = batch * pr.max_pages_per_seq + 5;
  std::vector<int32_t> perm(pr.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  pr.table.assign(static_cast<size_t>(batch) * pr.max_pages_per_seq, -1);
  std::uniform_int_distribution<int> sd(0, max_start), nd(0, 40);
  pr.cu.clear();
  if (prefill) pr.cu.push_back(0);
  for (int b = 0; b < batch; ++b) {
    const int start = b == 0 ? 0 : sd(rng);
    const int n = prefill ? (b == 1 ? 0 : nd(rng)) : 1;
    pr.start_pos.push_back(start);
    if (prefill) pr.cu.push_back(pr.cu.back() + n);
    const int pages = (start + std::max(n, 1) + layout.page_size - 1) / layout.page_size;
    for (int j = 0; j < pages; ++j) {
      pr.table[static_cast<size_t>(b) * pr.max_pages_per_seq + j] = perm.back();
      perm.pop_back();
    }
  }
  pr.free_pages = perm;
  const size_t row_elems = static_cast<size_t>(layout.num_kv_heads) * layout.head_dim;
  pr.k.resize(static_cast<size_t>(pr.num_tokens()) * row_elems);
  pr.v.resize(pr.k.size());
  fill_rows(rng, pr.k, layout.head_dim, dt, true);
  fill_rows(rng, pr.v, layout.head_dim, dt, true);
  pr.pool.resize(static_cast<size_t>(pr.num_pages) * layout.page_bytes());
  for (auto& x : pr.pool) x = static_cast<uint8_t>(rng());
  return pr;
}

KvAppendParams host_params(Problem& pr, DType dt, RopeStyle rope, int rotary_dim) {
  KvAppendParams p;
  p.k = pr.k.data();
  p.v = pr.v.data();
  p.dtype = dt;
  p.batch = pr.batch;
  p.cu_seqlens = pr.cu.empty() ? nullptr : pr.cu.data();
  p.cu_seqlens_host = p.cu_seqlens;
  p.start_pos = pr.start_pos.data();
  p.start_pos_host = pr.start_pos.data();
  p.layout = pr.layout;
  p.pool = pr.pool.data();
  p.num_pages = pr.num_pages;
  p.block_table = pr.table.data();
  p.block_table_host = pr.table.data();
  p.max_pages_per_seq = pr.max_pages_per_seq;
  p.rope = rope;
  p.rope_theta = 10000.f;
  p.rotary_dim = rotary_dim;
  return p;
}

// ---- CPU reference against the formats library -------------------------------------------------------

TEST(KvAppendReference, RowsReadBackAsQuantizedRopedInput) {
  QDEC_TEST_RNG(rng);
  KvPageLayout layout{KvFormat::int4(4), KvFormat::int8(32), 128, 16, 2};
  Problem pr = make_problem(rng, layout, 4, true, DType::kBF16);
  KvAppendParams p = host_params(pr, DType::kBF16, RopeStyle::kHalf, 0);
  QDEC_ASSERT_OK(kv_append_reference(p));
  const int D = 128;
  std::vector<float> x(D);
  for (int b = 0; b < pr.batch; ++b)
    for (int i = pr.cu[b]; i < pr.cu[b + 1]; ++i) {
      const int pos = pr.start_pos[b] + i - pr.cu[b];
      const int page = pr.table[static_cast<size_t>(b) * pr.max_pages_per_seq + pos / 16];
      for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < D; ++d) x[d] = bf16_bits_to_float(pr.k[(static_cast<size_t>(i) * 2 + h) * D + d]);
        rope_row_reference(RopeStyle::kHalf, D, 0, 10000.f, pos, x.data());
        QuantizedRow want, got;
        quantize_row(layout.k_format, D, x.data(), &want);
        tile_read_row(layout.k_tile(), KvRole::kKey, pr.pool.data() + layout.k_tile_offset(page, h), pos % 16, &got);
        ASSERT_EQ(0, std::memcmp(want.code, got.code, sizeof(want.code))) << "b " << b << " pos " << pos;
        ASSERT_EQ(0, std::memcmp(want.scale, got.scale, sizeof(want.scale)));
        ASSERT_EQ(0, std::memcmp(want.shift, got.shift, sizeof(want.shift)));
      }
    }
}

// ---- GPU bit-exactness ------------------------------------------------------------------------------

struct AppendCase {
  const char* k_format;
  const char* v_format;
  int head_dim;
  int page_size;
  RopeStyle rope;
  bool prefill;
  DType dtype;
  int table_cols = 0;   // max_pages_per_seq; 0: the default (a few pages)
  int max_start = 255;  // largest start position
};

std::string append_case_name(const ::testing::TestParamInfo<AppendCase>& info) {
  const AppendCase& c = info.param;
  std::string s = std::string(c.k_format) + "_" + c.v_format + "_d" + std::to_string(c.head_dim) + "_p" +
                  std::to_string(c.page_size) + "_rope_" + rope_style_name(c.rope) +
                  (c.prefill ? "_prefill" : "_decode") + "_" + dtype_name(c.dtype) +
                  (c.table_cols > 0 ? "_cols" + std::to_string(c.table_cols) : "");
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

class KvAppendGpu : public ::testing::TestWithParam<AppendCase> {};

TEST_P(KvAppendGpu, BitExactWithReference) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const AppendCase& c = GetParam();
  KvPageLayout layout;
  ASSERT_TRUE(parse_kv_format(c.k_format, &layout.k_format).ok());
  ASSERT_TRUE(parse_kv_format(c.v_format, &layout.v_format).ok());
  layout.head_dim = c.head_dim;
  layout.page_size = c.page_size;
  layout.num_kv_heads = 3;
  // Two appends in a row (the second continues where the first ended), so RMW of int4 K bytes whose other
  // nibble was written by an earlier launch is covered.
  Problem pr = make_problem(rng, layout, 6, c.prefill, c.dtype, c.table_cols, c.max_start);
  std::vector<uint8_t> gpu_pool;
  DeviceBuffer d_pool(pr.pool.size());
  QDEC_CUDA_CHECK(cudaMemcpy(d_pool.get(), pr.pool.data(), pr.pool.size(), cudaMemcpyHostToDevice));
  const int rot = c.rope == RopeStyle::kNone ? 0 : (c.head_dim == 64 ? 32 : 0);
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {
      // Continue every sequence after its first run with a fresh run of rows.
      for (int b = 0; b < pr.batch; ++b) pr.start_pos[b] += pr.cu.empty() ? 1 : pr.cu[b + 1] - pr.cu[b];
      for (int b = 0; b < pr.batch; ++b) {
        const int n = pr.cu.empty() ? 1 : pr.cu[b + 1] - pr.cu[b];
        const int last = (pr.start_pos[b] + std::max(n, 1) - 1) / c.page_size;
        int32_t* row = pr.table.data() + static_cast<size_t>(b) * pr.max_pages_per_seq;
        for (int j = 0; j <= last; ++j)
          if (row[j] < 0) {
            row[j] = pr.free_pages.back();
            pr.free_pages.pop_back();
          }
      }
      fill_rows(rng, pr.k, c.head_dim, c.dtype, true);
      fill_rows(rng, pr.v, c.head_dim, c.dtype, true);
    }
    KvAppendParams hp = host_params(pr, c.dtype, c.rope, rot);
    DeviceBuffer d_k(pr.k.size() * 2), d_v(pr.v.size() * 2), d_table(pr.table.size() * 4), d_start(pr.batch * 4),
        d_cu(std::max<size_t>(pr.cu.size(), 1) * 4);
    QDEC_CUDA_CHECK(cudaMemcpy(d_k.get(), pr.k.data(), pr.k.size() * 2, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_v.get(), pr.v.data(), pr.v.size() * 2, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_table.get(), pr.table.data(), pr.table.size() * 4, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_start.get(), pr.start_pos.data(), pr.batch * 4, cudaMemcpyHostToDevice));
    if (!pr.cu.empty()) QDEC_CUDA_CHECK(cudaMemcpy(d_cu.get(), pr.cu.data(), pr.cu.size() * 4, cudaMemcpyHostToDevice));
    KvAppendParams dp = hp;
    dp.k = d_k.get();
    dp.v = d_v.get();
    dp.pool = d_pool.get();
    dp.block_table = d_table.as<int32_t>();
    dp.start_pos = d_start.as<int32_t>();
    dp.cu_seqlens = pr.cu.empty() ? nullptr : d_cu.as<int32_t>();
    QDEC_ASSERT_OK(kv_append(dp, nullptr));
    QDEC_ASSERT_OK(kv_append_reference(hp));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    gpu_pool.resize(pr.pool.size());
    QDEC_CUDA_CHECK(cudaMemcpy(gpu_pool.data(), d_pool.get(), gpu_pool.size(), cudaMemcpyDeviceToHost));
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < gpu_pool.size(); ++i)
      if (gpu_pool[i] != pr.pool[i] && mismatches++ == 0) first = i;
    ASSERT_EQ(mismatches, 0u) << "step " << step << ": first mismatch at pool byte " << first << " (page "
                              << first / layout.page_bytes() << ", byte " << first % layout.page_bytes() << "): gpu "
                              << int(gpu_pool[first]) << " cpu " << int(pr.pool[first]);
  }
}

std::vector<AppendCase> append_cases() {
  const std::pair<const char*, const char*> pairs[] = {
      {"bf16", "bf16"},       {"fp16", "fp16"},         {"fp8e4m3", "fp8e4m3"},   {"fp8e5m2", "fp8e5m2"},
      {"int8", "int8"},       {"int8-g64", "int8-g64"}, {"int8-g32", "int8-g32"}, {"int4", "int4"},
      {"int4-g2", "int4-g2"}, {"int4-g4", "int4-g4"},   {"int4-g8", "int4-g8"},   {"int8", "int4"},
      {"int8-g32", "int4-g4"}};
  std::vector<AppendCase> cases;
  for (const auto& [k, v] : pairs)
    for (int d : {64, 128, 256})
      for (RopeStyle rope : {RopeStyle::kNone, RopeStyle::kHalf, RopeStyle::kInterleaved})
        for (bool prefill : {false, true}) {
          const bool fp16 = std::strcmp(k, "fp16") == 0;
          cases.push_back({k, v, d, d == 64 ? 16 : 64, rope, prefill, fp16 ? DType::kFP16 : DType::kBF16});
        }
  for (int page : {32, 128, 256}) cases.push_back({"int4-g4", "int4", 128, page, RopeStyle::kHalf, true, DType::kFP16});
  // Decodes at positions spread over long block-table rows (128, 129 and 200 pages of 16 tokens).
  cases.push_back({"int4", "int4", 128, 16, RopeStyle::kHalf, false, DType::kBF16, 128, 2040});
  cases.push_back({"int8", "int4", 64, 16, RopeStyle::kInterleaved, false, DType::kFP16, 128, 2040});
  cases.push_back({"fp8e4m3", "int4-g2", 256, 16, RopeStyle::kHalf, false, DType::kBF16, 129, 2060});
  cases.push_back({"int4", "int4", 128, 16, RopeStyle::kHalf, false, DType::kBF16, 200, 3000});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Formats, KvAppendGpu, ::testing::ValuesIn(append_cases()), append_case_name);

// ---- Appended pages feed paged attention --------------------------------------------------------------

// The float64 reference of paged attention on a host pool image: every sequence's rows, dequantized.
std::vector<double> reference_attention(const Problem& pr, const std::vector<int32_t>& lens,
                                        const std::vector<double>& q64, int num_qo_heads) {
  const KvPageLayout& l = pr.layout;
  const int batch = pr.batch, D = l.head_dim, H = l.num_kv_heads, ps = l.page_size;
  const int t_max = *std::max_element(lens.begin(), lens.end());
  std::vector<double> k64(static_cast<size_t>(batch) * t_max * H * D, 0.0), v64(k64.size(), 0.0);
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < lens[b]; ++t) {
      const int page = pr.table[static_cast<size_t>(b) * pr.max_pages_per_seq + t / ps];
      for (int h = 0; h < H; ++h) {
        QuantizedRow row;
        const size_t at = ((static_cast<size_t>(b) * t_max + t) * H + h) * D;
        tile_read_row(l.k_tile(), KvRole::kKey, pr.pool.data() + l.k_tile_offset(page, h), t % ps, &row);
        dequantize_row_f64(l.k_format, D, row, k64.data() + at);
        tile_read_row(l.v_tile(), KvRole::kValue, pr.pool.data() + l.v_tile_offset(page, h), t % ps, &row);
        dequantize_row_f64(l.v_format, D, row, v64.data() + at);
      }
    }
  std::vector<double> o_ref(q64.size());
  decode_attention_reference(batch, num_qo_heads, H, D, t_max, 1.0 / std::sqrt(double(D)), q64.data(), k64.data(),
                             v64.data(), lens.data(), o_ref.data(), nullptr);
  return o_ref;
}

// Prefill through the append kernel, then paged attention; then one decode step: append one token per
// sequence and attend with the attention launched as the append's programmatic dependent (it reads all but
// the new token while the append may still run), with automatic and forced split counts.
TEST(KvAppendGpu, PagedAttentionOnAppendedCache) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  for (const char* fmt : {"int4-g4", "fp8e4m3", "bf16"}) {
    SCOPED_TRACE(fmt);
    KvPageLayout layout;
    ASSERT_TRUE(parse_kv_format(fmt, &layout.k_format).ok());
    layout.v_format = layout.k_format;
    layout.head_dim = 128;
    layout.page_size = 16;
    layout.num_kv_heads = 2;
    const int batch = 3, group = 4, HQ = group * 2, D = 128;
    Problem pr = make_problem(rng, layout, batch, true, DType::kBF16);
    for (int b = 0; b < batch; ++b) pr.start_pos[b] = 0;  // prefill from an empty cache
    // Attention needs every sequence non-empty: runs of 0 tokens (make_problem makes some) become 1.
    std::vector<int32_t> lens(batch);
    for (int b = 0; b < batch; ++b) lens[b] = std::max(1, pr.cu[b + 1] - pr.cu[b]);
    for (int b = 0; b < batch; ++b) pr.cu[b + 1] = pr.cu[b] + lens[b];
    // Room for the decode step's token.
    for (int b = 0; b < batch; ++b) {
      int32_t& e = pr.table[static_cast<size_t>(b) * pr.max_pages_per_seq + lens[b] / 16];
      if (e < 0) {
        e = pr.free_pages.back();
        pr.free_pages.pop_back();
      }
    }
    pr.k.resize(static_cast<size_t>(pr.cu.back()) * 2 * D);
    pr.v.resize(pr.k.size());
    fill_rows(rng, pr.k, D, DType::kBF16, false);
    fill_rows(rng, pr.v, D, DType::kBF16, false);

    DeviceBuffer d_pool(pr.pool.size()), d_k(pr.k.size() * 2), d_v(pr.v.size() * 2), d_table(pr.table.size() * 4),
        d_start(batch * 4), d_cu(pr.cu.size() * 4), d_lens(batch * 4);
    QDEC_CUDA_CHECK(cudaMemcpy(d_pool.get(), pr.pool.data(), pr.pool.size(), cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_table.get(), pr.table.data(), pr.table.size() * 4, cudaMemcpyHostToDevice));
    auto upload_step = [&] {
      QDEC_CUDA_CHECK(cudaMemcpy(d_k.get(), pr.k.data(), pr.k.size() * 2, cudaMemcpyHostToDevice));
      QDEC_CUDA_CHECK(cudaMemcpy(d_v.get(), pr.v.data(), pr.v.size() * 2, cudaMemcpyHostToDevice));
      QDEC_CUDA_CHECK(cudaMemcpy(d_start.get(), pr.start_pos.data(), batch * 4, cudaMemcpyHostToDevice));
      if (!pr.cu.empty())
        QDEC_CUDA_CHECK(cudaMemcpy(d_cu.get(), pr.cu.data(), pr.cu.size() * 4, cudaMemcpyHostToDevice));
      QDEC_CUDA_CHECK(cudaMemcpy(d_lens.get(), lens.data(), batch * 4, cudaMemcpyHostToDevice));
    };
    auto append_params = [&](bool device) {
      KvAppendParams a = host_params(pr, DType::kBF16, RopeStyle::kHalf, 0);
      if (device) {
        a.k = d_k.get();
        a.v = d_v.get();
        a.pool = d_pool.get();
        a.block_table = d_table.as<int32_t>();
        a.start_pos = d_start.as<int32_t>();
        a.cu_seqlens = pr.cu.empty() ? nullptr : d_cu.as<int32_t>();
      }
      return a;
    };

    std::vector<uint16_t> q_bits(static_cast<size_t>(batch) * HQ * D);
    std::vector<double> q64(q_bits.size());
    std::normal_distribution<float> nd(0.f, 1.f);
    for (size_t i = 0; i < q_bits.size(); ++i) {
      q_bits[i] = float_to_bf16_bits(nd(rng));
      q64[i] = bf16_bits_to_float(q_bits[i]);
    }
    DeviceBuffer d_q(q_bits.size() * 2), d_o(q_bits.size() * 2);
    QDEC_CUDA_CHECK(cudaMemcpy(d_q.get(), q_bits.data(), q_bits.size() * 2, cudaMemcpyHostToDevice));
    auto attention_params = [&](int splits, int tail) {
      DecodeAttentionParams ap;
      ap.batch = batch;
      ap.num_qo_heads = HQ;
      ap.num_kv_heads = 2;
      ap.q_dtype = DType::kBF16;
      set_paged_cache(&ap, layout, d_pool.get(), pr.num_pages, d_table.as<int32_t>(), pr.table.data(),
                      pr.max_pages_per_seq);
      ap.seq_lens = d_lens.as<int32_t>();
      ap.seq_lens_host = lens.data();
      ap.q = d_q.get();
      ap.o = d_o.get();
      ap.num_splits = splits;
      ap.programmatic_tail_tokens = tail;
      return ap;
    };
    auto check_output = [&](const char* what) {
      std::vector<uint16_t> o_bits(q_bits.size());
      QDEC_CUDA_CHECK(cudaMemcpy(o_bits.data(), d_o.get(), o_bits.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<double> o64(o_bits.size());
      for (size_t i = 0; i < o64.size(); ++i) o64[i] = bf16_bits_to_float(o_bits[i]);
      const std::vector<double> o_ref = reference_attention(pr, lens, q64, HQ);
      EXPECT_LE(rel_l2(o64.data(), o_ref.data(), o64.size()), 5e-3) << what;
    };

    // Prefill, then attention in plain stream order.
    upload_step();
    QDEC_ASSERT_OK(kv_append(append_params(true), nullptr));
    QDEC_ASSERT_OK(kv_append_reference(append_params(false)));
    QDEC_CUDA_CHECK(cudaMemset(d_o.get(), 0xFF, d_o.bytes()));
    QDEC_ASSERT_OK(decode_attention(attention_params(1, 0), nullptr));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    check_output("after prefill");

    // Decode steps: one new token per sequence, attention as the append's programmatic dependent.
    for (int splits : {0, 3}) {
      for (int b = 0; b < batch; ++b) pr.start_pos[b] = lens[b];
      pr.cu.clear();
      pr.k.resize(static_cast<size_t>(batch) * 2 * D);
      pr.v.resize(pr.k.size());
      fill_rows(rng, pr.k, D, DType::kBF16, false);
      fill_rows(rng, pr.v, D, DType::kBF16, false);
      for (int b = 0; b < batch; ++b) lens[b] += 1;
      for (int b = 0; b < batch; ++b) {
        int32_t& e = pr.table[static_cast<size_t>(b) * pr.max_pages_per_seq + (lens[b] - 1) / 16];
        if (e < 0) {
          e = pr.free_pages.back();
          pr.free_pages.pop_back();
        }
      }
      QDEC_CUDA_CHECK(cudaMemcpy(d_table.get(), pr.table.data(), pr.table.size() * 4, cudaMemcpyHostToDevice));
      upload_step();
      QDEC_CUDA_CHECK(cudaMemset(d_o.get(), 0xFF, d_o.bytes()));
      size_t ws_bytes = 0;
      DecodeAttentionParams ap = attention_params(splits, 1);
      QDEC_ASSERT_OK(decode_attention_workspace_bytes(ap, &ws_bytes));
      DeviceBuffer ws(ws_bytes);
      ap.workspace = ws.get();
      ap.workspace_bytes = ws_bytes;
      QDEC_ASSERT_OK(kv_append(append_params(true), nullptr));
      QDEC_ASSERT_OK(decode_attention(ap, nullptr));
      QDEC_ASSERT_OK(kv_append_reference(append_params(false)));
      QDEC_CUDA_CHECK(cudaDeviceSynchronize());
      check_output(splits == 0 ? "decode step, PDL, automatic splits" : "decode step, PDL, 3 splits");
    }
  }
}

// ---- The pieces together: page manager -> block tables -> append -> paged attention --------------------------

// Sequences driven through the PageManager (reserve, export, append, commit), one of them forked from
// another's prefix; the device pool must hold exactly the CPU reference's bytes after every step, the shared
// pages must never change, and decode steps attend with the attention as the append's PDL dependent.
TEST(PagedKvCacheE2E, ManagerPoolAppendAttention) {
  QDEC_SKIP_WITHOUT_GPU();
  QDEC_TEST_RNG(rng);
  const int D = 128, H = 2, HQ = 8, ps = 16, max_pages = 16;
  const KvPageLayout layout{KvFormat::int4(4), KvFormat::int4(4), D, ps, H};
  PageManager pm;
  QDEC_ASSERT_OK(PageManager::create({40, ps, max_pages}, &pm));
  std::unique_ptr<KvPagePool> pool;
  QDEC_ASSERT_OK(KvPagePool::create(layout, pm.num_pages(), &pool));
  Problem host;  // the CPU mirror: pool image and the tables of the current step
  host.layout = layout;
  host.max_pages_per_seq = max_pages;
  host.num_pages = pm.num_pages();
  host.pool.resize(pool->bytes());
  for (auto& x : host.pool) x = static_cast<uint8_t>(rng());
  QDEC_CUDA_CHECK(cudaMemcpy(pool->data(), host.pool.data(), host.pool.size(), cudaMemcpyHostToDevice));

  std::vector<PageManager::SeqId> ids(3);
  for (auto& id : ids) QDEC_ASSERT_OK(pm.add_sequence(&id));
  // One step: append `counts[i]` tokens to ids[i] (prefill runs, or one each for decode), GPU and CPU.
  auto append_step = [&](const std::vector<PageManager::SeqId>& seqs, const std::vector<int32_t>& counts, bool decode) {
    QDEC_ASSERT_OK(pm.reserve(seqs, counts));
    std::vector<int32_t> start;
    QDEC_ASSERT_OK(pm.export_block_table(seqs, &host.table, &start));
    host.batch = static_cast<int>(seqs.size());
    host.start_pos = start;
    host.cu.clear();
    if (!decode) {
      host.cu.push_back(0);
      for (int32_t c : counts) host.cu.push_back(host.cu.back() + c);
    }
    const size_t rows = decode ? seqs.size() : static_cast<size_t>(host.cu.back());
    host.k.resize(rows * H * D);
    host.v.resize(host.k.size());
    fill_rows(rng, host.k, D, DType::kBF16, false);
    fill_rows(rng, host.v, D, DType::kBF16, false);
    DeviceBuffer d_k(host.k.size() * 2), d_v(host.v.size() * 2), d_table(host.table.size() * 4),
        d_start(start.size() * 4), d_cu(std::max<size_t>(host.cu.size(), 1) * 4);
    QDEC_CUDA_CHECK(cudaMemcpy(d_k.get(), host.k.data(), host.k.size() * 2, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_v.get(), host.v.data(), host.v.size() * 2, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_table.get(), host.table.data(), host.table.size() * 4, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_start.get(), start.data(), start.size() * 4, cudaMemcpyHostToDevice));
    if (!decode) QDEC_CUDA_CHECK(cudaMemcpy(d_cu.get(), host.cu.data(), host.cu.size() * 4, cudaMemcpyHostToDevice));
    KvAppendParams hp = host_params(host, DType::kBF16, RopeStyle::kInterleaved, 0);
    KvAppendParams dp = hp;
    dp.k = d_k.get();
    dp.v = d_v.get();
    dp.pool = pool->data();
    dp.block_table = d_table.as<int32_t>();
    dp.start_pos = d_start.as<int32_t>();
    dp.cu_seqlens = decode ? nullptr : d_cu.as<int32_t>();
    QDEC_ASSERT_OK(kv_append(dp, nullptr));
    QDEC_ASSERT_OK(kv_append_reference(hp));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < seqs.size(); ++i) QDEC_ASSERT_OK(pm.commit(seqs[i], counts[i]));
    std::vector<uint8_t> gpu(host.pool.size());
    QDEC_CUDA_CHECK(cudaMemcpy(gpu.data(), pool->data(), gpu.size(), cudaMemcpyDeviceToHost));
    ASSERT_TRUE(gpu == host.pool) << "device pool differs from the CPU reference after an append";
    QDEC_ASSERT_OK(pm.validate());
  };

  // Prefill three sequences (one spans several pages), then fork the first one's two full pages.
  append_step(ids, {40, 5, 17}, false);
  PageManager::SeqId forked;
  QDEC_ASSERT_OK(pm.fork_prefix(ids[0], 2, &forked));
  ids.push_back(forked);
  std::vector<int32_t> shared_pages;
  QDEC_ASSERT_OK(pm.pages(forked, &shared_pages));
  ASSERT_EQ(shared_pages.size(), 2u);
  auto shared_bytes = [&] {
    std::vector<uint8_t> out;
    for (int32_t page : shared_pages) {
      std::vector<uint8_t> bytes(layout.page_bytes());
      EXPECT_EQ(cudaMemcpy(bytes.data(), static_cast<uint8_t*>(pool->data()) + layout.k_tile_offset(page, 0),
                           bytes.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      out.insert(out.end(), bytes.begin(), bytes.end());
    }
    return out;
  };
  const std::vector<uint8_t> shared_before = shared_bytes();
  append_step({forked}, {9}, false);  // the fork's own tail, into a fresh page

  // Decode steps for all four, each followed by attention launched as the append's dependent.
  std::vector<uint16_t> q_bits(ids.size() * HQ * D);
  std::vector<double> q64(q_bits.size());
  std::normal_distribution<float> nd(0.f, 1.f);
  DeviceBuffer d_q(q_bits.size() * 2), d_o(q_bits.size() * 2);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < q_bits.size(); ++i) {
      q_bits[i] = float_to_bf16_bits(nd(rng));
      q64[i] = bf16_bits_to_float(q_bits[i]);
    }
    QDEC_CUDA_CHECK(cudaMemcpy(d_q.get(), q_bits.data(), q_bits.size() * 2, cudaMemcpyHostToDevice));
    // The step's block table and lengths as the attention will see them (after this step's token).
    QDEC_ASSERT_OK(pm.reserve(ids, std::vector<int32_t>(ids.size(), 1)));
    std::vector<int32_t> table, lens;
    QDEC_ASSERT_OK(pm.export_block_table(ids, &table, &lens));
    for (auto& l : lens) l += 1;
    DeviceBuffer d_table(table.size() * 4), d_lens(lens.size() * 4);
    QDEC_CUDA_CHECK(cudaMemcpy(d_table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    QDEC_CUDA_CHECK(cudaMemcpy(d_lens.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    append_step(ids, std::vector<int32_t>(ids.size(), 1), true);
    QDEC_CUDA_CHECK(cudaMemset(d_o.get(), 0xFF, d_o.bytes()));
    DecodeAttentionParams ap;
    ap.batch = static_cast<int>(ids.size());
    ap.num_qo_heads = HQ;
    ap.num_kv_heads = H;
    set_paged_cache(&ap, layout, pool->data(), pm.num_pages(), d_table.as<int32_t>(), table.data(), max_pages);
    ap.seq_lens = d_lens.as<int32_t>();
    ap.seq_lens_host = lens.data();
    ap.q = d_q.get();
    ap.o = d_o.get();
    ap.num_splits = 1;
    ap.programmatic_tail_tokens = 1;
    QDEC_ASSERT_OK(decode_attention(ap, nullptr));
    QDEC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_bits(q_bits.size());
    QDEC_CUDA_CHECK(cudaMemcpy(o_bits.data(), d_o.get(), o_bits.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<double> o64(o_bits.size());
    for (size_t i = 0; i < o64.size(); ++i) o64[i] = bf16_bits_to_float(o_bits[i]);
    host.table = table;
    host.batch = static_cast<int>(ids.size());
    const std::vector<double> o_ref = reference_attention(host, lens, q64, HQ);
    EXPECT_LE(rel_l2(o64.data(), o_ref.data(), o64.size()), 5e-3) << "decode step " << step;
  }
  EXPECT_TRUE(shared_bytes() == shared_before) << "a shared prefix page was written";

  // An exhausted pool: a distinct status, and every sequence intact.
  std::vector<int32_t> lens_before, lens_after;
  QDEC_ASSERT_OK(pm.export_block_table(ids, nullptr, &lens_before));
  // 200 more tokens each stays within max_pages_per_seq (256 tokens) but needs more pages than are free.
  const Status s = pm.reserve(ids, std::vector<int32_t>(ids.size(), 200));
  EXPECT_EQ(s.code(), StatusCode::kOutOfPages) << s.to_string();
  QDEC_ASSERT_OK(pm.export_block_table(ids, nullptr, &lens_after));
  EXPECT_EQ(lens_before, lens_after);
  QDEC_ASSERT_OK(pm.validate());
}

// ---- Bad input ----------------------------------------------------------------------------------------

struct ErrFixture {
  alignas(16) uint8_t fake[64] = {};
  std::vector<int32_t> table{0, 1, 2, 3, 4, 5};  // 2 sequences x 3 pages
  std::vector<int32_t> start{0, 20};
  std::vector<int32_t> cu{0, 3, 5};
  KvAppendParams p;
  ErrFixture() {
    p.k = fake;
    p.v = fake;
    p.batch = 2;
    p.start_pos = start.data();
    p.start_pos_host = start.data();
    p.layout = {KvFormat::int4(4), KvFormat::int4(4), 128, 16, 2};
    p.pool = fake;
    p.num_pages = 6;
    p.block_table = table.data();
    p.block_table_host = table.data();
    p.max_pages_per_seq = 3;
  }
};

void expect_append_error(const std::function<void(ErrFixture&)>& mutate, StatusCode code, const std::string& needle) {
  ErrFixture f;
  mutate(f);
  const Status s = kv_append(f.p, nullptr);
  EXPECT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
}

TEST(KvAppendErrors, TableEntryOutOfRange) {
  expect_append_error([](ErrFixture& f) { f.table[4] = 6; }, StatusCode::kInvalidArgument,
                      "block_table[1][1] = 6 is outside the pool 0..5");
  expect_append_error([](ErrFixture& f) { f.table[0] = -1; }, StatusCode::kInvalidArgument, "block_table[0][0] = -1");
}
TEST(KvAppendErrors, BeyondPages) {
  expect_append_error([](ErrFixture& f) { f.start[1] = 48; }, StatusCode::kInvalidArgument,
                      "appending 1 tokens at position 48 exceeds max_pages_per_seq * page_size = 48");
  expect_append_error(
      [](ErrFixture& f) {
        f.p.cu_seqlens = f.cu.data();
        f.p.cu_seqlens_host = f.cu.data();
        f.start[0] = 46;
      },
      StatusCode::kInvalidArgument, "appending 3 tokens at position 46");
  expect_append_error([](ErrFixture& f) { f.start[0] = -2; }, StatusCode::kInvalidArgument,
                      "start_pos[0] = -2 is negative");
}
TEST(KvAppendErrors, UnsupportedPageSize) {
  for (int ps : {1, 8, 24, 512})
    expect_append_error([ps](ErrFixture& f) { f.p.layout.page_size = ps; }, StatusCode::kUnsupported,
                        "page_size " + std::to_string(ps) + " is not supported");
}
TEST(KvAppendErrors, BadFormatsAndRope) {
  expect_append_error([](ErrFixture& f) { f.p.layout.v_format = KvFormat::int8(48); }, StatusCode::kInvalidArgument,
                      "int8 group size 48");
  expect_append_error([](ErrFixture& f) { f.p.layout.head_dim = 96; }, StatusCode::kInvalidArgument, "head_dim 96");
  expect_append_error(
      [](ErrFixture& f) {
        f.p.rope = RopeStyle::kHalf;
        f.p.rotary_dim = 7;
      },
      StatusCode::kInvalidArgument, "rotary_dim 7");
  expect_append_error(
      [](ErrFixture& f) {
        f.p.rope = RopeStyle::kHalf;
        f.p.rope_theta = 0.5f;
      },
      StatusCode::kInvalidArgument, "rope_theta");
}
TEST(KvAppendErrors, TooManyHeads) {  // the grid's y extent
  expect_append_error([](ErrFixture& f) { f.p.layout.num_kv_heads = 70000; }, StatusCode::kUnsupported,
                      "num_kv_heads 70000 is over 65535");
}
TEST(KvAppendErrors, PointersAndRuns) {
  expect_append_error([](ErrFixture& f) { f.p.k = nullptr; }, StatusCode::kInvalidArgument, "k is null");
  expect_append_error([](ErrFixture& f) { f.p.pool = f.fake + 4; }, StatusCode::kInvalidArgument,
                      "pool is not 16-byte aligned");
  expect_append_error([](ErrFixture& f) { f.p.block_table_host = nullptr; }, StatusCode::kInvalidArgument,
                      "block_table_host is null");
  expect_append_error(
      [](ErrFixture& f) {
        f.cu = {0, 3, 2};
        f.p.cu_seqlens = f.cu.data();
        f.p.cu_seqlens_host = f.cu.data();
      },
      StatusCode::kInvalidArgument, "cu_seqlens is decreasing at sequence 1");
}

TEST(KvAppendErrors, CountsAndHostCopies) {
  expect_append_error([](ErrFixture& f) { f.p.max_pages_per_seq = 0; }, StatusCode::kInvalidArgument,
                      "max_pages_per_seq 0");
  expect_append_error([](ErrFixture& f) { f.p.num_pages = 0; }, StatusCode::kInvalidArgument, "num_pages 0");
  expect_append_error(
      [](ErrFixture& f) {
        f.p.block_table = nullptr;
        f.p.num_pages = 5;
      },
      StatusCode::kInvalidArgument, "num_pages 5 is smaller than batch * max_pages_per_seq = 6");
  expect_append_error(
      [](ErrFixture& f) {
        f.p.cu_seqlens = f.cu.data();
        f.p.cu_seqlens_host = nullptr;
      },
      StatusCode::kInvalidArgument, "cu_seqlens_host is null");
  expect_append_error(
      [](ErrFixture& f) {
        f.cu = {1, 3, 5};
        f.p.cu_seqlens = f.cu.data();
        f.p.cu_seqlens_host = f.cu.data();
      },
      StatusCode::kInvalidArgument, "cu_seqlens[0] = 1 must be 0");
  expect_append_error([](ErrFixture& f) { f.p.quant.fp8_static_scale = -1.f; }, StatusCode::kInvalidArgument,
                      "fp8_static_scale");
  expect_append_error([](ErrFixture& f) { f.p.dtype = static_cast<DType>(7); }, StatusCode::kInvalidArgument,
                      "dtype 7");
  expect_append_error([](ErrFixture& f) { f.p.batch = 0; }, StatusCode::kInvalidArgument, "batch 0");
}

TEST(KvPagePoolErrors, RejectedBeforeAllocating) {
  std::unique_ptr<KvPagePool> pool;
  const KvPageLayout ok{KvFormat::int4(4), KvFormat::int4(4), 128, 64, 2};
  Status s = KvPagePool::create(ok, 0, &pool);
  EXPECT_NE(s.message().find("num_pages 0"), std::string::npos) << s.to_string();
  KvPageLayout bad = ok;
  bad.page_size = 8;
  s = KvPagePool::create(bad, 4, &pool);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  bad = ok;
  bad.num_kv_heads = 0;
  s = KvPagePool::create(bad, 4, &pool);
  EXPECT_NE(s.message().find("num_kv_heads 0"), std::string::npos) << s.to_string();
  EXPECT_FALSE(KvPagePool::create(ok, 4, nullptr).ok());
  EXPECT_EQ(pool, nullptr);
}

// Paged attention: a table entry out of range, a sequence longer than its pages, a pool laid out for other
// formats, and an unsupported page size, each rejected before any launch.
TEST(PagedAttentionErrors, RejectedBeforeLaunch) {
  alignas(16) uint8_t fake[64] = {};
  std::vector<int32_t> table{3, 1, 0, 2}, lens{20, 17};
  const KvPageLayout layout{KvFormat::int4(4), KvFormat::int4(4), 128, 16, 1};
  auto make = [&] {
    DecodeAttentionParams p;
    p.batch = 2;
    p.num_qo_heads = 4;
    p.num_kv_heads = 1;
    set_paged_cache(&p, layout, fake, 4, reinterpret_cast<const int32_t*>(fake), table.data(), 2);
    p.seq_lens = reinterpret_cast<const int32_t*>(fake);
    p.seq_lens_host = lens.data();
    p.q = fake;
    p.o = fake;
    p.num_splits = 1;
    return p;
  };
  auto expect = [](const DecodeAttentionParams& p, const std::string& needle) {
    const Status s = decode_attention(p, nullptr);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  DecodeAttentionParams p = make();
  table[3] = 4;
  expect(p, "block_table[1][1] = 4 is outside the pool 0..3");
  table[3] = 2;
  lens[0] = 33;
  expect(p, "seq_lens[0] = 33 is outside 1..32");
  lens[0] = 20;
  p.block_table_host = nullptr;
  expect(p, "block_table_host is null");
  p = make();
  p.k_format = p.v_format = KvFormat::bf16();  // the pool holds int4 pages: too small for bf16 tiles
  expect(p, "k_page_stride_bytes");
  p = make();
  p.v_format = KvFormat::int8(0);
  expect(p, "K/V format pair (int4-g4, int8)");
  p = make();
  p.page_size = 8;
  expect(p, "page_size 8");
  p = make();
  p.num_pages = 0;
  expect(p, "num_pages 0 must be >= 1 with a block table");
  p = make();
  p.programmatic_tail_tokens = -1;
  expect(p, "programmatic_tail_tokens -1");
}

}  // namespace
}  // namespace qdec
