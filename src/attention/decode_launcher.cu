// Host side of decode attention: validation (everything checked before anything is launched), kernel
// lookup in the dispatch list, split-count planning from occupancy and sequence length, and the launches.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "attention/decode_dispatch.h"
#include "attention/decode_kernel.cuh"
#include "attention/decode_merge.h"
#include "attention/split_plan.h"
#include "qdec/attention.h"
#include "runtime/cuda_check.h"

namespace qdec {

namespace attention {

// Split count from an estimate of the busiest SM's work (fitted to a split sweep on the H200, docs/attention.md
// v21). A split covers whole stages (16 tokens per warp of the CTA: 64, 128 or 256), so `s` splits of a max_len
// sequence give n <= s non-empty splits of `st` stages each; the CTAs (one per sequence, KV head and non-empty split)
// spread evenly over the SMs, so the busiest SM runs k = ceil(CTAs / SMs) of them, `cap` at a time. A CTA costs its
// stages plus ~2 (set-up, epilogue, partial write and merge), and an SM running fewer than `cap` CTAs streams slower
// (fewer warps to hide latency; measured: 2 of 4 slots ~6% slower per stage for int4, 1 slot ~30%). Ties go to fewer
// splits. This replaced "the fewest splits filling 90% of the slots", which ignored the stage rounding (long 128K int4:
// 60 splits of 35 stages on 4 CTAs/SM, 48.1 us; 64 splits of 32 stages, 45.0 us).
int choose_splits(int ctas, int sms, int cap, int max_len, int stage, bool linear_partial) {
  const int max_splits = std::max(1, std::min(256, max_len / (4 * stage)));
  const auto rate = [cap, linear_partial](int r) {
    return r >= cap ? 1.0 : linear_partial ? static_cast<double>(r) / cap : r == 1 ? 0.7 : 1.0 - 0.03 * (cap - r);
  };
  constexpr double kCtaStages = 2.0;
  int best = 1;
  double best_cost = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const int per = ((max_len + s - 1) / s + stage - 1) / stage * stage;  // tokens per split, whole stages
    const int n = (max_len + per - 1) / per;                              // non-empty splits
    const long long k = (static_cast<long long>(ctas) * n + sms - 1) / sms;
    const double cta = per / stage + kCtaStages;
    const long long full = k / cap, rem = k % cap;
    const double cost = static_cast<double>(full * cap) * cta / rate(cap) + (rem ? rem * cta / rate(int(rem)) : 0.0);
    if (s == 1 || cost < best_cost * (1.0 - 1e-9)) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// Measured with 16 splits of long 128K (one 8-warp CTA on each of 128 SMs): 24.6 GB/s per SM for int4 and 21.8 for
// int4-g4 on the H200 (session 14's sweep, where 32 splits, two CTAs per SM, were 7% / 14% faster), about 20 on an
// H100, where one CTA per SM was faster than two (session 19, docs/attention.md: 1-9% at long context, 3-12% at
// B = 16-32, within 2% either way at B = 64).
int int4_split_ctas_per_sm(double dram_gbps, int sms) {
  constexpr double kCtaGbps = 25.0, kReachable = 0.9;
  if (!(dram_gbps > 0.0) || sms <= 0) return 2;
  return kReachable * dram_gbps / sms > kCtaGbps ? 2 : 1;
}

int wide_split_count(int ctas, int sms, int max_len) {
  if (ctas < 1 || sms < 1 || ctas > sms) return 0;
  const int splits = sms / ctas;
  if (splits < 2 || 4LL * ctas * splits < 3LL * sms || max_len / splits < kWideSplitTokens) return 0;
  return splits;
}

int one_cta_per_sm_smem(int smem_per_sm, int reserved) {
  // Two CTAs of (pad + reserved) bytes exceed the SM's shared memory; one fits.
  return (smem_per_sm / 2 - reserved + 1 + 127) / 128 * 128;
}

// Split grids of one wave of several CTAs per SM, measured on the H200 (session 38,
// docs/results/attention_pdl_wave_s38_h200.txt: CUDA graphs of append + attention steps, two calls of two rounds):
// launched as the append's programmatic dependents while it still held some SMs, they took up to 1.23x the
// stream-order step (SmolLM2 int8 40.9 against 33.4 us, seed000 B = 32 int4-g4 24.5 against 21.1); in stream order
// those steps took 0.81-0.99x, but the SmolLM2 shape's int4 1.07x (PDL helps it there, unexplained). Unsplit grids of
// one wave of several CTAs per SM (B = 256) gain from PDL and keep it.
bool programmatic_launch_pays(int num_splits, long long ctas, int sms, int occ) {
  return !(num_splits > 1 && ctas > sms && ctas <= static_cast<long long>(occ) * sms);
}

}  // namespace attention

const char* dtype_name(DType d) {
  return d == DType::kBF16 ? "bf16" : "fp16";
}

namespace {

using attention::DecodeKernelInfo;

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

const char* kSupportedPairs =
    "matching pairs of bf16 fp16 fp8e4m3 fp8e5m2 int8 int8-g64 int8-g32 int4 int4-g2 int4-g4 int4-g8 "
    "(int4-g8 needs head_dim 128), and int8 K with int4 V as (int8, int4) or (int8-g32, int4-g4)";

const DecodeKernelInfo* find_kernel(KvKind kk, int kg, KvKind vk, int vg, int head_dim) {
  for (auto list : {attention::decode_kernels_16bit(), attention::decode_kernels_fp8(),
                    attention::decode_kernels_int8(), attention::decode_kernels_int4()}) {
    for (const auto& e : list) {
      if (e.k_kind == kk && e.k_groups == kg && e.v_kind == vk && e.v_groups == vg && e.head_dim == head_dim) return &e;
    }
  }
  return nullptr;
}

struct Plan {
  const DecodeKernelInfo* kernel = nullptr;
  const void* func = nullptr;  // the NH variant for this group size, or the 16-warp kernel
  int warps = 0;               // warps per CTA of func
  int smem_bytes = 0;          // dynamic shared memory of func
  int num_splits = 1;
  int max_len = 0;
  size_t workspace_bytes = 0;
};

// Resident CTAs per SM for the plan's kernel (after raising its shared-memory limit), cached.
Status kernel_occupancy(const Plan& plan, int* blocks_per_sm) {
  const void* func = plan.func;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  int dev = 0;
  QDEC_CUDA_RETURN(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({dev, func});
  if (it != cache.end()) {
    *blocks_per_sm = it->second;
    return Status::Ok();
  }
  QDEC_CUDA_RETURN(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes));
  int n = 0;
  QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, plan.warps * 32, plan.smem_bytes));
  if (n < 1) {
    return Status(StatusCode::kUnsupported, "decode kernel for head_dim " + std::to_string(plan.kernel->head_dim) +
                                                " with " + std::to_string(plan.warps) +
                                                " warps cannot be resident on this device (shared memory " +
                                                std::to_string(plan.smem_bytes) + " bytes)");
  }
  cache[{dev, func}] = n;
  *blocks_per_sm = n;
  return Status::Ok();
}

// Dynamic shared memory for a programmatic dependent launch (programmatic_tail_tokens > 0) of `ctas` CTAs of the
// plan's kernel, which fits `occ` per SM: its own, or, where the grid is at most one CTA per SM and the kernel fits
// two or more, enough more that an SM cannot hold a second. Launched while the kernel before it (kv_append) still
// held some SMs, such a grid got two CTAs on some SMs, which then took twice as long. Measured on the H200 (session
// 36, docs/results/attention_pdl_spread_s36_h200.txt, a CUDA graph of append + attention steps, two rounds): int8 at
// long 128K 82.0 -> 69.1 us per step (stream order: 70.8), long 32K 27.1 -> 23.2, seed000 B = 32 / 64 / 128 0.917 /
// 0.888 / 0.861x the time, fp8 0.887-0.947x, bf16 at B = 128 (two 4-warp CTAs fit) 0.982x. Not in stream order, where
// the same padding cost the split plans of 8-bit caches at B = 32 / 64 1.5-5% (the SM is empty when they launch), and
// not for grids of more than one CTA per SM (the SmolLM2 shape, three per SM: int8 0.80x but int4 1.05x), which want
// their own measurement. Where no padded size gives one CTA per SM, the kernel's own size.
Status spread_smem_bytes(const Plan& plan, long long ctas, int occ, const DeviceInfo& dev, int* smem) {
  *smem = plan.smem_bytes;
  if (ctas > dev.sm_count || occ < 2 || dev.smem_per_sm <= 0) return Status::Ok();
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev.device, plan.func);
  if (auto it = cache.find(key); it != cache.end()) {
    if (it->second > 0) *smem = it->second;
    return Status::Ok();
  }
  const int pad = attention::one_cta_per_sm_smem(dev.smem_per_sm, dev.reserved_smem_per_block);
  int padded = 0;
  if (pad > plan.smem_bytes && pad <= dev.max_smem_per_block_optin) {
    QDEC_CUDA_RETURN(
        cudaFuncSetAttribute(plan.func, cudaFuncAttributeMaxDynamicSharedMemorySize, dev.max_smem_per_block_optin));
    int n = 0;
    QDEC_CUDA_RETURN(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, plan.func, plan.warps * 32, static_cast<size_t>(pad)));
    if (n == 1) padded = pad;  // the occupancy API agrees: one CTA per SM
  }
  cache[key] = padded;
  if (padded > 0) *smem = padded;
  return Status::Ok();
}

