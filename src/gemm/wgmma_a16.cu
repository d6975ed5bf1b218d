// The weight-only GEMM's wgmma path (GemmPath::kWgmma, docs/gemm.md "The wgmma path"), sm_90a:
//
//   Y^T[N, M] = dequant(W)[N, K] . X[M, K]^T with wgmma.m64nTk16.f32.{bf16,f16} (T = the token tile: 64, 128 or 256)
//
// Design
// - The packed layout (docs/formats.md, "Packed layout") is already wgmma's register A operand: a 16-row x 64-K int4
//   tile (16 x 32 int8 tile) holds, in lane L's 16 bytes, the mma.m16n8k16 A fragments of its four (two) k-steps, and
//   wgmma's per-warp A fragment (warp w of a warpgroup owns rows 16w..16w+15) is mma.m16n8k16's. So the kernel reads
//   the layout the fused GEMV reads; no other prepack. A 64-K stage holds one int4 tile or two int8 tiles per 16 rows.
// - CTA = 2 warpgroups, 128 channels (warp w owns 16-row block w) x T tokens; grid = column blocks x token tiles x K
//   splits. Per 64-K stage three TMA boxes complete on the stage's full mbarrier: X (T tokens x 64 values, 128-byte
//   swizzle: wgmma's K-major B layout; rows past M and columns past K read as zero), the codes (8 row blocks x the
//   stage's 512 or 1024 bytes; blocks past N read as zero) and the meta of the stage's group (group 32: two groups; a
//   group past the last reads as zero). A ring of kStages stages; each warp releases a stage on its empty mbarrier once
//   its wgmma reading it completed, and thread 0 refills the slot, except in 64-token CTAs and 256-token int4 CTAs:
//   there a third warpgroup (the producer; setmaxnreg gives the consumers its registers) refills each slot as soon as
//   it is released (QDEC_A16_PRODUCER). (A single producer warp, the first version, made ptxas serialize the 256-token
//   tile's wgmma for want of registers at 288 threads, C7512. Bulk copies of 512 bytes per
//   weight tile and per group's meta, instead of the two boxes, were slower: 4096 x 4096 at M 4096 414 against 307 µs,
//   28672 x 4096 at M 64 64.2 against 57.2, though the box build already paid for the fp32 dequantization below.)
// - Dequantization per weight, in registers: nibble -> (magic | q), 128 + q in bf16 or 1024 + q in fp16, exactly.
//   fp16 X: minus 1024 (+ z for int4zp), exact, then one fma with the format's fp16 scale and offset (int4zp: 0), two
//   packed instructions per pair. bf16 X: to fp32 by a 16-bit shift, fma(v, s, o - 128 s) in fp32 (int4zp: -(128 + z)
//   s), one packed rounding to bf16: the dequantize kernel's value (rounding scale and offset to bf16 instead cost the
//   int4 offset format 5.1-5.7e-3 of relative error, over the issue's 5e-3; row_consts_f32).
//   int8 (q + 128 per byte): a byte permute into the magic number, then q exactly and one multiplication by the scale
//   (dequant_kstep_i8).
// - Per k-step (16 K) a warpgroup dequantizes it into A register set ks % kSets, issues its wgmma and waits until at
//   most kSets - 1 are in flight. (Per stage, four k-steps at once in two sets of 16 registers, the first form, ran
//   the same at 128 tokens, the tensor pipe ~46% busy either way under ncu; the per-k-step sets need 16 registers in
//   all, which leaves the 256-token tile's 128 accumulators room to stay pipelined.) The accumulators start as the
//   first wgmma's product (scale-d 0).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "gemm/wgmma_a16.h"
#include "int8gemm/w8a8_wgmma.h"
#include "int8gemm/wgmma_s8.cuh"
#include "qdec/gemm.h"
#include "qdec/workspace.h"
#include "runtime/cuda_check.h"
#include "runtime/ptx.cuh"

// The device helpers of this file serve the sm_90a kernel alone (see w4a8_wgmma.cu).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

// QDEC_A16_PROBE (timing probes only, default 0): 1 skips the scale and offset (the A operand is the raw magic-number
// codes), to time the kernel without its dequantization arithmetic. Its results are wrong.
#ifndef QDEC_A16_PROBE
#define QDEC_A16_PROBE 0
#endif
// QDEC_A16_TRAFFIC_PROBE (timing probes only, default 0): 1 loads X, 2 the codes and meta, only in the first pass over
// the ring (later stages compute on stale bytes), to time the kernel without that operand's traffic. Wrong results.
#ifndef QDEC_A16_TRAFFIC_PROBE
#define QDEC_A16_TRAFFIC_PROBE 0
#endif
// QDEC_A16_T128_TWO (build knob, 1; 0 for A/B variant builds): 128-token CTAs with 4 stages, two per SM (one per SM
// with 6 stages took 1.09-1.25x the time at M = 128 on the H200, docs/gemm.md).
#ifndef QDEC_A16_T128_TWO
#define QDEC_A16_T128_TWO 1
#endif
// QDEC_A16_SETS (build knob, 4; 2 for A/B variant builds): A register sets, one per k-step in flight per warpgroup.
#ifndef QDEC_A16_SETS
#define QDEC_A16_SETS 4
#endif
// QDEC_A16_PRODUCER (build knob, 1; 0 for A/B variant builds): 64-token CTAs and 256-token int4 CTAs get a third
// warpgroup whose first thread refills the ring as soon as every consumer warp released a slot, instead of consumer
// thread 0 refilling at its next stage's start. H200, session 44: int4 0.92x the time at 256 tokens (M = 256-1024),
// 0.98x at 64 (M = 24-64), int8 0.97x at 64; int8 at 256 tokens 1.01-1.06x, so there int8 keeps consumer thread 0 as
// its producer. 128-token CTAs run two per SM, and at 384 threads ptxas has 80 registers for their 64 accumulators
// (C7602).
#ifndef QDEC_A16_PRODUCER
#define QDEC_A16_PRODUCER 1
#endif
// QDEC_A16_T256_STAGES_I4 (build knob, 6): ring stages of 256-token CTAs with int4 weights (int8's larger stages fit
// 5).
#ifndef QDEC_A16_T256_STAGES_I4
#define QDEC_A16_T256_STAGES_I4 6
#endif
// QDEC_A16_EPI_BATCH (build knob, 8): float4 per thread in flight in the split-K epilogue (1, the form before, took
// 1.08-1.57x the time of 8 wherever the plan splits; H200, docs/gemm.md "Session 43").
#ifndef QDEC_A16_EPI_BATCH
#define QDEC_A16_EPI_BATCH 8
#endif

