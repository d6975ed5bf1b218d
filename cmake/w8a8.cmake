# Activation quantization kernels, W8A8 GEMMs and the INT8 benchmark (issue 5; docs/int8_gemm.md). Owned by
# the W8A8 work; included from CMakeLists.txt.