// Resident CTAs per SM that the split count plans for, at most (the occupancy may be lower): 8 warps per SM for 8-
// and 16-bit caches at head_dim 128 (one CTA of 8 warps since v22), 16 otherwise. Measured on the
// H200 (docs/attention.md, v20, with 4-warp CTAs): the 8- and 16-bit loops stream at the HBM rate with 2 CTAs (8 warps)
// per SM, so filling more slots only adds splits (int8 B=256: 1 split 127.4 us vs 2 splits 135.4; B=32: 8 vs 15 splits
// 25.8 vs 27.4 us; long 128K: 30 vs 60 splits 70.6 vs 74.0 us); an int4 cache is instruction-bound and needs the
// warps of 4 CTAs (B=128: 4 splits 46.9 us, 2 splits 50.5), and so do head_dim 64 caches, whose block16s carry
// half the bytes for the same per-block16 work (SmolLM2 shape, int8: 5 splits 39.3 us, 4 splits 44.2); a fifth
// CTA (head_dim 64 fits one) doubled that shape's splits for a loss (int4: 5 splits 34.1 us, 10 splits 40.1).
// Session 19: the 8-warp int4 kernels plan for as many CTAs as the SM's share of the DRAM bandwidth needs
// (attention::int4_split_ctas_per_sm): two on the H200, one on an H100.
int split_ctas_per_sm(const attention::DecodeKernelInfo& k, int warps, const DeviceInfo& dev) {
  const bool int4 = k.k_kind == KvKind::kINT4 || k.v_kind == KvKind::kINT4;
  if (int4 && k.head_dim == 128 && warps == 8) return attention::int4_split_ctas_per_sm(dev.dram_gbps, dev.sm_count);
  const int warps_per_sm = int4 || k.head_dim < 128 ? 16 : 8;
  return std::max(1, warps_per_sm / warps);
}

