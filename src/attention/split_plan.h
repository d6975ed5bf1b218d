// Split-K planning of decode attention (defined in decode_launcher.cu); host only, declared here for the tests.
#pragma once

namespace qdec::attention {

// Split count for `ctas` (sequence, KV head) pairs of up to max_len tokens on `sms` SMs, planning for at most `cap`
// resident CTAs per SM, each walking its split in stages of `stage` tokens (16 per warp): the cheapest by an
// estimate of the busiest SM's work (docs/attention.md, v21). linear_partial: an SM running r < cap CTAs streams at
// r / cap of a full one (8-bit caches at head_dim 64, s15c) instead of the fitted 0.7 .. 0.97.
int choose_splits(int ctas, int sms, int cap, int max_len, int stage, bool linear_partial = false);

// The `cap` above for the 8-warp kernels of int4 caches at head_dim 128 (instruction-bound: one CTA streams at most
// ~25 GB/s of cache): 2 CTAs per SM where 90% of an SM's share of the theoretical DRAM bandwidth exceeds that (an
// H200: 4814 GB/s on 132 SMs), 1 where it does not (an H100 SXM: 3352 GB/s), 2 where the bandwidth is unknown (0).
int int4_split_ctas_per_sm(double dram_gbps, int sms);

// Long sequences of int4-V caches where the 8-warp split plan runs two CTAs per SM: the split count for one 16-warp
// CTA per SM instead (floor(sms / ctas), with >= 3/4 of the SMs busy and >= kWideSplitTokens tokens of the longest
// sequence per split), or 0 where the 8-warp plan stays (docs/attention.md, "Session 36").
inline constexpr int kWideSplitTokens = 8192;
int wide_split_count(int ctas, int sms, int max_len);

// Dynamic shared memory (a multiple of 128 bytes) with which one CTA fits an SM of `smem_per_sm` bytes that reserves
// `reserved` bytes per resident CTA, and two do not: what a programmatic dependent launch of a grid of at most one CTA
// per SM asks for (decode_launcher.cu, spread_smem_bytes).
int one_cta_per_sm_smem(int smem_per_sm, int reserved);

// Whether a call asking for a programmatic dependent launch (programmatic_tail_tokens > 0) gets one: not for a split
// grid (num_splits > 1) of `ctas` CTAs that is one wave of several CTAs per SM (sms < ctas <= occ * sms), which then
// launches in stream order; measured on the H200 (docs/kvcache.md, "Session 38").
bool programmatic_launch_pays(int num_splits, long long ctas, int sms, int occ);

}  // namespace qdec::attention
