// W4A8 (QoQ) GEMM host side: the prepack into the kernel's layout (w4a8_layout.h, docs/formats.md "W4A8 kernel
// layout"), validation, the configuration / split-K plan and the closed dispatch list of kernel instantiations
// (w4a8_kernel.cuh). docs/int8_w4a8.md has the design and the measurements.
#include <algorithm>
#include <atomic>
#include <string>

#include "int8gemm/w4a8_dequant.h"
#include "int8gemm/w4a8_kernel.cuh"
#include "int8gemm/w4a8_layout.h"
#include "int8gemm/w4a8_wgmma.h"
#include "qdec/w4a8_gemm.h"
#include "qdec/workspace.h"
#include "runtime/cuda_check.h"

namespace qdec {

namespace {

using w4a8::PackedLayout;

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, "w4a8: " + std::move(msg));
}

Status check_shape(int n, int k, int group_size) {
  if (n < 1) return invalid("N " + std::to_string(n) + " must be >= 1");
  if (k < w4a8::kTileK || k % w4a8::kTileK != 0)
    return invalid("K " + std::to_string(k) + " must be a positive multiple of " + std::to_string(w4a8::kTileK));
  if (k > kInt8GemmMaxK)
    return invalid("K " + std::to_string(k) + " exceeds " + std::to_string(kInt8GemmMaxK) +
                   " (int32 accumulation could overflow)");
  if (group_size != 0 && group_size != 32 && group_size != 64 && group_size != 128)
    return invalid("group size " + std::to_string(group_size) + " is not supported (supported: 0, 32, 64, 128)");
  return Status::Ok();
}

// Writes the codes of a [n, k] QoQ code matrix (nibble-packed as in int8_quant.h) into the tile order.
template <class W>
void pack_codes(const W& w, const PackedLayout& lay, uint8_t* out) {
  for (int r = 0; r < w.n; ++r)
    for (int c = 0; c < w.k; ++c) {
      int shift = 0;
      const size_t byte = lay.code_byte(r, c, &shift);
      out[byte] = static_cast<uint8_t>(out[byte] | (w.code(r, c) << shift));
    }
}

}  // namespace

const char* w4a8_path_name(W4A8Path p) {
  switch (p) {
    case W4A8Path::kAuto:
      return "auto";
    case W4A8Path::kTokens8:
      return "t8";
    case W4A8Path::kTokens16:
      return "t16";
    case W4A8Path::kTokens32:
      return "t32";
    case W4A8Path::kTokens64:
      return "t64";
    case W4A8Path::kTokens128:
      return "t128";
    case W4A8Path::kDequantW8A8:
      return "dq-w8a8";
    case W4A8Path::kWgmma64:
      return "wg64";
    case W4A8Path::kWgmma128:
      return "wg128";
    case W4A8Path::kWgmma256:
      return "wg256";
  }
  return "?";
}

Status w4a8_prepack(const QoQGroupWeights& w, W4A8Packed* out) {
  if (!out) return invalid("output pointer out is null");
  QDEC_RETURN_IF_ERROR(check_shape(w.n, w.k, w.group_size));
  if (w.group_size == 0) return invalid("group size 0 is the per-channel scheme (QoQChannelWeights)");
  const int ng = w.num_groups();
  if (w.codes.size() != size_t(w.n) * w.k / 2 || w.group_scales.size() != size_t(w.n) * ng ||
      w.group_zeros.size() != size_t(w.n) * ((ng + 1) / 2) || w.channel_scales.size() != size_t(w.n))
    return invalid("qoq weights [" + std::to_string(w.n) + ", " + std::to_string(w.k) + "] group " +
                   std::to_string(w.group_size) + " have inconsistent sizes");
  const PackedLayout lay{w.n, w.k, w.group_size};
  std::vector<uint8_t> data(lay.total_bytes(), 0);
  for (int r = 0; r < w.n; ++r)
    for (int gi = 0; gi < ng; ++gi) {
      const int s1 = w.scale(r, gi), z = w.zero(r, gi);
      // q * s1 must fit in a byte (the in-register dequantization multiplies four codes in one 32-bit word).
      if (s1 > w4a8::kMaxGroupScale)
        return invalid("group scale " + std::to_string(s1) + " of (row " + std::to_string(r) + ", group " +
                       std::to_string(gi) + ") exceeds " + std::to_string(w4a8::kMaxGroupScale));
      for (int c = gi * w.group_size; c < (gi + 1) * w.group_size; ++c) {
        const int v = (w.code(r, c) - z) * s1;
        if (v < -128 || v > 127)
          return invalid("weight (" + std::to_string(r) + ", " + std::to_string(c) + ") dequantizes to " +
                         std::to_string(v) + ", outside int8 (its int8 value left the protective range [-119, 119])");
      }
      const size_t mb = lay.meta_byte(r, gi);
      data[mb] = static_cast<uint8_t>(s1);
      data[mb + 1] = static_cast<uint8_t>(z * s1);
    }
  pack_codes(w, lay, data.data());
  auto* scales = reinterpret_cast<uint16_t*>(data.data() + lay.scale_offset());
  for (int r = 0; r < w.n; ++r) scales[r] = w.channel_scales[r];
  out->n = w.n;
  out->k = w.k;
  out->group_size = w.group_size;
  out->data = std::move(data);
  return Status::Ok();
}

