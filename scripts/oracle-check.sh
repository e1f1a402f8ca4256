#!/bin/sh
# CPython's reading of every pickle in the unpickler's fuzz corpora
# (build-fuzz/fuzz/corpus, made by scripts/fuzz.sh) held against ckptfix's
# (tests/cli/test_pickle_oracle.py; issue 66). The last stage of
# scripts/test.sh, after scripts/fuzz.sh; a mismatch it finds becomes a
# file of tests/fuzz_regressions/ (which the ctest oracle reads).
set -eu
cd "$(dirname "$0")/.."
CKPTFIX_ORACLE_DIRS="build-fuzz/fuzz/corpus/unpickle:build-fuzz/fuzz/corpus/pickle_roundtrip:build-fuzz/fuzz/corpus/call_policy" \
  exec /usr/bin/python3 tests/cli/test_pickle_oracle.py --tool build/tests/pickle_roundtrip
