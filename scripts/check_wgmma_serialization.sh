#!/usr/bin/env bash
# Fails if ptxas serializes the wgmma of any sm_90a kernel: ptxas reports that only as an info line under -v
# ("(C751x) Potential Performance Loss: wgmma.mma_async instructions are serialized ..."), the build passes, and the
# kernel then waits for each wgmma before the next (WARPGROUP.DEPBAR.LE gsb0, 0x0): a variant of the weight-only wgmma
# kernel serialized so took 1.07-2.08x its time (H200, session 43, docs/gemm.md). Run by ctest (WgmmaPipelined) where
# the build targets sm_90a. Usage: scripts/check_wgmma_serialization.sh <nvcc> [source root]
set -uo pipefail
nvcc="${1:?usage: check_wgmma_serialization.sh <nvcc> [source root]}"
root="${2:-$(cd "$(dirname "$0")/.." && pwd)}"
sources="src/gemm/wgmma_a16.cu src/int8gemm/w8a8_wgmma.cu src/int8gemm/w4a8_wgmma.cu"
status=0
for s in $sources; do
  log=$("$nvcc" -std=c++20 -O3 -DNDEBUG -DQDEC_HAS_SM90A=1 -I"$root/include" -I"$root/src" --expt-relaxed-constexpr \
    -arch=sm_90a -Xptxas -v -c "$root/$s" -o /dev/null 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$s: nvcc failed (rc $rc)"
    echo "$log" | tail -20
    status=1
    continue
  fi
  bad=$(echo "$log" | grep -E "\(C751[0-9]\)" || true)
  if [ -n "$bad" ]; then
    echo "$s: ptxas serializes wgmma:"
    echo "$bad" | sed -E 's/^ptxas info *: */  /' | head -20
    status=1
  else
    echo "$s: wgmma pipelined (no C751x report)"
  fi
done
exit $status