Status w4a8_prepack(const QoQChannelWeights& w, W4A8Packed* out) {
  if (!out) return invalid("output pointer out is null");
  QDEC_RETURN_IF_ERROR(check_shape(w.n, w.k, 0));
  if (w.codes.size() != size_t(w.n) * w.k / 2 || w.scales.size() != size_t(w.n) || w.zeros.size() != size_t(w.n))
    return invalid("qoq per-channel weights [" + std::to_string(w.n) + ", " + std::to_string(w.k) +
                   "] have inconsistent sizes");
  const PackedLayout lay{w.n, w.k, 0};
  std::vector<uint8_t> data(lay.total_bytes(), 0);
  pack_codes(w, lay, data.data());
  auto* scales = reinterpret_cast<uint16_t*>(data.data() + lay.scale_offset());
  for (int r = 0; r < w.n; ++r) {
    scales[r] = w.scales[r];
    data[lay.zero_offset() + r] = static_cast<uint8_t>(w.zeros[r] & 0x0F);
  }
  out->n = w.n;
  out->k = w.k;
  out->group_size = 0;
  out->data = std::move(data);
  return Status::Ok();
}

// ---- Plan and launch ---------------------------------------------------------------------------------------------
namespace {

// The closed dispatch list: five configurations x two schemes.
using Cfg8 = w4a8::Config<8, 1, 1>;
using Cfg16 = w4a8::Config<8, 1, 2>;
using Cfg32 = w4a8::Config<8, 1, 4>;
using Cfg64 = w4a8::Config<8, 1, 8>;
using Cfg128 = w4a8::Config<4, 2, 8>;
// The split-K partials hold CB x MT fragments per thread; the plan sizes them as tokens / 8.
static_assert(Cfg8::CB * Cfg8::MT == Cfg8::kTokens / 8 && Cfg16::CB * Cfg16::MT == Cfg16::kTokens / 8 &&
              Cfg32::CB * Cfg32::MT == Cfg32::kTokens / 8 && Cfg64::CB * Cfg64::MT == Cfg64::kTokens / 8 &&
              Cfg128::CB * Cfg128::MT == Cfg128::kTokens / 8);

// Raises the dynamic shared-memory limit of a kernel once per device (the attribute is per device).
template <class C, bool kGroup, bool kG32 = false>
Status prepare_kernel() {
  if constexpr (C::kSmemBytes > 48 * 1024) {
    static std::atomic<uint32_t> done_mask{0};
    int dev = 0;
    QDEC_CUDA_RETURN(cudaGetDevice(&dev));
    const uint32_t bit = 1u << (dev & 31);
    if (!(done_mask.load(std::memory_order_acquire) & bit)) {
      QDEC_CUDA_RETURN(cudaFuncSetAttribute(w4a8::w4a8_kernel<C, kGroup, kG32>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
      done_mask.fetch_or(bit, std::memory_order_acq_rel);
    }
  }
  return Status::Ok();
}

template <class C>
Status launch_cfg(bool group, const w4a8::KernelParams& kp, dim3 grid, cudaStream_t stream) {
  if (group && kp.group_size == 32) {
    QDEC_RETURN_IF_ERROR((prepare_kernel<C, true, true>()));
    w4a8::w4a8_kernel<C, true, true><<<grid, w4a8::kThreads, C::kSmemBytes, stream>>>(kp);
  } else if (group) {
    QDEC_RETURN_IF_ERROR((prepare_kernel<C, true>()));
    w4a8::w4a8_kernel<C, true><<<grid, w4a8::kThreads, C::kSmemBytes, stream>>>(kp);
  } else {
    QDEC_RETURN_IF_ERROR((prepare_kernel<C, false>()));
    w4a8::w4a8_kernel<C, false><<<grid, w4a8::kThreads, C::kSmemBytes, stream>>>(kp);
  }
  return cuda_status(cudaGetLastError(), "w4a8_kernel launch");
}

// Resident CTAs per SM (cached per device; the same for every device of one build in practice). Group 32's kernel is
// taken to fit as its group-64/128 twin.
template <class C>
Status occupancy(bool group, int* blocks) {
  static std::atomic<int> cache[2]{0, 0};
  if (const int c = cache[group].load(std::memory_order_acquire); c > 0) {
    *blocks = c;
    return Status::Ok();
  }
  if (group) {
    QDEC_RETURN_IF_ERROR((prepare_kernel<C, true>()));
    QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, w4a8::w4a8_kernel<C, true>, w4a8::kThreads,
                                                                   C::kSmemBytes));
  } else {
    QDEC_RETURN_IF_ERROR((prepare_kernel<C, false>()));
    QDEC_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, w4a8::w4a8_kernel<C, false>, w4a8::kThreads,
                                                                   C::kSmemBytes));
  }
  cache[group].store(std::max(*blocks, 1), std::memory_order_release);
  return Status::Ok();
}