Status validate_and_plan(const DecodeAttentionParams& p, Plan* plan) {
  if (p.batch < 1) return invalid("batch " + std::to_string(p.batch) + " must be >= 1");
  if (p.num_qo_heads < 1) return invalid("num_qo_heads " + std::to_string(p.num_qo_heads) + " must be >= 1");
  if (p.num_kv_heads < 1) return invalid("num_kv_heads " + std::to_string(p.num_kv_heads) + " must be >= 1");
  if (p.num_qo_heads % p.num_kv_heads != 0)
    return invalid("num_qo_heads " + std::to_string(p.num_qo_heads) + " is not a multiple of num_kv_heads " +
                   std::to_string(p.num_kv_heads));
  if (p.batch > 65535) return invalid("batch " + std::to_string(p.batch) + " exceeds the grid limit 65535");
  if (p.num_kv_heads > 65535)
    return invalid("num_kv_heads " + std::to_string(p.num_kv_heads) + " exceeds the grid limit 65535");
  const int group_size = p.num_qo_heads / p.num_kv_heads;
  if (group_size > 16)
    return Status(StatusCode::kUnsupported,
                  "group_size " + std::to_string(group_size) + " (num_qo_heads / num_kv_heads) exceeds 16");
  // The plan and the merge count (sequence, head) rows and (sequence, KV head) CTAs in int.
  const long long rows = static_cast<long long>(p.batch) * p.num_qo_heads;
  if (rows > INT_MAX)
    return invalid("batch * num_qo_heads = " + std::to_string(rows) + " exceeds " + std::to_string(INT_MAX));
  if (p.head_dim != 64 && p.head_dim != 128)
    return Status(StatusCode::kUnsupported,
                  "head_dim " + std::to_string(p.head_dim) + " is not supported (supported: 64, 128)");
  if (!(p.sm_scale >= 0.0f) || !std::isfinite(p.sm_scale))
    return invalid("sm_scale " + std::to_string(p.sm_scale) + " must be finite and >= 0 (0 = 1/sqrt(head_dim))");
  QDEC_RETURN_IF_ERROR(validate_kv_format(p.k_format, p.head_dim));
  QDEC_RETURN_IF_ERROR(validate_kv_format(p.v_format, p.head_dim));
  const bool k16 = p.k_format.kind == KvKind::kBF16 || p.k_format.kind == KvKind::kFP16;
  const bool v16 = p.v_format.kind == KvKind::kBF16 || p.v_format.kind == KvKind::kFP16;
  if ((k16 || v16) && !(p.k_format == p.v_format))
    return invalid("k_format " + p.k_format.name() + " and v_format " + p.v_format.name() +
                   " do not match (16-bit caches need the same format for K and V)");
  if (p.k_format.kind == KvKind::kBF16 && p.q_dtype != DType::kBF16)
    return invalid(std::string("q_dtype ") + dtype_name(p.q_dtype) + " does not match the bf16 cache (needs bf16)");
  if (p.k_format.kind == KvKind::kFP16 && p.q_dtype != DType::kFP16)
    return invalid(std::string("q_dtype ") + dtype_name(p.q_dtype) + " does not match the fp16 cache (needs fp16)");
  const int kg = kv_groups(p.k_format, p.head_dim), vg = kv_groups(p.v_format, p.head_dim);
  plan->kernel = find_kernel(p.k_format.kind, kg, p.v_format.kind, vg, p.head_dim);
  if (!plan->kernel)
    return Status(StatusCode::kUnsupported, "K/V format pair (" + p.k_format.name() + ", " + p.v_format.name() +
                                                ") at head_dim " + std::to_string(p.head_dim) +
                                                " is not compiled; supported: " + kSupportedPairs);
  if (p.page_size < 16 || p.page_size > 256 || (p.page_size & (p.page_size - 1)) != 0)
    return invalid("page_size " + std::to_string(p.page_size) + " must be a power of two in 16..256");
  // The kernel: the base variant (decode_warps), or for int4 V caches at head_dim 128 the 4-warp one for pages of
  // 16 and 32 tokens, contiguous or paged (v21's kernel there: in 16-token pages the 8-warp one ran paged caches
  // 2-6% slower at B = 32, 512 and long 32K, and 16 of 95 paged cases more than 5% over their contiguous cache;
  // docs/attention.md v22), or, below, the 16-warp one; cta_warps asks for any compiled one.
  const int nh = group_size <= 8 ? 0 : 1;
  const auto assign = [nh](Plan& q, const attention::DecodeVariant& v) {
    q.func = v.func[nh];
    q.warps = v.warps;
    q.smem_bytes = v.smem_bytes;
  };
  const auto use = [&](const attention::DecodeVariant& v) { assign(*plan, v); };
  const attention::DecodeVariant* variants[] = {&plan->kernel->base, &plan->kernel->small_pages, &plan->kernel->wide,
                                                &plan->kernel->narrow};
  if (p.cta_warps < 0) return invalid("cta_warps " + std::to_string(p.cta_warps) + " must be >= 0 (0 = automatic)");
  if (p.cta_warps > 0) {
    std::string supported;
    for (const attention::DecodeVariant* v : variants) {
      if (v->warps == 0 || v->func[nh] == nullptr) continue;
      if (v->warps == p.cta_warps) use(*v);
      supported += ", " + std::to_string(v->warps);
    }
    if (plan->warps != p.cta_warps)
      return Status(StatusCode::kUnsupported,
                    "cta_warps " + std::to_string(p.cta_warps) + " is not compiled for (" + p.k_format.name() + ", " +
                        p.v_format.name() + ") at head_dim " + std::to_string(p.head_dim) + " and group_size " +
                        std::to_string(group_size) + "; supported: 0 (automatic)" + supported);
  } else if (p.page_size < 64 && plan->kernel->small_pages.warps != 0) {
    use(plan->kernel->small_pages);
  } else {
    use(plan->kernel->base);
  }
  const bool wide_ok = p.cta_warps == 0 && p.page_size >= 64 && plan->kernel->wide.func[nh] != nullptr;
  if (p.max_pages_per_seq < 1)
    return invalid("max_pages_per_seq " + std::to_string(p.max_pages_per_seq) + " must be >= 1");
  const KvTileLayout kt{p.k_format, p.head_dim, p.page_size}, vt{p.v_format, p.head_dim, p.page_size};
  const size_t k_page_min = kt.tile_bytes() * p.num_kv_heads, v_page_min = vt.tile_bytes() * p.num_kv_heads;
  if (p.k_page_stride_bytes < k_page_min || p.k_page_stride_bytes % 16 != 0)
    return invalid("k_page_stride_bytes " + std::to_string(p.k_page_stride_bytes) +
                   " must be a multiple of 16 and >= num_kv_heads * K tile bytes = " + std::to_string(k_page_min));
  if (p.v_page_stride_bytes < v_page_min || p.v_page_stride_bytes % 16 != 0)
    return invalid("v_page_stride_bytes " + std::to_string(p.v_page_stride_bytes) +
                   " must be a multiple of 16 and >= num_kv_heads * V tile bytes = " + std::to_string(v_page_min));
  if (!p.block_table && p.num_pages != 0 &&
      static_cast<long long>(p.num_pages) < static_cast<long long>(p.batch) * p.max_pages_per_seq)
    return invalid("num_pages " + std::to_string(p.num_pages) + " is smaller than batch * max_pages_per_seq = " +
                   std::to_string(static_cast<long long>(p.batch) * p.max_pages_per_seq) + " for a contiguous cache");
  struct NamedPtr {
    const char* name;
    const void* ptr;
    bool need16;
  };
  for (const NamedPtr& np : {NamedPtr{"q", p.q, true}, NamedPtr{"o", p.o, true}, NamedPtr{"k_cache", p.k_cache, true},
                             NamedPtr{"v_cache", p.v_cache, true}, NamedPtr{"seq_lens", p.seq_lens, false},
                             NamedPtr{"seq_lens_host", p.seq_lens_host, false}}) {
    if (!np.ptr) return invalid(std::string(np.name) + " is null");
    if (np.need16 && !aligned16(np.ptr)) return invalid(std::string(np.name) + " is not 16-byte aligned");
  }
  if ((reinterpret_cast<uintptr_t>(p.seq_lens) & 3u) != 0) return invalid("seq_lens is not 4-byte aligned");
  if (p.lse && (reinterpret_cast<uintptr_t>(p.lse) & 3u) != 0) return invalid("lse is not 4-byte aligned");
  if (p.block_table && (reinterpret_cast<uintptr_t>(p.block_table) & 3u) != 0)
    return invalid("block_table is not 4-byte aligned");
  const int t_cap = p.max_pages_per_seq * p.page_size;
  int max_len = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int len = p.seq_lens_host[b];
    if (len < 1 || len > t_cap)
      return invalid("seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside 1.." +
                     std::to_string(t_cap) + " (max_pages_per_seq * page_size)");
    max_len = std::max(max_len, len);
  }
  plan->max_len = max_len;
  if (p.block_table) {
    if (!p.block_table_host)
      return invalid("block_table_host is null (the host copy of block_table is required for validation)");
    if (p.num_pages < 1)
      return invalid("num_pages " + std::to_string(p.num_pages) + " must be >= 1 with a block table");
    for (int b = 0; b < p.batch; ++b) {
      const int used = (p.seq_lens_host[b] + p.page_size - 1) / p.page_size;
      const int32_t* row = p.block_table_host + static_cast<size_t>(b) * p.max_pages_per_seq;
      for (int j = 0; j < used; ++j) {
        if (row[j] < 0 || row[j] >= p.num_pages)
          return invalid("block_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " +
                         std::to_string(row[j]) + " is outside the pool 0.." + std::to_string(p.num_pages - 1));
      }
    }
  }
  if (p.programmatic_tail_tokens < 0)
    return invalid("programmatic_tail_tokens " + std::to_string(p.programmatic_tail_tokens) + " must be >= 0");
  if (p.num_splits < 0 || p.num_splits > 1024)
    return invalid("num_splits " + std::to_string(p.num_splits) + " must be in 0..1024 (0 = automatic)");

  if (p.num_splits > 0) {
    plan->num_splits = p.num_splits;
  } else {
    DeviceInfo dev;
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    int occ = 0;
    QDEC_RETURN_IF_ERROR(kernel_occupancy(*plan, &occ));
    const int ctas = p.batch * p.num_kv_heads;
    const int cap = std::min(occ, split_ctas_per_sm(*plan->kernel, plan->warps, dev));
    // 8-bit caches at head_dim 64 (s15c): a 4-warp CTA is limited by its own instruction stream, so an SM left with
    // 1-2 of its 4 slots streams far slower than the fitted rate says. When the unsplit grid fits in one round of
    // `cap` CTAs per SM, the split grid stays within one round; above that, partly filled SMs count at r / cap.
    // Measured on the H200 (SmolLM2 family, T = 4096, splits 1-8 forced,
    // docs/results/attention_hd64_splits_s15_h200.txt): int8 B = 48 5 splits 34.8 us -> 3 splits 29.3, B = 96 5
    // splits 53.6 -> unsplit 47.3, B = 256 unsplit 137.2 -> 2 splits 112.7; geomean regret over 10 batches 1.057
    // -> 1.006 (fp8 1.060 -> 1.006, int8-g32 1.040 -> 1.015). int4 V caches keep the estimate (the one-round cap cost
    // them up to 22% at B = 96).
    const bool q8_hd64 =
        !k16 && p.k_format.kind != KvKind::kINT4 && p.v_format.kind != KvKind::kINT4 && p.head_dim < 128;
    const long long planned_round = static_cast<long long>(cap) * dev.sm_count;
    plan->num_splits = attention::choose_splits(ctas, dev.sm_count, cap, max_len, plan->warps * kBlockTokens,
                                                /*linear_partial=*/q8_hd64 && ctas > planned_round);
    if (q8_hd64 && ctas <= planned_round)
      plan->num_splits = static_cast<int>(std::min<long long>(plan->num_splits, std::max(1LL, planned_round / ctas)));
    // One unsplit 16-warp CTA per SM instead of split 8-warp CTAs and the merge kernel, when at least 3/4 of the
    // SMs get one (int4 V caches, group_size <= 8). Measured on the H200 (docs/attention.md, v22), T = 8192, int4:
    // B = 128 45.3 -> 41.7 us (2 splits of 8 warps -> 1 of 16), B = 112 42.8 -> 39.1, B = 100 43.9 -> 39.3; an
    // unsplit 16-warp CTA costs about the same at any B (one sequence per SM), while 8-warp CTAs take less at
    // B = 80 (3 splits, 33.1 us); with splits the 16-warp CTAs lost (B = 32: 4 splits 21.2 us against 8 splits of
    // 8 warps 19.5), and so did several rounds of them (B = 512 +3..8%).
    // Pages of 64 tokens or more only (in 16-token pages it read a paged cache 6.5% slower than the 8-warp kernel
    // did, B = 128 int4 50.5 against 47.4 us, and 14-23% slower than its contiguous cache).
    // Where the 8-warp plan is one CTA per SM (an H100: int4_split_ctas_per_sm), the estimate leaves these grids
    // unsplit; the 16-warp CTA is taken there as well (at B = 128 the two were within 2-5% of each other, either way,
    // on an H100 in session 19).
    const bool one_per_sm = 4 * ctas >= 3 * dev.sm_count && ctas <= dev.sm_count;
    const bool wide_fits = wide_ok && plan->kernel->wide.smem_bytes <= dev.max_smem_per_block_optin;
    if (wide_fits && (plan->num_splits >= 2 || cap == 1) && one_per_sm) {
      use(plan->kernel->wide);
      plan->num_splits = 1;
    }
    // Long sequences (int4 V, where two 8-warp split CTAs share an SM, as on the H200): one 16-warp CTA per SM with
    // half as many splits, once each split holds >= 8192 tokens (attention::wide_split_count). Measured on the H200
    // (session 36, docs/results/attention_wide_split_s36_h200.txt; 8 (sequence, KV head) pairs, 16 splits of 16 warps
    // against 32 of 8): long 128K contiguous int4 0.973x the time, int4-g2 0.982, int4-g4 0.980, int4-g8 0.983, the
    // int8 / int4 pairs 0.994-1.008; paged (64-token pages) int4-g4 0.956, int4 / int4-g2 1.005-1.006, the rest
    // 0.988-0.999; T = 262144 (8 / 1 heads) 0.962-1.007. Shorter splits lost: T = 98304 (6144 tokens per split)
    // 0.995-1.014, 65536 0.994-1.039, 32768 1.006-1.065.
    if (wide_fits && plan->warps == 8 && cap == 2 && plan->num_splits >= 2) {
      const int wide_splits = attention::wide_split_count(ctas, dev.sm_count, max_len);
      if (wide_splits > 0) {
        use(plan->kernel->wide);
        plan->num_splits = wide_splits;
      }
    }
    // The same bound for the 8-warp kernels of 8- and 16-bit caches, which stream at the HBM rate with one CTA per
    // SM: the estimate above counts a split's extra CTAs as parallel work but not that the unsplit grid is already
    // bandwidth-bound (v22 split sweep, docs/results/attention_splits_v22_h200.txt, T = 8192: B = 100 int8 planned
    // 5 splits, 64.4 us, 1 split 56.5; bf16 106.9 against 103.5; B = 112 and 128 plan 1 split already).
    if (plan->warps == 8 && plan->kernel->wide.warps == 0 && plan->num_splits >= 2 && one_per_sm) plan->num_splits = 1;
    // 16-bit caches stream at the HBM rate from few CTAs (one 8-warp CTA per SM at head_dim 128, up to four of 4
    // warps at 64): unsplit whenever every round of the unsplit grid, the last one included, still gives >= 3/4 of
    // the SMs a CTA, so the split adds only its merge. Measured on the H200 (SmolLM2 shape, head_dim 64, B = 64,
    // 192 CTAs in one round of 4 per SM): bf16 1 split 50.85 us, 2 splits (the estimate) 52.3-52.6, 3 57.0.
    if (k16 && plan->num_splits >= 2) {
      const long long resident = static_cast<long long>(occ) * dev.sm_count;  // one round of the unsplit grid
      const long long last = ctas % resident == 0 ? resident : ctas % resident;
      if (4 * last >= 3LL * dev.sm_count) plan->num_splits = 1;
    }
    // 16-bit caches at head_dim 128 (group_size <= 8, pages of 64 tokens or more): unsplit 4-warp CTAs (two per SM)
    // instead of 8-warp ones (one per SM), when the grid has at least 2/3 as many CTAs as there are SMs and the
    // 4-warp grid fits in one round or fills >= 3/4 of its last. Past one 8-warp round, that grid's short last round
    // left most SMs idle (or the plan split to avoid it), and below it the 4-warp CTAs, one or two per SM, streamed
    // as fast or faster. Measured on the H200 (session 16, docs/results/attention_narrow_s16_h200.txt, T = 8192,
    // group_size 8, bf16, previous plan -> 4-warp unsplit, same call): B = 96 101.9 -> 96.4 us (4 splits before),
    // 100 100.8 -> 99.1 (unsplit 8-warp), 120 118.7 -> 117.7, 128 126.5 -> 126.3; B = 140 145.6 -> 140.1 (4 splits),
    // 160 163.0 -> 162.4 (4), 200 194.2 -> 193.3 (3), 232 238.0 -> 219.2 (unsplit), 256 242.3 -> 236.0, 512 487.4 ->
    // 471.8 (last round 248 of 264). Where the rule does not apply the 4-warp grid lost: B = 300 (last round 36 of
    // 264) 286.7 -> 297.6, 384 (120 of 264) 363.7 -> 404.2. B = 464 (200 of 264) is on the line: 463.3 -> 465.5.
    // From 2/5 to 2/3 of the SMs the 8-warp kernel runs unsplit: one CTA on each of fewer SMs streams faster than
    // the split grid with its merge (docs/results/attention_smallb_s16_h200.txt, same call, split plan -> unsplit
    // 8 warps): B = 56 61.3 -> 58.7 us (2 splits), 64 69.7 -> 67.2 (2), 72 83.2 -> 74.7 (5), 80 90.6 -> 82.5 (3), 84
    // 91.6 -> 85.4 (3); the 4-warp kernel unsplit was 1-13% slower than that there. At B = 32 (a quarter of the SMs)
    // the split plan stays (4 splits 38.2 us, unsplit 43.8).
    const attention::DecodeVariant& narrow = plan->kernel->narrow;
    const bool k16_hd128 = k16 && p.head_dim == 128 && nh == 0 && p.cta_warps == 0 && p.page_size >= 64;
    if (k16_hd128 && plan->warps == 8 && 5LL * ctas >= 2LL * dev.sm_count && 3LL * ctas < 2LL * dev.sm_count)
      plan->num_splits = 1;
    if (k16_hd128 && narrow.func[0] != nullptr && 3LL * ctas >= 2LL * dev.sm_count) {
      Plan alt = *plan;  // the plan with the 4-warp kernel, for its occupancy
      assign(alt, narrow);
      int occ_narrow = 0;
      QDEC_RETURN_IF_ERROR(kernel_occupancy(alt, &occ_narrow));
      const long long slots = static_cast<long long>(occ_narrow) * dev.sm_count;
      const long long last = ctas % slots == 0 ? slots : ctas % slots;
      if (occ_narrow >= 2 && (ctas <= slots || 4 * last >= 3 * slots)) {  // measured at 2 per SM only
        use(narrow);
        plan->num_splits = 1;
      }
    }
  }
  plan->workspace_bytes =
      plan->num_splits > 1
          ? static_cast<size_t>(p.batch) * p.num_qo_heads * plan->num_splits * (p.head_dim + 1) * sizeof(float) + 256
          : 0;
  return Status::Ok();
}

}  // namespace