namespace qdec::wq {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kA16Threads = kConsumerWarps * 32;  // two warpgroups
constexpr int kStageK = 64;                       // K values per stage: one int4 tile or two int8 tiles per 16 rows
constexpr int kCtaN = 128;                        // output channels per CTA
constexpr int kTileBytes = 512;                   // one 16 x 64 int4 tile or 16 x 32 int8 tile

// Codes bytes of one 16-row block per stage: 512 (int4, one tile) or 1024 (int8, two tiles).
constexpr int w_row_bytes(int bits) {
  return 16 * kStageK * bits / 8;
}

template <int T, int kBits>
struct A16Config {
  static constexpr int kXBytes = T * kStageK * 2;              // T rows of 128 bytes (128-byte swizzle)
  static constexpr int kWRowBytes = w_row_bytes(kBits);        // one 16-row block's codes
  static constexpr int kWBytes = kConsumerWarps * kWRowBytes;  // 4 KiB (int4) or 8 KiB (int8)
  static constexpr int kMetaBytes = 2 * kCtaN * 4;             // two groups (group 32) x 128 x 4 bytes
  static constexpr int kStages = T == 256                          ? (kBits == 4 ? QDEC_A16_T256_STAGES_I4 : 5)
                                 : (T == 128 && QDEC_A16_T128_TWO) ? 4
                                                                   : 6;
  // A producer warpgroup after the two consumer warpgroups (QDEC_A16_PRODUCER: 64-token CTAs, 256-token int4 CTAs).
  static constexpr bool kProducer = (kBits == 4 || T == 64) && T != 128 && QDEC_A16_PRODUCER;
  static constexpr int kThreads = kA16Threads + (kProducer ? 128 : 0);
  // setmaxnreg counts per thread: the producer's and the consumers' (one CTA per SM: 40 + 2 x 232 <= 3 x 168; two:
  // 24 + 2 x 104 <= 3 x 80).
  static constexpr int kProducerRegs = T == 256 ? 40 : 24, kConsumerRegs = T == 256 ? 232 : 104;
  static constexpr int kWOff = kStages * kXBytes;
  static constexpr int kMOff = kWOff + kStages * kWBytes;
  static constexpr int kBarOff = kMOff + kStages * kMetaBytes;
  static constexpr int kFlagOff = kBarOff + 2 * kStages * 8;
  static constexpr int kSmemBytes = kFlagOff + 16;
  static constexpr int kPitch = kCtaN + 4;  // floats per staged output row (conflict-free fragment stores)
  static constexpr int kMinBlocks = T == 64 || (T == 128 && QDEC_A16_T128_TWO) ? 2 : 1;
  static_assert(T * kPitch * 4 <= kBarOff, "the output staging fits the ring");
  static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "kMinBlocks CTAs fit an SM");
};

struct A16Params {
  const uint8_t* codes;
  const uint8_t* meta;
  void* y;
  const float* bias;
  float* partial;     // [tiles][T][128] (split-K)
  unsigned* tickets;  // [tiles] (split-K)
  long long ldy;
  int m, n, n_pad, k_tiles, group_shift, num_groups;
  int zero_point, act, y_dtype, vec_y;
  int splits, kt_per_split, m_blocks;
};

// wgmma with A from registers (a: the thread's four 16-bit pairs, PTX ISA's wgmma A register layout) and B from shared
// memory (descriptor db), D fp32 (d: N / 2 floats per thread), D = A B + (accumulate ? D : 0). The asm of one shape and
// type: N, TY (bf16 / f16), the D register list and operands, and the operand numbers of A, the descriptor and the
// flag.
#define QDEC_A16_F4(d, i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define QDEC_A16_F16(d, i) QDEC_A16_F4(d, i), QDEC_A16_F4(d, (i) + 4), QDEC_A16_F4(d, (i) + 8), QDEC_A16_F4(d, (i) + 12)
#define QDEC_A16_F32(d, i) QDEC_A16_F16(d, i), QDEC_A16_F16(d, (i) + 16)
#define QDEC_A16_F64(d, i) QDEC_A16_F32(d, i), QDEC_A16_F32(d, (i) + 32)
#define QDEC_A16_F128(d, i) QDEC_A16_F64(d, i), QDEC_A16_F64(d, (i) + 64)
#define QDEC_A16_WGMMA_RS(N, TY, DREGS, DOPS, A0, A1, A2, A3, DESC, FLAG)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" FLAG ", 0;\nwgmma.mma_async.sync.aligned.m64n" N "k16.f32." TY \
               "." TY " " DREGS ", {%" A0 ",%" A1 ",%" A2 ",%" A3 "}, %" DESC ", p, 1, 1, 0;\n}\n"                 \
               : DOPS                                                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))

