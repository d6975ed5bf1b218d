// Host side of qdec::gemm: validation (everything checked before anything is launched), path choice, split-K
// planning for the fused kernel, kernel lookup in the closed dispatch list, and the launches. docs/gemm.md.
#include <algorithm>
#include <string>
#include <utility>

#include "gemm/cublaslt.h"
#include "gemm/dequant_kernel.cuh"
#include "gemm/fused_kernel.cuh"
#include "gemm/wgmma_a16.h"
#include "qdec/gemm.h"
#include "runtime/cuda_check.h"

namespace qdec {

const char* gemm_dtype_name(GemmDType d) {
  return d == GemmDType::kBF16 ? "bf16" : d == GemmDType::kFP16 ? "fp16" : "fp32";
}
const char* activation_name(Activation a) {
  return a == Activation::kNone ? "none" : a == Activation::kReLU ? "relu" : "relu6";
}
const char* gemm_path_name(GemmPath p) {
  return p == GemmPath::kAuto            ? "auto"
         : p == GemmPath::kFused         ? "fused"
         : p == GemmPath::kDequantCublas ? "dequant+cublaslt"
                                         : "wgmma";
}
const char* gemm_x_staging_name(GemmXStaging s) {
  return s == GemmXStaging::kAuto ? "auto" : s == GemmXStaging::kSlice ? "slice" : "ring";
}

namespace {

using wq::FusedKernelInfo;

Status invalid(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}

size_t round256(size_t b) {
  return (b + 255) / 256 * 256;
}

struct Plan {
  GemmPath path = GemmPath::kFused;
  const FusedKernelInfo* kernel = nullptr;
  int mt = 1;
  int n_blocks = 0;
  int num_splits = 1;
  int parts = 1;
  int kc = 0;
  int n_seg = 1;
  int smem = 0;
  bool x_vec = false;   // X rows take 16-byte loads
  bool x_ring = false;  // fused: X through the ring of 2 slots (3 with the deep ring; GemmXStaging::kRing)
  int ring_blocks = 1;  // fused: blocks of 4 weight tiles in flight per warp (wq::kDeepRingBlocks: the deep ring)
  long long ldx = 0, ldy = 0;
  size_t ticket_bytes = 0, partial_bytes = 0;  // fused
  size_t scratch_bytes = 0;                    // dequant + cuBLASLt
  wq::A16Plan a16;                             // wgmma
  size_t workspace_bytes = 0;
};

// Rows per dequantize + cuBLASLt chunk: all of N at large M (X is then re-read per chunk, which costs more
// than the scratch round trip saves), else chunks of <= 24 MiB of scratch (multiples of 256 rows).
constexpr int kChunkMaxM = 2048;
constexpr size_t kChunkBytes = size_t(24) << 20;
int dequant_chunk_rows(int m, const WeightLayout& L) {
  if (m >= kChunkMaxM) return L.n;
  const size_t row_bytes = size_t(L.k) * 2;
  const int rows = std::max<int>(256, int(kChunkBytes / row_bytes) / 256 * 256);
  return std::min(rows, L.n);
}

const FusedKernelInfo* find_kernel(int bits, bool bf16, int mt, int ring_blocks) {
  for (auto list : {wq::fused_kernels_w4(), wq::fused_kernels_w8()}) {
    for (const auto& e : list) {
      if (e.bits == bits && e.bf16 == bf16 && e.mt == mt && e.ring_blocks == ring_blocks) return &e;
    }
  }
  return nullptr;
}

// The fused kernel's launch shape: K parts per CTA (1, 2, 4, 8), K slices (split-K) and at M <= 16 how X is
// staged (the whole slice or the ring), the candidate with the least estimated time in µs. At M <= 16 (MT 1, 2):
//   waves x (max(stream, per_warp) + kFixedUs) + ceil(CTAs / SMs) x kCtaUs + X staging
//   + (splits > 1 ? kSplitUs : 0)
// stream = the busiest SM's weight bytes of a wave (ceil(CTAs of the wave / SMs) CTAs) at its share of
// kStreamBytesPerUs (v13: the CTAs do not spread evenly over the SMs, and the SMs with one CTA more finish
// last); per_warp = tiles per warp x kTileUs (x kTileMt2 at 16 tokens): one warp's 4-deep ring at the loaded
// latency, so that few warps cannot stream the chip's bandwidth; kCtaUs the per-CTA prologue and epilogue an
// SM serializes; X staging = kXStageUsPerMB x CTAs x slice x staged rows x 2 bytes for the slice; for the ring
// (its copies overlap the stream) kRingUs (its per-block barriers, measured at M = 1) + kRingUsPerPart per K part
// past the first + kRingUsPerMB x the X bytes it copies (CTAs x slice x staged rows x 2: with K parts a CTA covers
// fewer rows, so its X costs more per weight byte); kSplitUs the split-K epilogue. Until session 34 it also grew
// with its atomics (2.94 µs per MB of M x n_pad x splits x 4 bytes); session 33 made the epilogue cheaper (one
// acquire-release ticket, the last CTA's sums loaded at once), and session 34 refitted the split terms to that
// session's grids of forced split counts on both cards (docs/results/gemm_split_grid_s33.txt, replayed by
// bench/gemm_plan_replay.py): kSplitUs 2.75 and no per-MB term (was 2.56), chosen over best 1.008 on
// either card instead of 1.024 (H100) / 1.038 (H200); docs/gemm.md, "Session 34". The constants were fitted in v12 to a
// grid of 36 forced (parts, splits) launches x 7 shapes x M = 1, 4, 16 x int4-g128 / int8 on the H200
// (docs/gemm.md); v13 added the busiest-SM stream and kRingUs, checked against a grid of forced splits x
// (slice, ring) x the 7 shapes x M = 1, 4, 8, 16 (docs/results/gemm_v13_grid_h200.txt): geometric mean of the
// chosen plan's time over the best measured one 1.015, 8% off at worst. Session 27 let the ring take K parts and
// fitted its three terms (kRingUs was 1.2 and alone) to grids of forced (staging, parts, splits) x the 7 shapes x
// M = 1, 4, 8, 16 x int4-g128 / int8, two per card (docs/results/gemm_ring_parts_grid_s27_{h100,h200}.txt): chosen
// over best 1.009 on the H100 and 1.010 on the H200 (the session-26 planner: 1.037 / 1.025); the same constants fit
// best on the two cards' first grids alone and on their second grids alone. At M >= 17
// (MT 4, 8; not in the grids) the v10 estimate stands: one part, waves x (tiles per warp + 4). Forced counts
// (GemmParams::num_splits / num_parts / x_staging) are taken as given, the others chosen.
constexpr double kStreamBytesPerUs = 3.6e6;
constexpr double kTileUs = 0.28;
constexpr double kTileMt2 = 0.89;
constexpr double kFixedUs = 1.46;
constexpr double kCtaUs = 1.0;
constexpr double kXStageUsPerMB = 0.41;
constexpr double kRingUs = 0.3;
constexpr double kRingUsPerPart = 0.1;
constexpr double kRingUsPerMB = 0.3;
constexpr double kSplitUs = 2.75;
constexpr double kV10FixedTiles = 4.0;
// The deep ring (int8 at M <= 8: 8 weight tiles in flight per warp instead of 4) where every warp streams at least
// this many tiles and its shared memory keeps the plan's CTAs per SM. Measured on the H200 (session 35, docs/gemm.md,
// three rounds against 4 tiles): 0.95-0.98x the time with 26-128 tiles per warp (28672x4096, 4096x14336, 8192x8192,
// 6144x4096 at M = 1-8), 1.00x at 16, 1.04x at 10 (1280x8192 at 26 splits). int4 took 1.03-1.04x with any slice
// (its warps wait on their instructions, not on memory), so it keeps 4.
constexpr int kDeepRingMinTiles = 24;

Status plan_fused(const GemmParams& p, const WeightLayout& L, int sm_count, int max_smem_per_block, Plan* plan) {
  const int chunk = weight_chunk_k(L.format.kind);
  const int gs = L.format.group_size;
  const bool per_channel = gs == 0 || gs >= L.k_pad();
  const int align = std::max(chunk, per_channel ? chunk : gs);
  const int tpg = per_channel || gs < chunk ? 1 : gs / chunk;  // tiles per group (a part is whole groups)
  const int units = (L.k_pad() + align - 1) / align;           // align-sized pieces of K
  const int row_blocks = L.n_pad() / 16;
  const int cap = wq::fused_min_blocks(plan->mt);
  const int smem_limit = std::min(max_smem_per_block, wq::kSmemPerSm - wq::kSmemReservedPerCta);
  const double weight_bytes = double(L.code_bytes() + L.meta_bytes());
  const bool fitted = plan->mt <= 2;  // the fitted estimate at M <= 16, the v10 one above
  // Split-K state (tickets for up to row_blocks CTA columns, fp32 partials) must fit the workspace's state zone
  // (qdec/workspace.h): otherwise one split only, or an error for a forced count.
  const size_t split_state = round256(size_t(row_blocks) * 4) + round256(size_t(L.n_pad()) * plan->mt * 8 * 4);
  const bool split_fits = split_state <= kWorkspaceStateBytes;
  if (!split_fits && p.num_splits > 1)
    return Status(StatusCode::kInvalidArgument,
                  "num_splits " + std::to_string(p.num_splits) + " needs " + std::to_string(split_state) +
                      " bytes of split-K state at N " + std::to_string(L.n) + ", M " + std::to_string(p.m) +
                      ", more than the workspace's state zone of " + std::to_string(kWorkspaceStateBytes));
  // Each split adds M * n_pad * 4 bytes of atomics: keep them within half of the weight bytes.
  const int max_auto_splits =
      std::max(1, std::min(units, int(0.5 * double(L.code_bytes()) / (double(p.m) * L.n_pad() * 4.0))));

  struct Candidate {
    bool ok = false;
    bool ring = false;
    int parts = 1, splits = 1, kc = 0, n_seg = 1, smem = 0, n_blocks = 0, part_tiles = 0;
    double cost = 0.0;
  };
  // Segments of a slice: groups, or per channel one per part (an upper bound for the last, shorter slice too).
  auto segs = [&](int kc, int parts) { return per_channel ? parts : (kc + gs - 1) / gs; };
  // X staging of a candidate: at M <= 16 with 16-byte X rows both the slice and the ring (whose shared memory does
  // not grow with the slice) are candidates, unless one is asked for; the ring with several parts only where every
  // part of every slice holds the same tile count (session 27; before, the ring took one part only).
  const bool ring_ok = wq::fused_ring_supported(plan->mt) && plan->x_vec && p.x_staging != GemmXStaging::kSlice;
  const bool slice_ok = p.x_staging != GemmXStaging::kRing;
  const int ring_slot_k = wq::fused_ring_k(plan->mt, chunk);
  // Ring blocks the candidates' shared memory is sized for: the deep ring's when it is asked for (so that the slice
  // fits with it); the automatic choice adds it to the chosen plan below where it fits.
  const int cand_ring_blocks = p.weight_ring == 8 ? wq::kDeepRingBlocks : 1;
  // Candidate with P parts and K slices of kc (a multiple of align that fits shared memory).
  auto evaluate = [&](int parts, int kc, bool ring) {
    Candidate c;
    c.parts = parts;
    c.ring = ring;
    const int cta_rows = wq::kBlockN / parts;
    c.kc = kc;
    c.splits = (L.k_pad() + kc - 1) / kc;
    c.n_seg = segs(kc, parts);
    c.smem = wq::fused_smem_bytes(plan->mt, p.m, kc, c.n_seg, cta_rows, ring ? ring_slot_k : 0, cand_ring_blocks);
    c.n_blocks = (row_blocks + wq::kWarps / parts - 1) / (wq::kWarps / parts);
    const int resident = std::min(cap, wq::kSmemPerSm / (c.smem + wq::kSmemReservedPerCta));
    const long long ctas = 1LL * c.n_blocks * c.splits;
    const long long waves = (ctas + 1LL * resident * sm_count - 1) / (1LL * resident * sm_count);
    const int slice_tiles = kc / chunk;
    const int slice_groups = (slice_tiles + tpg - 1) / tpg;
    if (p.num_parts == 0 && slice_groups < parts) return c;  // some warps would have nothing to stream
    // The ring with parts: every part of every slice (the last, shorter one too) the same tile count.
    const int last_tiles = (L.k_pad() - (c.splits - 1) * kc) / chunk;
    if (ring &&
        !(wq::fused_ring_parts_even(slice_tiles, tpg, parts) && wq::fused_ring_parts_even(last_tiles, tpg, parts)))
      return c;
    const int part_tiles = (slice_groups + parts - 1) / parts * tpg;
    c.part_tiles = part_tiles;
    if (fitted) {
      const double per_warp = part_tiles * kTileUs * (plan->mt == 2 ? kTileMt2 : 1.0);
      const long long busiest = (ctas + waves * sm_count - 1) / (waves * sm_count);  // CTAs of a wave on one SM
      const double stream = double(busiest) * (weight_bytes / double(ctas)) / (kStreamBytesPerUs / sm_count);
      const double x_mb = double(ctas) * kc * wq::fused_x_rows(plan->mt, p.m) * 2.0 / 1e6;
      c.cost = double(waves) * (std::max(stream, per_warp) + kFixedUs) +
               double((ctas + sm_count - 1) / sm_count) * kCtaUs +
               (ring ? kRingUs + kRingUsPerPart * (parts - 1) + kRingUsPerMB * x_mb : kXStageUsPerMB * x_mb) +
               (c.splits > 1 ? kSplitUs : 0.0);
    } else {
      c.cost = double(waves) * (double(part_tiles) + kV10FixedTiles);
    }
    c.ok = true;
    return c;
  };

  Candidate best;
  for (int parts : {1, 2, 4, 8}) {
    if (p.num_parts > 0 && parts != p.num_parts) continue;
    if (parts > 1 && !wq::fused_parts_supported(plan->mt)) continue;
    if (parts > 1 && !fitted && p.num_parts == 0) continue;  // not measured at MT >= 4: one part
    for (bool ring : {false, true}) {
      if (ring ? !ring_ok : !slice_ok) continue;
      // The widest slice (a multiple of align) whose shared memory fits one CTA per SM.
      const int cta_rows = wq::kBlockN / parts;
      int kc_max = 0;
      for (int kc = align; kc < L.k_pad() + align; kc += align) {
        if (wq::fused_smem_bytes(plan->mt, p.m, kc, segs(kc, parts), cta_rows, ring ? ring_slot_k : 0,
                                 cand_ring_blocks) > smem_limit)
          break;
        kc_max = kc;
      }
      if (kc_max == 0) continue;
      const int s_lo = p.num_splits > 0 ? p.num_splits : 1;
      const int s_hi = p.num_splits > 0 ? p.num_splits : split_fits ? max_auto_splits : 1;
      int last_kc = -1;
      for (int s = s_lo; s <= s_hi; ++s) {
        const int kc = std::min(kc_max, std::min(units, (units + s - 1) / s) * align);
        if (kc == last_kc) continue;  // the same slice as a smaller split count
        last_kc = kc;
        const Candidate c = evaluate(parts, kc, ring);
        if (!c.ok) continue;
        if (!best.ok || c.cost < best.cost - 1e-9) best = c;
      }
    }
  }
  if (!best.ok && p.x_staging == GemmXStaging::kRing && p.num_parts > 1)
    return invalid("x_staging ring with num_parts " + std::to_string(p.num_parts) +
                   " needs every K part of a slice to hold the same number of " + std::to_string(chunk) +
                   "-value tiles in whole groups: K " + std::to_string(L.k) + " (" + L.format.name() + ", num_splits " +
                   std::to_string(p.num_splits) + ") does not split so");
  if (!best.ok)
    return Status(StatusCode::kUnsupported, "fused kernel: no K slice of " + L.format.name() + " at M " +
                                                std::to_string(p.m) + " fits the device's " +
                                                std::to_string(smem_limit) + " bytes of shared memory per block");
  // The deep ring: asked for (the candidates were sized for it), or where every warp streams enough tiles and its
  // CTAs still fit the SM as the plan's do.
  plan->ring_blocks = cand_ring_blocks;
  const bool deep_ok = wq::fused_deep_ring_supported(weight_bits(L.format.kind), plan->mt);
  if (p.weight_ring == 0 && deep_ok && best.part_tiles >= kDeepRingMinTiles) {
    const int deep_smem = wq::fused_smem_bytes(plan->mt, p.m, best.kc, best.n_seg, wq::kBlockN / best.parts,
                                               best.ring ? ring_slot_k : 0, wq::kDeepRingBlocks);
    const auto resident = [&](int smem) { return std::min(cap, wq::kSmemPerSm / (smem + wq::kSmemReservedPerCta)); };
    const long long ctas = 1LL * best.n_blocks * best.splits;
    const long long needed = std::min<long long>(resident(best.smem), (ctas + sm_count - 1) / sm_count);
    if (deep_smem <= smem_limit && resident(deep_smem) >= needed) {
      plan->ring_blocks = wq::kDeepRingBlocks;
      best.smem = deep_smem;
    }
  }
  plan->parts = best.parts;
  plan->x_ring = best.ring;
  plan->kc = best.kc;
  plan->num_splits = best.splits;
  plan->n_seg = best.n_seg;
  plan->smem = best.smem;
  plan->n_blocks = best.n_blocks;
  return Status::Ok();
}

Status validate_and_plan(const GemmParams& p, Plan* plan) {
  const WeightLayout& L = p.w.layout;
  QDEC_RETURN_IF_ERROR(validate_weight_format(L.format));
  if (p.m < 1) return invalid("M " + std::to_string(p.m) + " must be >= 1");
  if (L.n < 1) return invalid("N " + std::to_string(L.n) + " must be >= 1");
  if (L.k < 1) return invalid("K " + std::to_string(L.k) + " must be >= 1");
  if (L.k > (1 << 24)) return invalid("K " + std::to_string(L.k) + " exceeds 16777216");
  if (L.n > (1 << 24)) return invalid("N " + std::to_string(L.n) + " exceeds 16777216");
  if (p.x_dtype != GemmDType::kBF16 && p.x_dtype != GemmDType::kFP16)
    return invalid(std::string("x_dtype ") + gemm_dtype_name(p.x_dtype) + " is not supported (bf16, fp16)");
  if (p.y_dtype != GemmDType::kBF16 && p.y_dtype != GemmDType::kFP16 && p.y_dtype != GemmDType::kFP32)
    return invalid("y_dtype " + std::to_string(int(p.y_dtype)) + " is not a GemmDType");
  if (p.act != Activation::kNone && p.act != Activation::kReLU && p.act != Activation::kReLU6)
    return invalid("act " + std::to_string(int(p.act)) + " is not an Activation");
  plan->ldx = p.ldx == 0 ? L.k : p.ldx;
  plan->ldy = p.ldy == 0 ? L.n : p.ldy;
  if (plan->ldx < L.k) return invalid("ldx " + std::to_string(plan->ldx) + " is smaller than K " + std::to_string(L.k));
  if (plan->ldy < L.n) return invalid("ldy " + std::to_string(plan->ldy) + " is smaller than N " + std::to_string(L.n));
  if (!p.x) return invalid("x is null");
  if (!p.y) return invalid("y is null");
  if (!p.w.codes) return invalid("w.codes is null");
  if (!p.w.meta) return invalid("w.meta is null");
  if (reinterpret_cast<uintptr_t>(p.w.codes) % 16 != 0) return invalid("w.codes is not 16-byte aligned");
  if (reinterpret_cast<uintptr_t>(p.w.meta) % 4 != 0) return invalid("w.meta is not 4-byte aligned");
  if (reinterpret_cast<uintptr_t>(p.x) % 2 != 0) return invalid("x is not 2-byte aligned");
  if (reinterpret_cast<uintptr_t>(p.y) % (p.y_dtype == GemmDType::kFP32 ? 4 : 2) != 0)
    return invalid("y is not aligned to its element size");
  if (p.bias && reinterpret_cast<uintptr_t>(p.bias) % 4 != 0) return invalid("bias is not 4-byte aligned");
  if (p.num_splits < 0 || p.num_splits > 4096)
    return invalid("num_splits " + std::to_string(p.num_splits) + " must be in 0..4096 (0 = automatic)");
  if (p.num_parts != 0 && p.num_parts != 1 && p.num_parts != 2 && p.num_parts != 4 && p.num_parts != 8)
    return invalid("num_parts " + std::to_string(p.num_parts) + " must be 0 (automatic), 1, 2, 4 or 8");
  if (p.x_staging != GemmXStaging::kAuto && p.x_staging != GemmXStaging::kSlice && p.x_staging != GemmXStaging::kRing)
    return invalid("x_staging " + std::to_string(int(p.x_staging)) + " is not a GemmXStaging");
  if (p.weight_ring != 0 && p.weight_ring != 4 && p.weight_ring != 8)
    return invalid("weight_ring " + std::to_string(p.weight_ring) + " must be 0 (automatic), 4 or 8");
  plan->x_vec = L.k % 8 == 0 && plan->ldx % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;

  if (p.tile_m != 0 && p.tile_m != 64 && p.tile_m != 128 && p.tile_m != 256)
    return invalid("tile_m " + std::to_string(p.tile_m) + " must be 0 (automatic), 64, 128 or 256");
  GemmPath path = p.path;
  if (path != GemmPath::kAuto && path != GemmPath::kFused && path != GemmPath::kDequantCublas &&
      path != GemmPath::kWgmma)
    return invalid("path " + std::to_string(int(p.path)) + " is not a GemmPath");
  // The wgmma path's conditions, each with the reason it fails (empty: it runs).
  auto wgmma_blocker = [&]() -> Status {
    QDEC_RETURN_IF_ERROR(wq::a16_supported());
    if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0) return invalid("path wgmma: x is not 16-byte aligned");
    if (plan->ldx % 8 != 0)
      return invalid("path wgmma: ldx " + std::to_string(plan->ldx) + " is not a multiple of 8 (16-byte rows)");
    if (reinterpret_cast<uintptr_t>(p.w.meta) % 16 != 0) return invalid("path wgmma: w.meta is not 16-byte aligned");
    return Status::Ok();
  };
  if (path == GemmPath::kAuto) {
    // kAuto's wgmma rule (qdec/gemm.h) with the device's SM count, where the path runs; else the fused kernel up to
    // kAutoFusedMaxM and the dequantize path above.
    auto wgmma_wins = [&] {
      if (p.m < kAutoWgmmaMinM || p.m > kAutoWgmmaMaxM) return false;  // outside the rule's M: no device query
      DeviceInfo dev;
      const int sms = current_device_info(&dev).ok() ? dev.sm_count : 0;
      return wgmma_auto_wins(p.m, L.n, L.k, sms) && wgmma_blocker().ok();
    };
    path = wgmma_wins() ? GemmPath::kWgmma : p.m <= kAutoFusedMaxM ? GemmPath::kFused : GemmPath::kDequantCublas;
  } else if (path == GemmPath::kWgmma) {
    QDEC_RETURN_IF_ERROR(wgmma_blocker());
  }
  plan->path = path;
  if (p.tile_m != 0 && path != GemmPath::kWgmma)
    return invalid("tile_m " + std::to_string(p.tile_m) + " applies to the wgmma path only (path " +
                   gemm_path_name(path) + ")");
  if (path == GemmPath::kFused) {
    if (p.m > kFusedMaxM)
      return invalid("M " + std::to_string(p.m) + " exceeds the fused path's limit " + std::to_string(kFusedMaxM) +
                     " (use GemmPath::kAuto or kDequantCublas)");
    plan->mt = p.m <= 8 ? 1 : p.m <= 16 ? 2 : p.m <= 32 ? 4 : 8;
    const int bits = weight_bits(L.format.kind);
    if (p.weight_ring == 8 && !wq::fused_deep_ring_supported(bits, plan->mt))
      return invalid("weight_ring 8 needs int8 weights and M <= 8 (" + L.format.name() + ", M " + std::to_string(p.m) +
                     ")");
    if (!find_kernel(bits, p.x_dtype == GemmDType::kBF16, plan->mt, 1))
      return Status(StatusCode::kUnsupported, "fused kernel for " + L.format.name() + " x " +
                                                  gemm_dtype_name(p.x_dtype) + " M " + std::to_string(p.m) +
                                                  " is not compiled");
    if (p.num_parts > 1 && !wq::fused_parts_supported(plan->mt))
      return invalid("num_parts " + std::to_string(p.num_parts) + " is not supported at M " + std::to_string(p.m) +
                     " (K parts per CTA need M <= 32)");
    if (p.x_staging == GemmXStaging::kRing) {
      if (!wq::fused_ring_supported(plan->mt))
        return invalid("x_staging ring is not supported at M " + std::to_string(p.m) + " (needs M <= 16)");
      if (!plan->x_vec)
        return invalid("x_staging ring needs 16-byte X rows: K " + std::to_string(L.k) + " and ldx " +
                       std::to_string(plan->ldx) + " multiples of 8 and X 16-byte aligned");
    }
    if (L.n_pad() / 16 > 2147483647 / 2) return invalid("N " + std::to_string(L.n) + " is too large");
    DeviceInfo dev;
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    QDEC_RETURN_IF_ERROR(plan_fused(p, L, dev.sm_count, dev.max_smem_per_block_optin, plan));
    plan->kernel = find_kernel(bits, p.x_dtype == GemmDType::kBF16, plan->mt, plan->ring_blocks);
    if (!plan->kernel)
      return Status(StatusCode::kUnsupported, "fused kernel for " + L.format.name() + " x " +
                                                  gemm_dtype_name(p.x_dtype) + " M " + std::to_string(p.m) +
                                                  " with a ring of " + std::to_string(4 * plan->ring_blocks) +
                                                  " tiles is not compiled");
    if (plan->num_splits > 65535)
      return invalid("K " + std::to_string(L.k) + " needs " + std::to_string(plan->num_splits) +
                     " splits, over the grid limit 65535");
    if (plan->num_splits > 1) {
      plan->ticket_bytes = round256(size_t(plan->n_blocks) * 4);
      plan->partial_bytes = round256(size_t(L.n_pad()) * plan->mt * 8 * 4);
    }
    plan->workspace_bytes = plan->ticket_bytes + plan->partial_bytes;
  } else if (path == GemmPath::kWgmma) {
    DeviceInfo dev;
    QDEC_RETURN_IF_ERROR(current_device_info(&dev));
    QDEC_RETURN_IF_ERROR(wq::a16_plan(p.m, L, p.tile_m, p.num_splits, dev.sm_count, &plan->a16));
    plan->num_splits = plan->a16.splits;
    plan->workspace_bytes = plan->a16.ticket_bytes + plan->a16.partial_bytes;
  } else {
    // Scratch after the split-K state zone (qdec/workspace.h): [zone][16-bit weight chunk][cuBLASLt workspace].
    plan->scratch_bytes = round256(size_t(dequant_chunk_rows(p.m, L)) * L.k * 2);
    plan->workspace_bytes = kWorkspaceStateBytes + plan->scratch_bytes + wq::kCublasWorkspaceBytes;
  }
  return Status::Ok();
}

}  // namespace

