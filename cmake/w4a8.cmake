# W4A8 (QoQ) GEMM (issue 5; docs/int8_w4a8.md). Owned by the W4A8 work; included from CMakeLists.txt.
target_sources(qdec PRIVATE src/int8gemm/w4a8_gemm.cu src/int8gemm/w4a8_dequant.cu
                            src/int8gemm/w4a8_wgmma.cu)
if(QDEC_BUILD_TESTS)
  target_sources(qdec_tests PRIVATE tests/test_w4a8_prepack.cpp tests/test_w4a8_gpu.cpp)
  # The W4A8 tests alone (not registered with ctest; qdec_tests runs them): a quick build for the GPU machine.
  add_executable(qdec_w4a8_tests EXCLUDE_FROM_ALL tests/test_main.cpp tests/test_w4a8_prepack.cpp
                 tests/test_w4a8_gpu.cpp)
  target_include_directories(qdec_w4a8_tests PRIVATE tests src)
  target_link_libraries(qdec_w4a8_tests PRIVATE qdec GTest::gtest fmt::fmt)
  target_compile_options(qdec_w4a8_tests PRIVATE ${QDEC_HOST_WARNINGS})
endif()
if(QDEC_BUILD_BENCH)
  # Timing probe for the W4A8 work (docs/int8_w4a8.md): W4A8 vs cuBLASLt INT8 / BF16 and qdec W4A16.
  add_executable(w4a8_probe EXCLUDE_FROM_ALL bench/w4a8_probe.cu)
  target_include_directories(w4a8_probe PRIVATE bench src)
  target_link_libraries(w4a8_probe PRIVATE qdec CUDA::cublasLt)
endif()