template <bool BF16>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                   int accumulate) {
  if constexpr (BF16) {
    QDEC_A16_WGMMA_RS("64", "bf16", QDEC_WGMMA_D32_REGS, QDEC_A16_F32(d, 0), "32", "33", "34", "35", "36", "37");
  } else {
    QDEC_A16_WGMMA_RS("64", "f16", QDEC_WGMMA_D32_REGS, QDEC_A16_F32(d, 0), "32", "33", "34", "35", "36", "37");
  }
}
template <bool BF16>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                    int accumulate) {
  if constexpr (BF16) {
    QDEC_A16_WGMMA_RS("128", "bf16", QDEC_WGMMA_D64_REGS, QDEC_A16_F64(d, 0), "64", "65", "66", "67", "68", "69");
  } else {
    QDEC_A16_WGMMA_RS("128", "f16", QDEC_WGMMA_D64_REGS, QDEC_A16_F64(d, 0), "64", "65", "66", "67", "68", "69");
  }
}
template <bool BF16>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t db,
                                                    int accumulate) {
  if constexpr (BF16) {
    QDEC_A16_WGMMA_RS("256", "bf16", QDEC_WGMMA_D128_REGS, QDEC_A16_F128(d, 0), "128", "129", "130", "131", "132",
                      "133");
  } else {
    QDEC_A16_WGMMA_RS("256", "f16", QDEC_WGMMA_D128_REGS, QDEC_A16_F128(d, 0), "128", "129", "130", "131", "132",
                      "133");
  }
}

// (a & b) | c
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
using ptx::lds128;
using ptx::lds16;
using ptx::lds32;

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The dequantization constants of one row of one group. Codes are unpacked by the magic number of the 16-bit type:
// (magic | q) is 128 + q in bf16, 1024 + q in fp16, exactly.
// - fp16 X: v - c is the code's integer (c = 1024, or 1024 + z for int4zp), then fma(v - c, s, o) with the format's own
//   fp16 scale and offset (zero point: o = 0): the weight with one rounding to fp16, in two packed instructions.
// - bf16 X: bf16 cannot hold the fp16 scale and offset exactly, and rounding them to bf16 cost the int4 (offset) format
//   5.1-5.7e-3 of relative error on the tests' weights (measured on the H200; the issue's bar is 5e-3): the offset is
//   the group's minimum, so its rounding error moves every weight of the group the same way. So each half of v goes to
//   fp32 (a 16-bit shift, exact), w = fma(v, s, c) with c = o - 128 s (int4zp: -(128 + z) s) in fp32, and one packed
//   rounding to bf16: the dequantize kernel's value (docs/gemm.md).
struct RowConsts {
  uint32_t c, s, o;
};
__device__ __forceinline__ RowConsts row_consts_fp16(uint32_t meta, bool zp) {
  RowConsts r;
  r.s = ptx::prmt(meta, meta, 0x1010);
  if (zp) {
    const float z = __half2float(__ushort_as_half(static_cast<unsigned short>(meta >> 16)));
    r.c = pack2<false>(1024.0f + z, 1024.0f + z);
    r.o = 0u;
  } else {
    r.c = 0x64006400u;
    r.o = ptx::prmt(meta, meta, 0x3232);
  }
  return r;
}
struct RowConstsF {
  float s, c;
};
__device__ __forceinline__ RowConstsF row_consts_f32(uint32_t meta, bool zp) {
  RowConstsF r;
  r.s = __half2float(__ushort_as_half(static_cast<unsigned short>(meta & 0xFFFFu)));
  const float second = __half2float(__ushort_as_half(static_cast<unsigned short>(meta >> 16)));
  r.c = zp ? -(128.0f + second) * r.s : __fmaf_rn(-128.0f, r.s, second);
  return r;
}

__device__ __forceinline__ uint32_t fma_sub2_fp16(uint32_t v, const RowConsts& r) {
  const __half2 t = __hsub2(*reinterpret_cast<const __half2*>(&v), *reinterpret_cast<const __half2*>(&r.c));
  const __half2 w = __hfma2(t, *reinterpret_cast<const __half2*>(&r.s), *reinterpret_cast<const __half2*>(&r.o));
  return *reinterpret_cast<const uint32_t*>(&w);
}
__device__ __forceinline__ uint32_t fma_f32_bf16x2(uint32_t v, const RowConstsF& r) {
  const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xFFFF0000u);
  return pack2<true>(__fmaf_rn(lo, r.s, r.c), __fmaf_rn(hi, r.s, r.c));
}