Status gemm_workspace_bytes(const GemmParams& p, size_t* bytes) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  *bytes = plan.workspace_bytes;
  return Status::Ok();
}

Status gemm_plan(const GemmParams& p, GemmPath* path, int* num_splits, int* num_parts, GemmXStaging* x_staging,
                 int* weight_ring, int* tile_m) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  if (path) *path = plan.path;
  if (num_splits) *num_splits = plan.num_splits;
  if (num_parts) *num_parts = plan.parts;
  if (x_staging)
    *x_staging = plan.path != GemmPath::kFused ? GemmXStaging::kAuto
                 : plan.x_ring                 ? GemmXStaging::kRing
                                               : GemmXStaging::kSlice;
  if (weight_ring) *weight_ring = plan.path != GemmPath::kFused ? 0 : wq::fused_depth(plan.mt) * plan.ring_blocks;
  if (tile_m) *tile_m = plan.path == GemmPath::kWgmma ? plan.a16.tile_m : 0;
  return Status::Ok();
}

Status gemm(const GemmParams& p, cudaStream_t stream) {
  Plan plan;
  QDEC_RETURN_IF_ERROR(validate_and_plan(p, &plan));
  if (plan.workspace_bytes > 0) {
    if (!p.workspace)
      return Status(StatusCode::kOutOfMemory,
                    "workspace is null; the call needs " + std::to_string(plan.workspace_bytes) + " bytes");
    if (p.workspace_bytes < plan.workspace_bytes)
      return Status(StatusCode::kOutOfMemory, "workspace_bytes " + std::to_string(p.workspace_bytes) +
                                                  " is smaller than the " + std::to_string(plan.workspace_bytes) +
                                                  " bytes the call needs");
    if (reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0) return invalid("workspace is not 256-byte aligned");
  }
  const WeightLayout& L = p.w.layout;
  const bool zp = L.format.kind == WeightKind::kINT4ZeroPoint;
  if (plan.path == GemmPath::kFused) {
    wq::FusedParams fp{};
    fp.codes = static_cast<const uint8_t*>(p.w.codes);
    fp.meta = static_cast<const uint8_t*>(p.w.meta);
    fp.x = p.x;
    fp.y = p.y;
    fp.bias = p.bias;
    fp.tickets = plan.num_splits > 1 ? static_cast<unsigned*>(p.workspace) : nullptr;
    fp.partial = plan.num_splits > 1 ? reinterpret_cast<float*>(static_cast<uint8_t*>(p.workspace) + plan.ticket_bytes)
                                     : nullptr;
    fp.ldx = plan.ldx;
    fp.ldy = plan.ldy;
    fp.m = p.m;
    fp.n = L.n;
    fp.k = L.k;
    fp.n_pad = L.n_pad();
    fp.k_pad = L.k_pad();
    fp.group_k = L.format.group_size == 0 ? (1 << 30) : L.format.group_size;
    fp.num_groups = L.num_groups();
    fp.kc = plan.kc;
    fp.num_splits = plan.num_splits;
    fp.parts = plan.parts;
    fp.act = static_cast<int>(p.act);
    fp.y_dtype = static_cast<int>(p.y_dtype);
    fp.zero_point = zp ? 1 : 0;
    fp.x_vec = plan.x_vec ? 1 : 0;
    fp.x_ring = plan.x_ring ? 1 : 0;
    fp.pdl = p.pdl ? 1 : 0;
    QDEC_RETURN_IF_ERROR(raise_dynamic_smem(plan.kernel->func, plan.smem));
    void* args[] = {&fp};
    const LaunchConfig cfg(dim3(plan.n_blocks, plan.num_splits), dim3(wq::kThreads), plan.smem, stream, p.pdl);
    QDEC_CUDA_RETURN(cudaLaunchKernelExC(cfg.get(), plan.kernel->func, args));
    return Status::Ok();
  }
  if (plan.path == GemmPath::kWgmma) {
    wq::A16Args a;
    a.codes = static_cast<const uint8_t*>(p.w.codes);
    a.meta = static_cast<const uint8_t*>(p.w.meta);
    a.x = p.x;
    a.ldx = plan.ldx;
    a.bf16 = p.x_dtype == GemmDType::kBF16;
    a.y = p.y;
    a.ldy = plan.ldy;
    a.y_dtype = static_cast<int>(p.y_dtype);
    a.bias = p.bias;
    a.act = static_cast<int>(p.act);
    a.m = p.m;
    a.zero_point = zp;
    a.workspace = p.workspace;
    return wq::a16_launch(a, L, plan.a16, stream);
  }
  // Large M: dequantize to a 16-bit scratch in X's dtype, cuBLASLt, then bias / clamp if asked. Below
  // kChunkMaxM the weight goes in row chunks of <= kChunkBytes, so that each chunk's scratch is still in L2
  // when cuBLASLt reads it (each chunk re-reads X, which is small at such M).
  uint8_t* const scratch = static_cast<uint8_t*>(p.workspace) + kWorkspaceStateBytes;
  const int chunk_rows = dequant_chunk_rows(p.m, L);
  wq::DequantParams dp{};
  dp.codes = static_cast<const uint8_t*>(p.w.codes);
  dp.meta = static_cast<const uint8_t*>(p.w.meta);
  dp.out = scratch;
  dp.n = L.n;
  dp.k = L.k;
  dp.n_pad = L.n_pad();
  dp.k_pad = L.k_pad();
  dp.bits = weight_bits(L.format.kind);
  dp.group_k = L.group_k();
  dp.zero_point = zp ? 1 : 0;
  dp.out_bf16 = p.x_dtype == GemmDType::kBF16 ? 1 : 0;
  const size_t y_elem = p.y_dtype == GemmDType::kFP32 ? 4 : 2;
  for (int n0 = 0; n0 < L.n; n0 += chunk_rows) {
    const int nc = std::min(chunk_rows, L.n - n0);
    dp.row_begin = n0;
    dp.row_end = n0 + nc;
    QDEC_RETURN_IF_ERROR(wq::launch_dequant(dp, stream));
    QDEC_RETURN_IF_ERROR(wq::cublaslt_gemm(p.x_dtype == GemmDType::kBF16, static_cast<int>(p.y_dtype), p.m, nc, L.k,
                                           p.x, plan.ldx, scratch, static_cast<uint8_t*>(p.y) + size_t(n0) * y_elem,
                                           plan.ldy, scratch + plan.scratch_bytes, wq::kCublasWorkspaceBytes, stream));
  }
  if (p.bias || p.act != Activation::kNone) {
    QDEC_RETURN_IF_ERROR(wq::launch_bias_act(p.y, plan.ldy, p.m, L.n, static_cast<int>(p.y_dtype), p.bias,
                                             static_cast<int>(p.act), stream));
  }
  return Status::Ok();
}

}  // namespace qdec
