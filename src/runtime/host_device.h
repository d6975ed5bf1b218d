// QDEC_HD marks small functions shared by the CPU ground truth and the kernels (one definition, so the
// two cannot drift apart): __host__ __device__ under nvcc, plain inline elsewhere.
#pragma once

#if defined(__CUDACC__)
#define QDEC_HD __host__ __device__ __forceinline__
#else
#define QDEC_HD inline
#endif
