#!/usr/bin/env bash
# One-step set-up: install missing build dependencies (Debian packages), then configure and build qdec
# (Release) into build/. Extra CMake arguments: QDEC_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=80;90a".
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs="cmake ninja-build g++ libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev libopenblas-dev"
missing=""
if command -v dpkg-query >/dev/null 2>&1; then
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
fi
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  # A machine without network (the GPU machine) may have the libraries from elsewhere: CMake says if not.
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq $missing; } ||
    echo "setup: warning: could not install$missing; continuing (CMake will name anything still missing)"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# shellcheck disable=SC2086
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${QDEC_CMAKE_ARGS:-}
cmake --build build -j "${QDEC_JOBS:-$(nproc)}"
