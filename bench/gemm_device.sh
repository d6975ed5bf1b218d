#!/usr/bin/env bash
# On the GPU machine: build the GEMM targets only (qdec_tests, bench_gemm), run the GEMM/conv tests (sharded
# over the CPU cores), the GEMM benchmark and the cuDNN conv peer. Logs and JSON go to $OUT (or ./device-out).
# Usage: bench/gemm_device.sh [stage...]   stages: build test bench torch sanitize (default: the first four)
# TEST_TARGET=qdec_tests runs the GEMM tests from the full suite binary (default: qdec_gemm_tests, the GEMM
# tests alone, which builds without the rest of the suite).
# BENCH_ARGS adds options to bench_gemm (e.g. "--shapes 4096x4096 --m 1,16").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
stages="${*:-build test bench torch}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
for s in $stages; do
  case "$s" in
    build)
      pkgs="libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev"
      missing=""
      for p in $pkgs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
      done
      [ -n "$missing" ] && { apt-get update -qq && apt-get install -y -qq $missing; } > "$OUT/apt.log" 2>&1
      export PATH="/usr/local/cuda/bin:$PATH"
      { cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release &&
        ninja -C build-dev -j16 ${TEST_TARGET:-qdec_gemm_tests} bench_gemm; } > "$OUT/build.log" 2>&1 ||
        { grep -E "error" -A3 "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
      grep -E "spill" "$OUT/build.log" | grep -i gemm | head -5
      echo "build ok" ;;
    test)
      n=16; pids=()
      filter="${TEST_FILTER:-WeightFormats*:*GemmGpu*:*ConvGpu*:GemmErrors*:ConvErrors*}"
      for i in $(seq 0 $((n - 1))); do
        GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout 60 build-dev/${TEST_TARGET:-qdec_gemm_tests} --gtest_brief=1 \
          --gtest_filter="$filter" > "$OUT/test_shard_$i.log" 2>&1 &
        pids+=($!)
      done
      fail=0
      for p in "${pids[@]}"; do wait "$p" || fail=1; done
      cat "$OUT"/test_shard_*.log > "$OUT/tests.log"; rm -f "$OUT"/test_shard_*.log
      grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.log" | sort | uniq -c
      grep -E "FAILED|Failure|rel L2|Expected|Which is|QDEC_TEST_SEED|path " "$OUT/tests.log" | head -40
      echo "tests fail=$fail" ;;
    bench)
      timeout 90 build-dev/bench_gemm --conv --json "$OUT/gemm.json" ${BENCH_ARGS:-} > "$OUT/gemm.txt" 2>&1
      echo "bench rc=$?"
      cat "$OUT/gemm.txt" ;;
    torch)
      PYTHONUNBUFFERED=1 timeout 40 python3 bench/torch_conv.py --qdec-json "$OUT/gemm.json" \
        > "$OUT/torch_conv.txt" 2>&1; echo "torch rc=$?"
      cat "$OUT/torch_conv.txt" ;;
    sanitize)
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 build-dev/${TEST_TARGET:-qdec_gemm_tests} \
        --gtest_filter="${SAN_FILTER:-*GemmGpu*m17*:*GemmGpu*_s3_*:*ConvGpu*int4_g32_b2*}" --gtest_brief=1 \
        > "$OUT/memcheck.log" 2>&1
      echo "memcheck rc=$?"; tail -6 "$OUT/memcheck.log" ;;
  esac
done