// One k-step's A fragment from its 32-bit code word: nibble i is register i % 4 (rows g, g + 8, g, g + 8), lo for i < 4
// else hi, so (w >> 4i) & 0x000F000F puts register i's two codes in place.
template <class R>
__device__ __forceinline__ void dequant_kstep(uint32_t w, const R& r0, const R& r1, uint32_t (&a)[4]) {
  constexpr bool kBf16 = std::is_same_v<R, RowConstsF>;
  constexpr uint32_t kMagic = kBf16 ? 0x43004300u : 0x64006400u;  // 128.0 / 1024.0: mantissa spacing 1
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = and_or(w >> (4 * i), 0x000F000Fu, kMagic);
#if QDEC_A16_PROBE
    a[i] = v;  // timing probe: no scale or offset
#else
    if constexpr (kBf16) {
      a[i] = fma_f32_bf16x2(v, (i & 1) ? r1 : r0);
    } else {
      a[i] = fma_sub2_fp16(v, (i & 1) ? r1 : r0);
    }
#endif
  }
}

// int8 weights (symmetric, fp16 scale; a code byte is q + 128). The constants of one row of one group:
// - fp16 X: (magic | byte) is 1024 + 128 + q in fp16, exactly; minus 1152 is q, exactly; times the fp16 scale: the
//   weight with one rounding, in two packed instructions per pair (fma_sub2_fp16 with o = 0).
// - bf16 X: (fp32 magic | byte) is 2^23 + 128 + q, exactly; minus 2^23 + 128 is q, times the scale in fp32 is q s
//   exactly (8 x 11 bits), and one packed rounding to bf16: the dequantize kernel's value. (q in bf16 from the byte
//   pair in packed form, 128 + (byte & 127) plus -256 or -128 by the byte's bit 7, then fma(q, s_hi, q * s_lo) with
//   the scale split into two bf16 values: six packed instructions per pair against seven, and the same time on the
//   H200, docs/gemm.md; not kept.)
__device__ __forceinline__ RowConsts row_consts_fp16_i8(uint32_t scale) {
  return RowConsts{0x64806480u, ptx::prmt(scale, scale, 0x1010), 0u};
}
__device__ __forceinline__ RowConstsF row_consts_f32_i8(uint32_t scale) {
  return RowConstsF{__half2float(__ushort_as_half(static_cast<unsigned short>(scale & 0xFFFFu))), 0.0f};
}
// One k-step's A fragment from its 8 code bytes (lo: bytes 0..3, hi: 4..7): register i is bytes 2i, 2i + 1 (its lo
// and hi value; rows g, g + 8, g, g + 8 as for int4).
template <class R>
__device__ __forceinline__ void dequant_kstep_i8(uint32_t lo, uint32_t hi, const R& r0, const R& r1, uint32_t (&a)[4]) {
  constexpr bool kBf16 = std::is_same_v<R, RowConstsF>;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = i < 2 ? lo : hi;
    const uint32_t j = (i & 1) ? 2u : 0u;  // byte of the pair's lo value in w
#if QDEC_A16_PROBE
    a[i] = ptx::prmt(w, 0x64646464u, 0x4040u | j | ((j + 1) << 8));  // timing probe: no scale
#else
    if constexpr (kBf16) {
      const R& r = (i & 1) ? r1 : r0;
      const float v0 = __fsub_rn(__uint_as_float(ptx::prmt(w, 0x4B000000u, 0x7650u | j)), 8388736.0f);
      const float v1 = __fsub_rn(__uint_as_float(ptx::prmt(w, 0x4B000000u, 0x7650u | (j + 1))), 8388736.0f);
      a[i] = pack2<true>(__fmul_rn(v0, r.s), __fmul_rn(v1, r.s));
    } else {
      a[i] = fma_sub2_fp16(ptx::prmt(w, 0x64646464u, 0x4040u | j | ((j + 1) << 8)), (i & 1) ? r1 : r0);
    }
#endif
  }
}

template <int T, bool BF16>
__device__ __forceinline__ void wgmma_step(float (&d)[T / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (T == 64) {
    wgmma_m64n64k16_rs<BF16>(d, a, db, accumulate);
  } else if constexpr (T == 128) {
    wgmma_m64n128k16_rs<BF16>(d, a, db, accumulate);
  } else {
    wgmma_m64n256k16_rs<BF16>(d, a, db, accumulate);
  }
}

template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The CTA's barrier (named: the split-K arrival passes it as a callable).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kA16Threads) : "memory");
}

__device__ __forceinline__ float activate(float v, int act) {
  if (act == 1) return fmaxf(v, 0.0f);
  if (act == 2) return fminf(fmaxf(v, 0.0f), 6.0f);
  return v;
}

// Y[tok, ch .. ch + 3] from v (+ bias, clamp); channels past N are skipped.
__device__ __forceinline__ void store_y4(const A16Params& p, int tok, int ch, float4 v) {
  float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (p.bias && ch + e < p.n) f[e] += p.bias[ch + e];
    f[e] = activate(f[e], p.act);
  }
  const size_t row = size_t(tok) * size_t(p.ldy);
  if (p.vec_y && ch + 3 < p.n) {
    if (p.y_dtype == 2) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.y) + row + ch) = make_float4(f[0], f[1], f[2], f[3]);
    } else {
      const bool bf = p.y_dtype == 0;
      const uint2 u = bf ? make_uint2(pack2<true>(f[0], f[1]), pack2<true>(f[2], f[3]))
                         : make_uint2(pack2<false>(f[0], f[1]), pack2<false>(f[2], f[3]));
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.y) + row + ch) = u;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (ch + e >= p.n) break;
    if (p.y_dtype == 2) {
      static_cast<float*>(p.y)[row + ch + e] = f[e];
    } else if (p.y_dtype == 0) {
      static_cast<__nv_bfloat16*>(p.y)[row + ch + e] = __float2bfloat16_rn(f[e]);
    } else {
      static_cast<__half*>(p.y)[row + ch + e] = __float2half_rn(f[e]);
    }
  }
}

