#!/bin/sh
# The slow checks that need the `models` judge (scripts/judges.sh: a sid root
# with torchvision, transformers and accelerate, about 2 GB, not made by CI):
# real architectures fitted by `fix --like` (tests/interop/test_fit.py runs
# its torchvision cases there), and transformers' Trainer resuming from a
# folder `weights-only -r` rewrote (tests/interop/test_trainer_folder.py).
# Run before a release, or after changing the fit or weights-only:
#
#   scripts/models-check.sh [BUILD_DIR]     (default: build)
set -eu
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
./scripts/judges.sh provision models
CKPTFIX_BIN="$build/ckptfix" CKPTFIX_JUDGE_BIND="$build" \
  ./scripts/judges.sh run models /usr/bin/python3 tests/interop/test_fit.py -v
# A real Trainer folder through weights-only, and the Trainer resuming from it (issue 67).
CKPTFIX_BIN="$build/ckptfix" CKPTFIX_JUDGE_BIND="$build" \
  ./scripts/judges.sh run models /usr/bin/python3 tests/interop/test_trainer_folder.py -v
