#!/bin/sh
# An installed ckptfix is found by an outside CMake project: install the
# build tree into a temporary prefix, build examples/ against it with
# find_package(ckptfix CONFIG REQUIRED) and default flags, run both examples
# on the CUDA-saved DataParallel training fixture, and let Python torch judge
# the result: the state dict, and the forward output of the model it went into.
#   test_install.sh BUILD_DIR SOURCE_DIR [PREFIX_PATH]
# PREFIX_PATH: where the outer build found its dependencies (CMAKE_PREFIX_PATH,
# ';'-separated: LibTorch inside a pip wheel), searched after the install.
# The judge is $CKPTFIX_PYTHON (default python3 on PATH, as on a GPU machine
# with pip's torch).
set -eu
BUILD="$1"
SRC="$2"
PREFIXES="${3:-}"
PYTHON="${CKPTFIX_PYTHON:-python3}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
test -f "$TMP/prefix/lib/cmake/ckptfix/ckptfixConfig.cmake"
test -x "$TMP/prefix/bin/ckptfix"
"$TMP/prefix/bin/ckptfix" --version

cmake -S "$SRC/examples" -B "$TMP/build" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix${PREFIXES:+;$PREFIXES}" > "$TMP/configure.log"
cmake --build "$TMP/build" > "$TMP/build.log"

FIXTURE="$SRC/fixtures/training_dp_cuda.pt"
"$TMP/build/list_tensors" "$FIXTURE" | grep -q "state_dict/module.fc.weight .*float32 .*shape \[3,8\] offset 0 on cuda:0"
"$TMP/build/load_state_dict" "$FIXTURE" "$TMP/out.pt" --key state_dict --strip module. --bf16
"$PYTHON" "$SRC/tests/install/check_example_output.py" "$FIXTURE" "$TMP/out.pt"
"$TMP/build/load_state_dict" "$FIXTURE" "$TMP/out32.pt" --key state_dict --strip module. --forward "$TMP/forward.pt"
"$PYTHON" "$SRC/tests/install/check_forward.py" "$FIXTURE" "$TMP/forward.pt"
echo "install test: ok"
