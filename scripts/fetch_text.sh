#!/usr/bin/env bash
# Fetch the English prose texts of the perplexity table (docs/accuracy.md).
#
# Both ship in the PyPI wheel of gensim (4.4.0) as test data: the "Lee corpus" of Australian Broadcasting
# Corporation news articles (Lee, Pincombe & Welsh, 2005), modern English prose.
#   models/lee_background.txt  gensim/test/test_data/lee_background.cor: 300 articles, 360,082 bytes,
#                              ~80k SmolLM2 tokens -- the evaluation text of `qdec ppl`
#   models/lee_calib.txt       gensim/test/test_data/lee.cor: 50 other articles (no line in common with the
#                              first), 24,658 bytes -- the SmoothAttention calibration text of `qdec calibrate`
# pip downloads the wheel (no install, no dependencies) and the two files are extracted from it; lee.cor holds
# one Latin-1 byte (a pound sign), so it is converted to UTF-8. The results' SHA-256 are checked below; files
# already in place that match are left alone.
#
# Usage: scripts/fetch_text.sh [--wheel PATH]
#   --wheel PATH   use a gensim wheel already on disk (any platform's: the test data is the same)
# Environment: PIP (default: pip3, else pip), QDEC_MODELS_DIR (default: models).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly WHEEL_SPEC="gensim==4.4.0"
readonly EVAL_NAME="lee_background.txt"
readonly EVAL_SHA256="5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb"
readonly CALIB_NAME="lee_calib.txt"
readonly CALIB_SHA256="b524960fec6227b14427494ddb6f31106ecdea5d82f31a34a8504ad4a741c003"

models_dir="${QDEC_MODELS_DIR:-models}"
wheel=""

die() {
  echo "fetch_text: error: $*" >&2
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
      sed -n '2,16p' "$0"
      exit 0
      ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done

command -v sha256sum >/dev/null 2>&1 || die "sha256sum is required (coreutils)"
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$models_dir/$EVAL_NAME" "$EVAL_SHA256" && sha_ok "$models_dir/$CALIB_NAME" "$CALIB_SHA256"; then
  echo "fetch_text: $models_dir/$EVAL_NAME and $models_dir/$CALIB_NAME are present and verified"
  exit 0
fi

# shellcheck source=scripts/pip_wheel.sh
. scripts/pip_wheel.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "$wheel" ]; then
  pip_download_wheel fetch_text "$WHEEL_SPEC" "$tmp" "about 27 MiB"
  wheel=$(ls "$tmp"/gensim-*.whl 2>/dev/null | head -n 1)
fi
[ -n "$wheel" ] && [ -f "$wheel" ] || die "gensim wheel '$wheel' not found"

python3 - "$wheel" "$tmp/$EVAL_NAME" "$tmp/$CALIB_NAME" <<'EOF' || die "cannot extract the Lee corpus from $wheel"
import sys, zipfile
wheel, eval_out, calib_out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    data = z.read("gensim/test/test_data/lee_background.cor")
    open(eval_out, "wb").write(data)
    calib = z.read("gensim/test/test_data/lee.cor").decode("latin-1")
    open(calib_out, "wb").write(calib.encode("utf-8"))
EOF

sha_ok "$tmp/$EVAL_NAME" "$EVAL_SHA256" || die "$EVAL_NAME does not match sha256 $EVAL_SHA256; not installed"
sha_ok "$tmp/$CALIB_NAME" "$CALIB_SHA256" || die "$CALIB_NAME does not match sha256 $CALIB_SHA256; not installed"
mkdir -p "$models_dir"
mv -f "$tmp/$EVAL_NAME" "$models_dir/$EVAL_NAME"
mv -f "$tmp/$CALIB_NAME" "$models_dir/$CALIB_NAME"
echo "fetch_text: wrote $models_dir/$EVAL_NAME and $models_dir/$CALIB_NAME (sha256 verified)"
