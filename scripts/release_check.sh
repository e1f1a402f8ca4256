#!/bin/sh
# The slow reproducibility check (docs/release.md): builds the release twice
# from scratch, each time in a fresh build folder, and requires the same
# SHA256SUMS (every tarball and wheel byte for byte), then tests it
# (scripts/release_test.sh: the aarch64 binary under qemu too). Run before a
# release, and before stopping work that touched the build; CI runs the quick
# form (one build of x86_64 alone, tested).
#
#   scripts/release_check.sh [DIR]     (default: dist-check/; DIR/1 and DIR/2)
set -eu
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
DIR="${1:-dist-check}"
rm -rf "$DIR/1" "$DIR/2"
for n in 1 2; do
  echo "== release_check: build $n"
  ./scripts/release.sh "$DIR/$n"
done
if cmp -s "$DIR/1/SHA256SUMS" "$DIR/2/SHA256SUMS"; then
  echo "== release_check: both builds have the same bytes"
  cat "$DIR/1/SHA256SUMS"
else
  echo "release_check: FAILED: the two builds differ" >&2
  diff "$DIR/1/SHA256SUMS" "$DIR/2/SHA256SUMS" >&2 || true
  exit 1
fi
./scripts/release_test.sh "$DIR/1"