__device__ __forceinline__ void red_add4(float* a, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

// grid: x = column block * m_blocks + token tile (the token tiles of a column run together and share its weights in
// L2), z = K splits.
template <int T, bool BF16, int kBits>
__global__ void __launch_bounds__(A16Config<T, kBits>::kThreads, A16Config<T, kBits>::kMinBlocks)
    a16_wgmma_kernel(const __grid_constant__ A16Params p, const __grid_constant__ CUtensorMap xmap,
                     const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap mmap) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = A16Config<T, kBits>;
  constexpr int kMetaEntry = kBits == 8 ? 2 : 4;  // bytes per (group, row): fp16 scale (+ fp16 offset or zero)
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int mb = blockIdx.x % p.m_blocks, nb = blockIdx.x / p.m_blocks;
  const int tok0 = mb * T, n0 = nb * kCtaN;
  const int kt0 = blockIdx.z * p.kt_per_split;
  const int n_kt = min(p.k_tiles, kt0 + p.kt_per_split) - kt0;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = base + C::kBarOff, empty = full + C::kStages * 8;
  const int blocks = min(kConsumerWarps, (p.n_pad - n0) / 16);  // 16-row blocks of this CTA that exist
  const bool group32 = p.group_shift == 5;

  // Thread 0 requests stage j into slot j % kStages: three boxes by the TMA, X (T tokens x 64 values), the codes (8 row
  // blocks x the stage's 512-byte int4 tile or two int8 tiles; blocks past N, and an int8 tile past K, read as zero)
  // and the meta of the stage's group (group 32: its two groups; a group past the last reads as zero).
  const int stage_bytes = C::kXBytes + C::kWBytes + (group32 ? 2 : 1) * kCtaN * kMetaEntry;
  auto issue_stage = [&](int j) {
    const int s = j % C::kStages;
    const uint32_t bar = full + 8 * s;
    const int kt = kt0 + j;
    // Timing probes (QDEC_A16_TRAFFIC_PROBE) skip X or the codes and meta after the first pass over the ring.
    const bool load_x = QDEC_A16_TRAFFIC_PROBE != 1 || j < C::kStages;
    const bool load_w = QDEC_A16_TRAFFIC_PROBE != 2 || j < C::kStages;
    w8a8::mbar_expect_tx(bar, (load_x ? C::kXBytes : 0) + (load_w ? stage_bytes - C::kXBytes : 0));
    if (load_x) w8a8::tma_load_2d(base + s * C::kXBytes, &xmap, kt * kStageK * 2, tok0, bar);
    if (load_w) {
      w8a8::tma_load_2d(base + C::kWOff + s * C::kWBytes, &wmap, kt * (C::kWRowBytes / 8), n0 / 16, bar);
      w8a8::tma_load_2d(base + C::kMOff + s * C::kMetaBytes, &mmap, n0, (kt * kStageK) >> p.group_shift, bar);
    }
  };
  if (tid == 0) {
    w8a8::prefetch_tensormap(&xmap);
    w8a8::prefetch_tensormap(&wmap);
    w8a8::prefetch_tensormap(&mmap);
    for (int s = 0; s < C::kStages; ++s) {
      w8a8::mbar_init(full + 8 * s, 1);
      w8a8::mbar_init(empty + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int j = 0; j < C::kStages && j < n_kt; ++j) issue_stage(j);
  }
  __syncthreads();
  if constexpr (C::kProducer) {
    // Registers: the producer warpgroup gives most of its share to the consumers (kProducerRegs, kConsumerRegs).
    if (warp >= kConsumerWarps) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProducerRegs) : "memory");
      // Its first thread refills slot j % kStages with stage j once every consumer warp released stage j - kStages.
      if (tid == kA16Threads) {
        for (int j = C::kStages; j < n_kt; ++j) {
          w8a8::mbar_wait(empty + 8 * (j % C::kStages), (j / C::kStages - 1) & 1);
          issue_stage(j);
        }
      }
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsumerRegs) : "memory");
  }

  // Consumers: warp w's 16-row block is w (warpgroup w / 4, rows 16 (w % 4) .. of its wgmma).
  const int g = lane >> 2, t = lane & 3;
  const bool has_block = warp < blocks;
  const bool zp = p.zero_point != 0;
  // The accumulators start as the first wgmma's product (its scale-d is 0): zeroing them by instructions made ptxas
  // serialize every wgmma of the loop (C7515), so they are only declared defined here.
  float d[T / 2];
