#!/usr/bin/env bash
# On the GPU machine: build, run the GPU tests (sharded over the CPU cores), the attention benchmark and
# the torch SDPA comparison. Logs and JSON go to $OUT (or ./device-out). Usage: scripts/device_check.sh [stage...]
# stages: build test bench torch sanitize (default: build test bench torch)
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
      QDEC_JOBS=16 scripts/setup.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
      grep -E "registers|spill" "$OUT/build.log" | head -0
      echo "build ok" ;;
    test)
      n=16; pids=()
      for i in $(seq 0 $((n - 1))); do
        GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i build/qdec_tests --gtest_brief=1 > "$OUT/test_shard_$i.log" 2>&1 &
        pids+=($!)
      done
      fail=0
      for p in "${pids[@]}"; do wait "$p" || fail=1; done
      cat "$OUT"/test_shard_*.log > "$OUT/tests.log"; rm -f "$OUT"/test_shard_*.log
      grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.log" | sort | uniq -c
      grep -E "FAILED|Failure|rel L2|Expected|Which is" "$OUT/tests.log" | head -60
      echo "tests fail=$fail" ;;
    bench)
      build/bench_attention --json "$OUT/bench.json" ${BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1; echo "bench rc=$?"
      cat "$OUT/bench.txt" ;;
    torch)
      PYTHONUNBUFFERED=1 python3 bench/torch_sdpa.py --qdec-json "$OUT/bench.json" --json "$OUT/torch.json" \
        > "$OUT/torch.txt" 2>&1; echo "torch rc=$?"
      tail -60 "$OUT/torch.txt" ;;
    sanitize)
      compute-sanitizer --tool memcheck --error-exitcode 3 build/qdec_tests \
        --gtest_filter="${SAN_FILTER:-*len129_s5_p64*:*unequal_s0*:Extra*}" --gtest_brief=1 > "$OUT/memcheck.log" 2>&1
      echo "memcheck rc=$?"; tail -15 "$OUT/memcheck.log" ;;
  esac
done
