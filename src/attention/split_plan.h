// Split-K planning of decode attention (defined in decode_launcher.cu); host only, declared here for the tests.
#pragma once

namespace qdec::attention {

// Split count for `ctas` (sequence, KV head) pairs of up to max_len tokens on `sms` SMs, planning for at most `cap`
// resident CTAs per SM, each walking its split in stages of `stage` tokens (16 per warp): the cheapest by an
// estimate of the busiest SM's work (docs/attention.md, v21). linear_partial: an SM running r < cap CTAs streams at
// r / cap of a full one (8-bit caches at head_dim 64, s15c) instead of the fitted 0.7 .. 0.97.
int choose_splits(int ctas, int sms, int cap, int max_len, int stage, bool linear_partial = false);

}  // namespace qdec::attention
