#!/bin/sh
# Sets everything up and runs every test: the unit tests and the interop
# tests judged by real torch (ctest), then the unit and interop tests again
# on a build with AddressSanitizer and UndefinedBehaviorSanitizer.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh

echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

echo "== tests (AddressSanitizer + UndefinedBehaviorSanitizer build)"
# LibTorch itself is not built with the sanitizers, so its bridge is tested in
# the release build only.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCKPTFIX_SANITIZE=address,undefined -DCKPTFIX_BUILD_BENCH=OFF -DCKPTFIX_WITH_TORCH=OFF
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)"
echo "== all tests passed"
