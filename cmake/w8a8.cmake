# Activation quantization kernels, W8A8 GEMMs and the INT8 benchmark (issue 5; docs/int8_gemm.md). Owned by
# the W8A8 work; included from CMakeLists.txt.
target_sources(qdec PRIVATE
  src/int8gemm/act_quant.cu
  src/int8gemm/w8a8_gemm.cu
  src/int8gemm/w8a8_block.cu
  src/int8gemm/w8a8_wgmma.cu
)
if(QDEC_BUILD_TESTS)
  target_sources(qdec_tests PRIVATE tests/test_act_quant_gpu.cpp tests/test_w8a8_gpu.cpp)
endif()
if(QDEC_BUILD_BENCH)
  add_library(qdec_int8_bench_lib bench/int8_bench.cu)
  target_include_directories(qdec_int8_bench_lib PUBLIC bench PRIVATE src)
  target_link_libraries(qdec_int8_bench_lib PUBLIC qdec fmt::fmt nlohmann_json::nlohmann_json PRIVATE CUDA::cublasLt)
  target_compile_options(qdec_int8_bench_lib PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  add_executable(bench_int8 bench/bench_int8_main.cpp)
  target_link_libraries(bench_int8 PRIVATE qdec_int8_bench_lib CLI11::CLI11)
  target_compile_options(bench_int8 PRIVATE ${QDEC_HOST_WARNINGS})
  target_sources(qdec_cli PRIVATE tools/qdec/cmd_bench_int8.cpp)
  target_link_libraries(qdec_cli PRIVATE qdec_int8_bench_lib)
  # The int8 wgmma issue-rate probe behind docs/int8_gemm.md's "kWgmma" (sm_90a; not built by default).
  add_executable(wgmma_probe EXCLUDE_FROM_ALL bench/wgmma_probe.cu)
  target_include_directories(wgmma_probe PRIVATE src)
endif()