#pragma unroll
  for (int i = 0; i < T / 2; ++i) asm volatile("" : "=f"(d[i]));

  // Per stage: wait for it, load this lane's code words (int4: four, one per k-step; int8: eight, two per k-step, from
  // the stage's two tiles) and its rows' meta (rows g and g + 8 of the warp's block; group 32: the second group's for
  // k-steps 2 and 3). Blocks past N skip the loads: zero constants make zero weights.
  // Per k-step: dequantize it into A register set ks % kSets, issue its wgmma, and wait until at most kSets - 1 are
  // in flight, so that the set the next k-step overwrites is free and the tensor pipe holds up to kSets - 1 of this
  // warpgroup's k-steps while it dequantizes. Stage i - 1's last k-step has completed after k-step kSets - 2 of stage
  // i: release it.
  constexpr int kSets = QDEC_A16_SETS;
  static_assert(kSets == 2 || kSets == 4, "the k-steps of a stage use the sets in turn");
  using Consts = std::conditional_t<BF16, RowConstsF, RowConsts>;
  uint32_t a[kSets][4];
  for (int i = 0; i < n_kt; ++i) {
    const int s = i % C::kStages;
    // Every warp released stage i - 2 during stage i - 1: thread 0 refills its slot with stage i - 2 + kStages.
    if (!C::kProducer && tid == 0 && i >= 2 && i - 2 + C::kStages < n_kt) {
      w8a8::mbar_wait(empty + 8 * ((i - 2) % C::kStages), ((i - 2) / C::kStages) & 1);
      issue_stage(i - 2 + C::kStages);
    }
    w8a8::mbar_wait(full + 8 * s, (i / C::kStages) & 1);
    uint4 w = make_uint4(0u, 0u, 0u, 0u), w2 = make_uint4(0u, 0u, 0u, 0u);
    Consts r0{}, r1{}, q0{}, q1{};
    if (has_block) {
      const uint32_t wa = base + C::kWOff + s * C::kWBytes + warp * C::kWRowBytes + lane * 16;
      w = lds128(wa);
      if constexpr (kBits == 8) w2 = lds128(wa + kTileBytes);
      const uint32_t ma = base + C::kMOff + s * C::kMetaBytes + (warp * 16 + g) * kMetaEntry;
      auto consts = [&](uint32_t addr) {
        if constexpr (kBits == 8 && BF16) {
          return row_consts_f32_i8(lds16(addr));
        } else if constexpr (kBits == 8) {
          return row_consts_fp16_i8(lds16(addr));
        } else if constexpr (BF16) {
          return row_consts_f32(lds32(addr), zp);
        } else {
          return row_consts_fp16(lds32(addr), zp);
        }
      };
      r0 = consts(ma);
      r1 = consts(ma + 8 * kMetaEntry);
      if (group32) {
        q0 = consts(ma + kCtaN * kMetaEntry);
        q1 = consts(ma + kCtaN * kMetaEntry + 8 * kMetaEntry);
      } else {
        q0 = r0;
        q1 = r1;
      }
    }
    const uint32_t words[8] = {w.x, w.y, w.z, w.w, w2.x, w2.y, w2.z, w2.w};
    const uint64_t desc = w8a8::sw128_desc(base + s * C::kXBytes);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t(&ar)[4] = a[ks % kSets];
      if constexpr (kBits == 8) {
        dequant_kstep_i8(words[2 * ks], words[2 * ks + 1], ks < 2 ? r0 : q0, ks < 2 ? r1 : q1, ar);
      } else {
        dequant_kstep(words[ks], ks < 2 ? r0 : q0, ks < 2 ? r1 : q1, ar);
      }
      fence_acc(d);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      wgmma_step<T, BF16>(d, ar, desc + uint64_t(2 * ks), i > 0 || ks > 0);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      wgmma_wait<kSets - 1>();
      // Stage i - 1 has left this warp's tensor pipe: release it.
      if (ks == kSets - 2 && i > 0 && lane == 0) w8a8::mbar_arrive(empty + 8 * ((i - 1) % C::kStages));
    }
  }
  wgmma_wait<0>();
  fence_acc(d);

  // The fp32 tile to shared memory (the ring is idle: every stage was consumed), rows = tokens.
  consumer_sync();
  float* stg = reinterpret_cast<float*>(smem);
  {
    const int ch = warp * 16 + g;
#pragma unroll
    for (int j = 0; j < T / 8; ++j) {
      const int tok = 8 * j + 2 * t;
      stg[tok * C::kPitch + ch] = d[4 * j];
      stg[(tok + 1) * C::kPitch + ch] = d[4 * j + 1];
      stg[tok * C::kPitch + ch + 8] = d[4 * j + 2];
      stg[(tok + 1) * C::kPitch + ch + 8] = d[4 * j + 3];
    }
  }
  consumer_sync();
  const int rows = min(T, p.m - tok0);
  if (p.splits == 1) {
    for (int i = tid; i < rows * (kCtaN / 4); i += kA16Threads) {
      const int r = i / (kCtaN / 4), c4 = (i % (kCtaN / 4)) * 4;
      if (n0 + c4 >= p.n) continue;
      store_y4(p, tok0 + r, n0 + c4, *reinterpret_cast<const float4*>(stg + r * C::kPitch + c4));
    }
    return;
  }
  // Split-K: add this split's tile into the accumulator, take the tile's ticket; the last split writes Y. Each thread
  // handles kBatch float4 at a time, their loads issued together: one at a time, the last split's read-back was a
  // chain of up to 32 dependent L2 round trips per thread (ncu at M = 256: ~11% of the warp samples).
  constexpr int kBatch = QDEC_A16_EPI_BATCH;
  const int tile = blockIdx.x, n4 = rows * (kCtaN / 4);
  float4* acc = reinterpret_cast<float4*>(p.partial + size_t(tile) * T * kCtaN);  // float4 i: row i / 32
  for (int i0 = tid; i0 < n4; i0 += kBatch * kA16Threads) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kA16Threads;
      if (i < n4) v[b] = *reinterpret_cast<const float4*>(stg + (i / (kCtaN / 4)) * C::kPitch + (i % (kCtaN / 4)) * 4);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (i0 + b * kA16Threads < n4) red_add4(reinterpret_cast<float*>(acc + i0 + b * kA16Threads), v[b]);
    }
  }
  int* flag = reinterpret_cast<int*>(smem + C::kFlagOff);
  if (!ptx::split_arrive(p.tickets + tile, p.splits, tid == 0, flag, [] { consumer_sync(); })) return;
  if (tid == 0) p.tickets[tile] = 0u;
  for (int i0 = tid; i0 < n4; i0 += kBatch * kA16Threads) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (i0 + b * kA16Threads < n4) v[b] = __ldcg(acc + i0 + b * kA16Threads);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kA16Threads;
      if (i >= n4) break;
      __stcg(acc + i, make_float4(0.f, 0.f, 0.f, 0.f));
      const int c4 = (i % (kCtaN / 4)) * 4;
      if (n0 + c4 < p.n) store_y4(p, tok0 + i / (kCtaN / 4), n0 + c4, v[b]);
    }
  }
