// Phase timeline of the decode-attention kernels and their split merge, for timing studies (sessions 37-38): a build
// with -DQDEC_DECODE_TIMELINE=ON has thread 0 of every CTA record, per call, the slots below into a device table of
// its translation unit, which decode_timeline() resets or copies out. `bench_attention --timeline` prints their
// distributions over the CTAs of a call (docs/attention.md, "Session 38"). In other builds the kernels record nothing
// (the stamps compile to nothing: the same SASS) and decode_timeline() returns kUnsupported.
#pragma once

#include <vector>

#include "qdec/status.h"

namespace qdec::attention {

// Slots per CTA, %globaltimer (ns; it advances in steps of 256 ns on the H200) unless noted. Attention CTAs: entry;
// the SM id; the end of the set-up (Q staged, its fragments built, the first stages requested: the main loop starts);
// warp 0's first stage landed; every warp's loop done (after the barrier that follows it); exit (thread 0's stores
// issued); the warps' O rows, m and l staged for the combine (after its barrier); thread 0's prologue copies issued
// (they need the sequence length); thread 0's Q vector in registers. Merge CTAs: entry, the SM id, after
// griddepcontrol.wait (the attention grid complete), exit; the CTA-per-row kernel (> 4 splits) also thread 0's
// partials summed (First) and the barrier before the final sum (LoopEnd). CTAs are numbered (z * gridDim.y + y) *
// gridDim.x + x; at most kDecTlCtas are recorded.
constexpr int kDecTlEntry = 0, kDecTlSm = 1, kDecTlReady = 2, kDecTlFirst = 3, kDecTlLoopEnd = 4, kDecTlExit = 5;
constexpr int kDecTlStaged = 6, kDecTlIssued = 7, kDecTlQ = 8;
constexpr int kDecTlSlots = 9;
constexpr int kDecTlCtas = 1 << 14;

// Whether this library was built with QDEC_DECODE_TIMELINE (no CUDA call).
bool decode_timeline_built();
// reset: zero every table (a slot still 0 after a call: that CTA did not run); else copy the attention CTAs' slots
// (the tables of the four kernel translation units, of which one ran) into *att and the merge CTAs' into *merge,
// kDecTlCtas * kDecTlSlots values each.
Status decode_timeline(bool reset, std::vector<unsigned long long>* att, std::vector<unsigned long long>* merge);

// Per translation unit (decode_16bit.cu, decode_fp8.cu, decode_int8.cu, decode_int4.cu, decode_merge.cu).
Status decode_timeline_16bit(bool reset, std::vector<unsigned long long>* out);
Status decode_timeline_fp8(bool reset, std::vector<unsigned long long>* out);
Status decode_timeline_int8(bool reset, std::vector<unsigned long long>* out);
Status decode_timeline_int4(bool reset, std::vector<unsigned long long>* out);
Status decode_timeline_merge(bool reset, std::vector<unsigned long long>* out);

}  // namespace qdec::attention
