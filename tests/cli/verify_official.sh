#!/usr/bin/env bash
# The official golden file: float64 numbers computed by facebookresearch/DiT's own code for a tiny
# DiT of hidden 64 (7.6 MB, too large to ship; tests/data/dit_tiny_golden.h5 is a narrower file
# from the same code). CI keeps it at ../shared/golden/dit_tiny.h5 beside the clone; this checks
# every group of it with one rank, and skips (exit 77) saying why when the file is not there.
# Usage: verify_official.sh FILE   (DIT_MP names the binary)
set -euo pipefail
DIT_MP=${DIT_MP:?set DIT_MP to the dit_mp binary}
GOLDEN=${1:?give the official golden file}
if [ ! -f "$GOLDEN" ]; then
  echo "SKIP: $GOLDEN does not exist (the official DiT golden file lives in shared/golden beside the clone)"
  exit 77
fi
exec "$DIT_MP" verify --golden "$GOLDEN"
