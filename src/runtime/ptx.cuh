// PTX wrappers shared by the kernel families (decode attention, weight-only GEMM, the int8 GEMMs): one definition of
// each instruction sequence. Family-specific helpers (fragment loads, conversions) stay with their kernels.
#pragma once

#include <vector_types.h>

#include <cstdint>

namespace qdec::ptx {

// Shared-memory loads at a shared-window address (__cvta_generic_to_shared): 16, 4 and 2 bytes (zero-extended).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds16(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// D (16x8, fp32) += A (16x16, row) * B (16x8, col), A and B in bf16 (BF16) or fp16.
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 16-byte global -> shared copy, cached in L2 only (.cg).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

// Programmatic dependent launch (sm_90+). griddep_wait: wait until the grids this one depends on have completed and
// their memory is visible; griddep_launch_dependents: let the next programmatic dependent in the stream start.
// Below sm_90 there is no programmatic launch, so stream order already holds and both compile to nothing (an sm_80
// build of the library stays possible).
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// a[0] += x, a[1] += y (a 8-byte aligned), relaxed, no value returned: one float2 reduction on sm_90+ (RED, which
// the issuing warp does not wait for, where atomicAdd(float2*) compiled to an ATOMG), two float atomics below.
__device__ __forceinline__ void atomic_add2(float* a, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.v2.f32.add [%0], {%1, %2};\n" ::"l"(a), "f"(x), "f"(y) : "memory");
#else
  atomicAdd(a, x);
  atomicAdd(a + 1, y);
#endif
}

// Split-K arrival: *ticket += 1 at GPU scope with acquire-release semantics, returning the old count. One thread
// of a CTA (or of a warpgroup) calls it right after a barrier of the threads whose partial sums it announces: the
// release is cumulative through the barrier (every write those threads made before it is ordered before the
// ticket), and the acquire orders the last arrival's later reads, which its threads make after the next barrier,
// after every other arrival's writes. One instruction where a fence before and after a relaxed atomic (or a fence
// in every thread) did the same (session 33: 2-5% of a split-K weight-only GEMM call, docs/gemm.md).
__device__ __forceinline__ unsigned ticket_arrive(unsigned* ticket) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(ticket) : "memory");
  return old;
}
__device__ __forceinline__ int ticket_arrive(int* ticket) {
  return static_cast<int>(ticket_arrive(reinterpret_cast<unsigned*>(ticket)));
}

// The split-K arrival of a group of threads (a CTA, or the consumer warpgroups of a persistent CTA) that has just
// written its partial sums: bar() synchronizes the group, its leader takes the ticket and writes through the
// shared `flag` whether the group is the last of `splits` to arrive, and after a second bar() every thread reads
// it. Returns true in every thread of the last group, which may then read every split's partials (ticket_arrive
// above gives the ordering). A kernel that arrives again with the same flag (a persistent one) must synchronize the
// group once more after this returns, so that no thread reads the next arrival's flag. The weight-only GEMM, W8A8
// (mma and wgmma kernels) and W4A8 kernels use it (five places wrote the sequence out until session 34).
template <class T, class Bar>
__device__ __forceinline__ bool split_arrive(T* ticket, int splits, bool leader, int* flag, Bar&& bar) {
  bar();
  if (leader) *flag = ticket_arrive(ticket) == static_cast<T>(splits - 1);
  bar();
  return *flag != 0;
}

}  // namespace qdec::ptx