Status decode_attention_workspace_bytes(const DecodeAttentionParams& p, size_t* bytes) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  *bytes = plan.workspace_bytes;
  return Status::Ok();
}

Status decode_attention_num_splits(const DecodeAttentionParams& p, int* num_splits) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  *num_splits = plan.num_splits;
  return Status::Ok();
}

Status decode_attention_cta_warps(const DecodeAttentionParams& p, int* cta_warps) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  *cta_warps = plan.warps;
  return Status::Ok();
}

Status decode_attention(const DecodeAttentionParams& p, cudaStream_t stream) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  float* part_o = nullptr;
  float* part_lse = nullptr;
  if (plan.num_splits > 1) {
    if (!p.workspace || p.workspace_bytes < plan.workspace_bytes)
      return Status(StatusCode::kOutOfMemory, "workspace of " + std::to_string(p.workspace_bytes) +
                                                  " bytes is too small: " + std::to_string(plan.num_splits) +
                                                  " splits need " + std::to_string(plan.workspace_bytes));
    if (!aligned16(p.workspace)) return invalid("workspace is not 16-byte aligned");
    part_o = static_cast<float*>(p.workspace);
    const size_t o_elems = static_cast<size_t>(p.batch) * p.num_qo_heads * plan.num_splits * p.head_dim;
    part_lse = part_o + ((o_elems + 63) / 64) * 64;
  }
  int occ = 0;  // also raises the kernel's shared-memory limit (once per device)
  QDEC_RETURN_IF_ERROR(kernel_occupancy(plan, &occ));

  attention::DecodeKernelParams kp{};
  kp.k_cache = static_cast<const uint8_t*>(p.k_cache);
  kp.v_cache = static_cast<const uint8_t*>(p.v_cache);
  kp.block_table = p.block_table;
  kp.seq_lens = p.seq_lens;
  kp.q = p.q;
  kp.o = p.o;
  kp.lse = p.lse;
  kp.part_o = part_o;
  kp.part_lse = part_lse;
  kp.k_page_stride = static_cast<long long>(p.k_page_stride_bytes);
  kp.v_page_stride = static_cast<long long>(p.v_page_stride_bytes);
  kp.k_tile_bytes = static_cast<int>(KvTileLayout{p.k_format, p.head_dim, p.page_size}.tile_bytes());
  kp.v_tile_bytes = static_cast<int>(KvTileLayout{p.v_format, p.head_dim, p.page_size}.tile_bytes());
  kp.page_size_log2 = 0;
  while ((1 << kp.page_size_log2) < p.page_size) ++kp.page_size_log2;
  kp.max_pages_per_seq = p.max_pages_per_seq;
  kp.num_qo_heads = p.num_qo_heads;
  kp.group_size = p.num_qo_heads / p.num_kv_heads;
  kp.num_splits = plan.num_splits;
  const float sm_scale = p.sm_scale > 0.f ? p.sm_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  kp.sm_scale_log2 = sm_scale * 1.4426950408889634f;
  kp.q_is_fp16 = p.q_dtype == DType::kFP16 ? 1 : 0;
  int smem = plan.smem_bytes;
  bool pdl = p.programmatic_tail_tokens > 0;
  if (pdl) {
    DeviceInfo dev;
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    const long long ctas = static_cast<long long>(plan.num_splits) * p.num_kv_heads * p.batch;
    pdl = attention::programmatic_launch_pays(plan.num_splits, ctas, dev.sm_count, occ);  // else stream order
    if (pdl) QDEC_RETURN_IF_ERROR(spread_smem_bytes(plan, ctas, occ, dev, &smem));
  }
  kp.pdl_tail_tokens = pdl ? p.programmatic_tail_tokens : 0;
  void* args[] = {&kp};
  const LaunchConfig cfg(dim3(plan.num_splits, p.num_kv_heads, p.batch), dim3(plan.warps * 32),
                         static_cast<size_t>(smem), stream, pdl);
  QDEC_CUDA_RETURN(cudaLaunchKernelExC(cfg.get(), plan.func, args));
  if (plan.num_splits > 1) {
    QDEC_RETURN_IF_ERROR(attention::launch_decode_merge(part_o, part_lse, p.o, p.lse, p.batch * p.num_qo_heads,
                                                        plan.num_splits, p.head_dim, kp.q_is_fp16 != 0, stream));
  }
  return Status::Ok();
}

void set_contiguous_cache(DecodeAttentionParams* p, const ContiguousKvLayout& k_layout, const void* k_cache,
                          const ContiguousKvLayout& v_layout, const void* v_cache) {
  p->k_format = k_layout.tile.format;
  p->v_format = v_layout.tile.format;
  p->head_dim = k_layout.tile.head_dim;
  p->page_size = k_layout.tile.page_size;
  p->max_pages_per_seq = k_layout.pages_per_seq();
  p->num_pages = k_layout.batch * k_layout.pages_per_seq();
  p->k_page_stride_bytes = k_layout.page_bytes();
  p->v_page_stride_bytes = v_layout.page_bytes();
  p->k_cache = k_cache;
  p->v_cache = v_cache;
  p->block_table = nullptr;
}

}  // namespace qdec
