#!/bin/sh
# The slow checks that need the `models` judge (scripts/judges.sh: a sid root
# with torchvision and transformers, about 2 GB, not made by CI): real
# architectures fitted by `fix --like` (tests/interop/test_fit.py runs its
# torchvision cases there). Run before a release, or after changing the fit:
#
#   scripts/models-check.sh [BUILD_DIR]     (default: build)
set -eu
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
./scripts/judges.sh provision models
CKPTFIX_BIN="$build/ckptfix" CKPTFIX_JUDGE_BIND="$build" \
  ./scripts/judges.sh run models /usr/bin/python3 tests/interop/test_fit.py -v