int cfg_tokens(W4A8Path p) {
  switch (p) {
    case W4A8Path::kTokens8:
      return Cfg8::kTokens;
    case W4A8Path::kTokens16:
      return Cfg16::kTokens;
    case W4A8Path::kTokens32:
      return Cfg32::kTokens;
    case W4A8Path::kTokens64:
      return Cfg64::kTokens;
    case W4A8Path::kWgmma64:
      return 64;
    case W4A8Path::kWgmma128:
      return 128;
    case W4A8Path::kWgmma256:
      return 256;
    default:
      return Cfg128::kTokens;
  }
}

bool is_wgmma(W4A8Path p) {
  return p == W4A8Path::kWgmma64 || p == W4A8Path::kWgmma128 || p == W4A8Path::kWgmma256;
}

struct Plan {
  W4A8Path path = W4A8Path::kAuto;
  int splits = 1, kt_per_split = 0;
  dim3 grid;
  size_t partial_bytes = 0, workspace_bytes = 0;
  // kDequantW8A8: [w8a8_gemm's workspace (state zone + its scratch)][int8 weights][fp32 scales]. Its backend and
  // split count are w8a8_gemm's to plan (w4a8_gemm_plan asks it); only the workspace layout is planned here.
  W8A8Params w8;  // planning pointers; the launch sets the weight's
  size_t w8_ws_bytes = 0, q_offset = 0, scale_offset = 0;
};

size_t round256(size_t b) {
  return (b + 255) / 256 * 256;
}