#else
  (void)p;
  (void)xmap;
  (void)wmap;
  (void)mmap;
#endif
}

using Kernel = void (*)(A16Params, CUtensorMap, CUtensorMap, CUtensorMap);
struct KernelEntry {
  int tile_m;
  bool bf16;
  int bits;
  Kernel func;
  int smem;
  int threads;
};
#define QDEC_A16_ENTRY(T, BF, BITS) \
  { T, BF, BITS, a16_wgmma_kernel<T, BF, BITS>, A16Config<T, BITS>::kSmemBytes, A16Config<T, BITS>::kThreads }
// The closed list of compiled configurations: token tile x X dtype x weight bits.
const KernelEntry kKernels[] = {
    QDEC_A16_ENTRY(64, true, 4),  QDEC_A16_ENTRY(128, true, 4),  QDEC_A16_ENTRY(256, true, 4),
    QDEC_A16_ENTRY(64, false, 4), QDEC_A16_ENTRY(128, false, 4), QDEC_A16_ENTRY(256, false, 4),
    QDEC_A16_ENTRY(64, true, 8),  QDEC_A16_ENTRY(128, true, 8),  QDEC_A16_ENTRY(256, true, 8),
    QDEC_A16_ENTRY(64, false, 8), QDEC_A16_ENTRY(128, false, 8), QDEC_A16_ENTRY(256, false, 8),
};
#undef QDEC_A16_ENTRY

const KernelEntry* find(int tile_m, bool bf16, int bits) {
  for (const KernelEntry& e : kKernels)
    if (e.tile_m == tile_m && e.bf16 == bf16 && e.bits == bits) return &e;
  return nullptr;
}

int min_blocks(int tile_m) {
  return tile_m == 64 ? A16Config<64, 4>::kMinBlocks : tile_m == 128 ? A16Config<128, 4>::kMinBlocks : 1;
}

size_t round256(size_t b) {
  return (b + 255) / 256 * 256;
}

}  // namespace

Status a16_supported() {
  return sm90a_kernel_status<a16_wgmma_kernel<64, true, 4>>("weight-only wgmma path");
}

Status a16_plan(int m, const WeightLayout& L, int tile_m, int num_splits, int sm_count, A16Plan* pl) {
  if (tile_m != 0 && tile_m != 64 && tile_m != 128 && tile_m != 256)
    return Status(StatusCode::kInvalidArgument,
                  "tile_m " + std::to_string(tile_m) + " must be 0 (automatic), 64, 128 or 256");
  pl->k_tiles = (L.k_pad() + kStageK - 1) / kStageK;  // int8: the last 64-value tile may hold one 32-value tile
  pl->n_blocks = (L.n_pad() + kCtaN - 1) / kCtaN;
  // The token tile: qdec/gemm.h's rule (the smallest that holds M, but 64 at M = 96-128 for small weights).
  const int tm = tile_m != 0 ? tile_m : wgmma_auto_tile_m(m, L.n, L.k);
  pl->tile_m = tm;
  const long long m_blocks = (static_cast<long long>(m) + tm - 1) / tm;  // M up to INT_MAX: no int overflow
  const long long tiles = m_blocks * pl->n_blocks;
  if (tiles > 2147483647LL)
    return Status(StatusCode::kInvalidArgument, "wgmma path: M " + std::to_string(m) + " x N " + std::to_string(L.n) +
                                                    " needs more CTAs than a grid holds");
  pl->m_blocks = static_cast<int>(m_blocks);
  const size_t tile_acc = size_t(tm) * kCtaN * 4;
  const size_t state = round256(size_t(tiles) * 4) + round256(size_t(tiles) * tile_acc);
  int splits = 1;
  if (num_splits > 0) {
    if (num_splits > pl->k_tiles)
      return Status(StatusCode::kInvalidArgument, "num_splits " + std::to_string(num_splits) + " exceeds the " +
                                                      std::to_string(pl->k_tiles) + " K tiles of 64 (K " +
                                                      std::to_string(L.k) + ")");
    if (num_splits > 1 && state > kWorkspaceStateBytes)
      return Status(StatusCode::kInvalidArgument,
                    "num_splits " + std::to_string(num_splits) + " needs " + std::to_string(state) +
                        " bytes of split-K state, more than the workspace's state zone of " +
                        std::to_string(kWorkspaceStateBytes));
    splits = num_splits;
  } else if (state <= kWorkspaceStateBytes) {
    // Fill the SMs' CTA slots, keeping >= 8 K tiles (512 values) per split.
    const long long slots = 1LL * sm_count * min_blocks(tm);
    if (tiles < slots) splits = int(std::max<long long>(1, std::min<long long>(slots / tiles, pl->k_tiles / 8)));
  }
  pl->kt_per_split = (pl->k_tiles + splits - 1) / splits;
  pl->splits = (pl->k_tiles + pl->kt_per_split - 1) / pl->kt_per_split;  // no empty split
  pl->ticket_bytes = pl->splits > 1 ? round256(size_t(tiles) * 4) : 0;
  pl->partial_bytes = pl->splits > 1 ? round256(size_t(tiles) * tile_acc) : 0;
  const KernelEntry* e = find(tm, true, weight_bits(L.format.kind));
  pl->smem = e ? e->smem : 0;
  return Status::Ok();
}

