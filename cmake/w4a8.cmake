# W4A8 (QoQ) GEMM (issue 5; docs/int8_gemm.md). Owned by the W4A8 work; included from CMakeLists.txt.
target_sources(qdec PRIVATE src/int8gemm/w4a8_gemm.cu)