Status validate(const W4A8Params& p) {
  const Int8ActivationsView& x = p.x;
  const W4A8WeightView& w = p.w;
  QDEC_RETURN_IF_ERROR(check_shape(w.n, w.k, w.group_size));
  if (x.m < 1) return invalid("M " + std::to_string(x.m) + " must be >= 1");
  if (x.k != w.k)
    return invalid("activation K " + std::to_string(x.k) + " does not match weight K " + std::to_string(w.k));
  if (!x.q) return invalid("activation codes x.q are null");
  if (reinterpret_cast<uintptr_t>(x.q) % 16 != 0) return invalid("activation codes x.q are not 16-byte aligned");
  const long long ldq = x.ldq ? x.ldq : x.k;
  if (ldq < x.k || ldq % 16 != 0)
    return invalid("activation ldq " + std::to_string(ldq) + " must be >= K " + std::to_string(x.k) +
                   " and a multiple of 16");
  if (!x.scale) return invalid("activation scales x.scale are null");
  if (reinterpret_cast<uintptr_t>(x.scale) % 4 != 0) return invalid("activation scales x.scale are not 4-byte aligned");
  if (w.group_size == 0) {
    if (!x.row_sum) return invalid("activation row sums x.row_sum are null (the per-channel scheme needs them)");
    if (reinterpret_cast<uintptr_t>(x.row_sum) % 4 != 0) return invalid("x.row_sum is not 4-byte aligned");
  }
  if (!w.data) return invalid("weight data w.data is null");
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return invalid("weight data w.data is not 16-byte aligned");
  const PackedLayout lay{w.n, w.k, w.group_size};
  if (w.bytes < lay.total_bytes())
    return invalid("weight bytes " + std::to_string(w.bytes) + " are fewer than the " +
                   std::to_string(lay.total_bytes()) + " of a packed [" + std::to_string(w.n) + ", " +
                   std::to_string(w.k) + "] group " + std::to_string(w.group_size) + " weight");
  if (p.bias && reinterpret_cast<uintptr_t>(p.bias) % 4 != 0) return invalid("bias is not 4-byte aligned");
  if (p.y_dtype != GemmDType::kBF16 && p.y_dtype != GemmDType::kFP16 && p.y_dtype != GemmDType::kFP32)
    return invalid("y dtype " + std::to_string(int(p.y_dtype)) + " is not supported (bf16, fp16, fp32)");
  if (!p.y) return invalid("output y is null");
  const size_t ysize = p.y_dtype == GemmDType::kFP32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(p.y) % ysize != 0)
    return invalid("output y is not " + std::to_string(ysize) + "-byte aligned");
  const long long ldy = p.ldy ? p.ldy : w.n;
  if (ldy < w.n) return invalid("ldy " + std::to_string(ldy) + " is smaller than N " + std::to_string(w.n));
  if (int(p.path) > int(W4A8Path::kWgmma256)) return invalid("path " + std::to_string(int(p.path)) + " is unknown");
  if (int(p.w8a8_backend) > int(W8A8Backend::kWgmma))
    return invalid("w8a8_backend " + std::to_string(int(p.w8a8_backend)) + " is unknown");
  if (p.num_splits < 0) return invalid("num_splits " + std::to_string(p.num_splits) + " must be >= 0");
  return Status::Ok();
}