Status a16_launch(const A16Args& a, const WeightLayout& L, const A16Plan& pl, cudaStream_t stream) {
  const int bits = weight_bits(L.format.kind);
  const KernelEntry* e = find(pl.tile_m, a.bf16, bits);
  if (!e)
    return Status(StatusCode::kUnsupported, "wgmma path: tile_m " + std::to_string(pl.tile_m) + " with " +
                                                L.format.name() + " weights is not compiled");
  QDEC_RETURN_IF_ERROR(raise_dynamic_smem(reinterpret_cast<const void*>(e->func), e->smem));
  CUtensorMap xmap;
  // X as bytes: K * 2 bytes per row, boxes of 128 bytes x tile_m rows in the 128-byte swizzle (wgmma's K-major
  // 128-byte-swizzle B layout); rows past M and bytes past K * 2 read as zero.
  QDEC_RETURN_IF_ERROR(w8a8::int8_tensor_map(&xmap, static_cast<const int8_t*>(a.x), a.m, L.k * 2, a.ldx * 2,
                                             kStageK * 2, pl.tile_m, CU_TENSOR_MAP_SWIZZLE_128B, "x"));
  // The codes as [n_pad / 16 row blocks][row block's bytes] of 8-byte elements, boxes of one stage's 512 (int4) or
  // 1024 (int8) bytes of 8 row blocks; the meta as [num_groups][n_pad] 4-byte (int4) or 2-byte (int8) entries, boxes
  // of 128 channels x the groups of a stage (2 for group 32).
  const bool group32 = L.format.group_size == 32;
  const unsigned long long row_block_bytes =
      static_cast<unsigned long long>(L.k_pad() / weight_chunk_k(L.format.kind)) * kTileBytes;
  const int meta_entry = weight_meta_entry_bytes(L.format.kind);
  CUtensorMap wmap, mmap;
  QDEC_RETURN_IF_ERROR(w8a8::tensor_map_2d(&wmap, CU_TENSOR_MAP_DATA_TYPE_UINT64, a.codes, row_block_bytes / 8,
                                           static_cast<unsigned long long>(L.n_pad() / 16), row_block_bytes,
                                           w_row_bytes(bits) / 8, kConsumerWarps, CU_TENSOR_MAP_SWIZZLE_NONE,
                                           "w.codes"));
  QDEC_RETURN_IF_ERROR(w8a8::tensor_map_2d(
      &mmap, meta_entry == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16, a.meta,
      static_cast<unsigned long long>(L.n_pad()), static_cast<unsigned long long>(L.num_groups()),
      static_cast<unsigned long long>(L.n_pad()) * meta_entry, kCtaN, group32 ? 2 : 1, CU_TENSOR_MAP_SWIZZLE_NONE,
      "w.meta"));
  A16Params p{};
  p.codes = a.codes;
  p.meta = a.meta;
  p.y = a.y;
  p.bias = a.bias;
  p.ldy = a.ldy;
  p.m = a.m;
  p.n = L.n;
  p.n_pad = L.n_pad();
  p.k_tiles = pl.k_tiles;
  p.num_groups = L.num_groups();
  p.group_shift = L.format.group_size == 0 ? 30 : 31 - __builtin_clz(unsigned(L.format.group_size));
  p.zero_point = a.zero_point ? 1 : 0;
  p.act = a.act;
  p.y_dtype = a.y_dtype;
  const size_t y_elem = a.y_dtype == 2 ? 4 : 2;
  p.vec_y = (reinterpret_cast<uintptr_t>(a.y) % (4 * y_elem) == 0 && a.ldy % 4 == 0) ? 1 : 0;
  p.splits = pl.splits;
  p.kt_per_split = pl.kt_per_split;
  p.m_blocks = pl.m_blocks;
  if (pl.splits > 1) {
    p.tickets = static_cast<unsigned*>(a.workspace);
    p.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(a.workspace) + pl.ticket_bytes);
  }
  const dim3 grid(unsigned(pl.m_blocks * pl.n_blocks), 1, unsigned(pl.splits));
  e->func<<<grid, e->threads, e->smem, stream>>>(p, xmap, wmap, mmap);
  return cuda_status(cudaGetLastError(), "a16_wgmma_kernel launch");
}

}  // namespace qdec::wq
