# W4A8 (QoQ) GEMM (issue 5; docs/int8_w4a8.md). Owned by the W4A8 work; included from CMakeLists.txt.
target_sources(qdec PRIVATE src/int8gemm/w4a8_gemm.cu src/int8gemm/w4a8_dequant.cu
                            src/int8gemm/w4a8_wgmma.cu)
# Timing studies only: the wgmma kernel records its phase boundaries (%globaltimer) for the w4a8_timeline probe
# (docs/int8_w4a8.md, session 21). Off in every other build.
option(QDEC_W4A8_TIMELINE "Build the W4A8 wgmma kernel with its phase timeline (w4a8_timeline probe)" OFF)
if(QDEC_W4A8_TIMELINE)
  set_property(SOURCE src/int8gemm/w4a8_wgmma.cu APPEND PROPERTY COMPILE_DEFINITIONS QDEC_W4A8_TIMELINE=1)
endif()
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
  if(QDEC_W4A8_TIMELINE)
    # Where a wgmma W4A8 call's time goes, CTA by CTA (docs/int8_w4a8.md, session 21).
    add_executable(w4a8_timeline EXCLUDE_FROM_ALL bench/w4a8_timeline.cu)
    target_include_directories(w4a8_timeline PRIVATE bench src)
    target_link_libraries(w4a8_timeline PRIVATE qdec)
  endif()
endif()