// Validated p only.
Status make_plan(const W4A8Params& p, Plan* plan) {
  const int m = p.x.m;
  const PackedLayout lay{p.w.n, p.w.k, p.w.group_size};
  W4A8Path path = p.path;
  if (path == W4A8Path::kAuto) {
    path = m <= 8                     ? W4A8Path::kTokens8
           : m <= 16                  ? W4A8Path::kTokens16
           : m <= 32                  ? W4A8Path::kTokens32
           : m < kW4A8AutoDequantMinM ? W4A8Path::kTokens64
                                      : W4A8Path::kDequantW8A8;
    const long long weights = (long long)p.w.n * p.w.k;
    if (m > 16 && m <= kW4A8AutoWgmmaMaxM && weights >= kW4A8AutoWgmmaMinWeights128 &&
        w4a8::wgmma_kernel_supported().ok()) {
      const bool big = weights >= kW4A8AutoWgmmaMinWeights256;
      if (m <= 32) {
        const long long min_weights =
            p.w.group_size == 0 ? kW4A8AutoWgmma32MinWeightsChannel : kW4A8AutoWgmma32MinWeights;
        if (weights >= min_weights) path = W4A8Path::kWgmma64;
      } else if (m <= 64) {
        path = W4A8Path::kWgmma64;
      } else if (m <= 128) {
        path = W4A8Path::kWgmma128;
      } else if (m <= 256) {
        path = big && p.w.n >= kW4A8AutoWgmma256MinN ? W4A8Path::kWgmma256 : W4A8Path::kWgmma128;
      } else if (big) {
        path = W4A8Path::kWgmma256;
      }
    }
  }
  if (path == W4A8Path::kDequantW8A8) {
    // The W8A8 call on the int8 weights. Planning needs aligned non-null weight pointers only: the packed weight's
    // address stands in (validated, 16-byte aligned, never dereferenced by planning); w4a8_gemm sets the real ones.
    W8A8Params& w8 = plan->w8;
    w8.x = p.x;
    w8.w =
        Int8WeightView{p.w.n, p.w.k, static_cast<const int8_t*>(p.w.data), p.w.k, static_cast<const float*>(p.w.data)};
    w8.bias = p.bias;
    w8.y_dtype = p.y_dtype;
    w8.y = p.y;
    w8.ldy = p.ldy;
    w8.backend = p.w8a8_backend;
    w8.num_splits = p.num_splits;
    QDEC_RETURN_IF_ERROR(w8a8_gemm_workspace_bytes(w8, &plan->w8_ws_bytes));
    plan->path = path;
    plan->q_offset = std::max(round256(plan->w8_ws_bytes), kWorkspaceStateBytes);
    plan->scale_offset = plan->q_offset + round256(size_t(p.w.n) * size_t(p.w.k));
    plan->workspace_bytes = plan->scale_offset + round256(size_t(p.w.n) * 4);
    return Status::Ok();
  }
  if (is_wgmma(path)) QDEC_RETURN_IF_ERROR(w4a8::wgmma_kernel_supported());
  const int tokens = cfg_tokens(path);
  const int cols = (lay.n_blocks() + w4a8::kCtaBlocks - 1) / w4a8::kCtaBlocks;
  const int rows = (m + tokens - 1) / tokens;
  if (rows > 65535) return invalid("M " + std::to_string(m) + " needs more than 65535 token tiles");
  if (is_wgmma(path) && (long long)cols * rows > 0x7FFFFFFFLL)
    return invalid("M " + std::to_string(m) + " x N " + std::to_string(p.w.n) + " needs more than 2^31 - 1 CTA tiles");
  int splits = p.num_splits;
  if (splits == 0) {
    // The mma paths: among the split counts whose CTAs all run in one wave (the resident slots), the one with the
    // least work on the busiest SM, ceil(CTAs / SMs) x tiles per split (ties: more splits), keeping >=
    // kMinTilesPerSplit 64-K tiles per split and the int32 partials (4 bytes per output per split) below the weight
    // bytes. Fitted to a sweep of forced counts 1, 2, 3, 4, 6, 8, 12, 16 (session 11, H200, docs/int8_w4a8.md):
    // choosing among the swept counts it is within 1.3% (geomean) of the best over 210 (shape, M, configuration) cells,
    // worst 1.22x; the previous rule (the fewest splits filling the slots >= 90%, in any number of waves) was 1.09x,
    // worst 1.65x.
    constexpr int kMinTilesPerSplit = 10;
    DeviceInfo dev;
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    const bool group = p.w.group_size != 0;
    int occ = 1;
    switch (path) {
      case W4A8Path::kTokens8:
        QDEC_RETURN_IF_ERROR(occupancy<Cfg8>(group, &occ));
        break;
      case W4A8Path::kTokens16:
        QDEC_RETURN_IF_ERROR(occupancy<Cfg16>(group, &occ));
        break;
      case W4A8Path::kTokens32:
        QDEC_RETURN_IF_ERROR(occupancy<Cfg32>(group, &occ));
        break;
      case W4A8Path::kTokens64:
        QDEC_RETURN_IF_ERROR(occupancy<Cfg64>(group, &occ));
        break;
      case W4A8Path::kTokens128:
        QDEC_RETURN_IF_ERROR(occupancy<Cfg128>(group, &occ));
        break;
      default:
        QDEC_RETURN_IF_ERROR(w4a8::wgmma_kernel_occupancy(tokens, group, &occ));
        break;
    }
    const long long slots = (long long)dev.sm_count * std::max(occ, 1);
    const long long base = (long long)cols * rows;
    const long long w_bytes = (long long)lay.n_pad() * lay.k / 2;
    const long long acc_per_split = (long long)m * lay.n_pad() * 4;
    const long long s_max =
        std::max(1LL, std::min<long long>(lay.k_tiles() / kMinTilesPerSplit, w_bytes / acc_per_split));
    long long s = 1, best_cost = -1;
    if (is_wgmma(path)) {
      // The wgmma paths add split partials in clusters where they fit (w4a8_wgmma.h), far cheaper than through the
      // workspace: an estimate in 64-K tiles, tiles per split x (1 + kCoResident x (CTAs on the busiest SM - 1)),
      // plus kClusterTiles + kClusterTilesPerSplit x splits for a cluster reduction or kTicketTiles for a ticket
      // one, over the counts swept (1-6, 8) whose CTAs all run in one wave. Fitted to a sweep of those counts (session
      // 21, H200, docs/int8_w4a8.md: wg64 / wg128 / wg256, M = 64, 128, 256, both schemes, 7 shapes): 1.003x the
      // best swept count (geomean over 126 cells), worst 1.07x; the rule below (before clusters) 1.074x, worst 2.2x.
      constexpr double kCoResident = 0.5, kClusterTiles = 2, kClusterTilesPerSplit = 2, kTicketTiles = 32;
      double best = -1;
      for (const int c : {1, 2, 3, 4, 5, 6, 8}) {
        if (c > lay.k_tiles()) break;
        const long long per = (lay.k_tiles() + c - 1) / c, eff = (lay.k_tiles() + per - 1) / per;
        if (eff > 1 && base * eff > slots) break;
        int cluster = 1;
        if (eff > 1)
          QDEC_RETURN_IF_ERROR(
              w4a8::wgmma_split_k_cluster(tokens, group, dim3(unsigned(base), 1u, unsigned(eff)), &cluster));
        const long long busiest = (base * eff + dev.sm_count - 1) / dev.sm_count;
        double cost = double(per) * (1.0 + kCoResident * double(busiest - 1));
        if (eff > 1) cost += cluster > 1 ? kClusterTiles + kClusterTilesPerSplit * double(eff) : kTicketTiles;
        if (best < 0 || cost < best - 1e-9) {
          best = cost;
          s = eff;
        }
      }
    }
    for (long long c = 1; c <= s_max && !is_wgmma(path); ++c) {
      const long long per = (lay.k_tiles() + c - 1) / c, eff = (lay.k_tiles() + per - 1) / per;  // no empty split
      if (eff > 1 && base * eff > slots) break;
      const long long cost = (base * eff + dev.sm_count - 1) / dev.sm_count * per;
      if (best_cost < 0 || cost <= best_cost) {
        best_cost = cost;
        s = eff;
      }
    }
    splits = int(s);
  }
  splits = std::min(splits, lay.k_tiles());
  if (splits > 65535) splits = 65535;
  // Split-K state (the tile tickets) lives in the workspace's state zone (qdec/workspace.h): one split when it
  // would not fit, an error for a forced count. The per-split partial sums are scratch past the zone.
  const size_t split_state = PackedLayout::align16(size_t(cols) * rows * 4);
  if (splits > 1 && split_state > kWorkspaceStateBytes) {
    if (p.num_splits > 1)
      return invalid("num_splits " + std::to_string(p.num_splits) + " needs " + std::to_string(split_state) +
                     " bytes of split-K tickets at M " + std::to_string(m) + ", N " + std::to_string(p.w.n) +
                     ", more than the workspace's state zone of " + std::to_string(kWorkspaceStateBytes));
    splits = 1;
  }
  const int kt_per = (lay.k_tiles() + splits - 1) / splits;
  splits = (lay.k_tiles() + kt_per - 1) / kt_per;  // no empty split
  plan->path = path;
  plan->splits = splits;
  plan->kt_per_split = kt_per;
  // The wgmma kernel takes (column, token tile) from x, token tiles fastest (w4a8_wgmma.h).
  plan->grid = is_wgmma(path) ? dim3(unsigned(cols * rows), 1u, unsigned(splits))
                              : dim3(unsigned(cols), unsigned(rows), unsigned(splits));
  // [tickets (state zone)][partials: per (tile, split) CB x MT = tokens / 8 fragments of kThreads int4]
  plan->partial_bytes =
      splits > 1 ? size_t(cols) * rows * splits * (cfg_tokens(path) / 8) * size_t(w4a8::kThreads) * 16 : 0;
  plan->workspace_bytes = splits > 1 ? kWorkspaceStateBytes + plan->partial_bytes : 0;
  return Status::Ok();
}

}  // namespace

Status w4a8_gemm_workspace_bytes(const W4A8Params& p, size_t* bytes) {
  if (!bytes) return invalid("output pointer bytes is null");
  QDEC_RETURN_IF_ERROR(validate(p));
  Plan plan;
  QDEC_RETURN_IF_ERROR(make_plan(p, &plan));
  *bytes = plan.workspace_bytes;
  return Status::Ok();
}

Status w4a8_gemm_plan(const W4A8Params& p, W4A8Path* path, int* num_splits, W8A8Backend* w8a8_backend) {
  if (!path || !num_splits) return invalid("output pointer path or num_splits is null");
  QDEC_RETURN_IF_ERROR(validate(p));
  Plan plan;
  QDEC_RETURN_IF_ERROR(make_plan(p, &plan));
  *path = plan.path;
  *num_splits = plan.splits;
  W8A8Backend backend = W8A8Backend::kAuto;
  if (plan.path == W4A8Path::kDequantW8A8) QDEC_RETURN_IF_ERROR(w8a8_plan(plan.w8, &backend, num_splits));
  if (w8a8_backend) *w8a8_backend = backend;
  return Status::Ok();
}

Status w4a8_gemm(const W4A8Params& p, cudaStream_t stream) {
  QDEC_RETURN_IF_ERROR(validate(p));
  Plan plan;
  QDEC_RETURN_IF_ERROR(make_plan(p, &plan));
  const bool dequant = plan.path == W4A8Path::kDequantW8A8;
  if (plan.workspace_bytes > 0) {
    if (!p.workspace)
      return invalid("workspace is null; this call needs " + std::to_string(plan.workspace_bytes) + " bytes");
    const int align = dequant ? 256 : 16;
    if (reinterpret_cast<uintptr_t>(p.workspace) % align != 0)
      return invalid("workspace is not " + std::to_string(align) + "-byte aligned");
    if (p.workspace_bytes < plan.workspace_bytes)
      return invalid("workspace bytes " + std::to_string(p.workspace_bytes) + " are fewer than the " +
                     std::to_string(plan.workspace_bytes) + " this call needs");
  }
  const PackedLayout lay{p.w.n, p.w.k, p.w.group_size};
  if (dequant) {
    auto* ws = static_cast<uint8_t*>(p.workspace);
    auto* q = reinterpret_cast<int8_t*>(ws + plan.q_offset);
    auto* scales = reinterpret_cast<float*>(ws + plan.scale_offset);
    QDEC_RETURN_IF_ERROR(w4a8::dequantize_to_int8(lay, p.w.data, q, scales, stream));
    W8A8Params w8 = plan.w8;
    w8.w.q = q;
    w8.w.scale = scales;
    w8.workspace = p.workspace;
    w8.workspace_bytes = plan.w8_ws_bytes;
    return w8a8_gemm(w8, stream);
  }
  const bool group = p.w.group_size != 0;
  const auto* base = static_cast<const uint8_t*>(p.w.data);
  w4a8::KernelParams kp{};
  kp.codes = base;
  kp.meta = group ? base + lay.meta_offset() : nullptr;
  kp.scales = reinterpret_cast<const uint16_t*>(base + lay.scale_offset());
  kp.zeros = group ? nullptr : base + lay.zero_offset();
  kp.xq = p.x.q;
  kp.ldq = p.x.ldq ? p.x.ldq : p.x.k;
  kp.sx = p.x.scale;
  kp.row_sum = p.x.row_sum;
  kp.bias = p.bias;
  kp.y = p.y;
  kp.ldy = p.ldy ? p.ldy : p.w.n;
  kp.y_dtype = int(p.y_dtype);
  kp.m = p.x.m;
  kp.n = p.w.n;
  kp.n_blocks = lay.n_blocks();
  kp.n_pad = lay.n_pad();
  kp.k_tiles = lay.k_tiles();
  kp.group_size = p.w.group_size;
  kp.num_groups = lay.num_groups();
  kp.group_shift = p.w.group_size == 32 ? 5 : p.w.group_size == 64 ? 6 : 7;
  kp.kt_per_split = plan.kt_per_split;
  kp.evict_first = plan.grid.y == 1;
  if (plan.splits > 1) {
    kp.tickets = static_cast<unsigned*>(p.workspace);
    kp.partials = reinterpret_cast<int4*>(static_cast<uint8_t*>(p.workspace) + kWorkspaceStateBytes);
  }
  switch (plan.path) {
    case W4A8Path::kTokens8:
      return launch_cfg<Cfg8>(group, kp, plan.grid, stream);
    case W4A8Path::kTokens16:
      return launch_cfg<Cfg16>(group, kp, plan.grid, stream);
    case W4A8Path::kTokens32:
      return launch_cfg<Cfg32>(group, kp, plan.grid, stream);
    case W4A8Path::kTokens64:
      return launch_cfg<Cfg64>(group, kp, plan.grid, stream);
    case W4A8Path::kTokens128:
      return launch_cfg<Cfg128>(group, kp, plan.grid, stream);
    default:
      return w4a8::wgmma_kernel_launch(cfg_tokens(plan.path), group, kp, plan.grid, stream);
  }
}

}  // namespace qdec
