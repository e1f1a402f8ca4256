#!/bin/sh
# Builds everything on a GPU machine with pip's torch and runs the whole
# suite there, judged by that torch (../shared/gpu/README.md describes the
# machine). From the checkout's root, on that machine:
#
#   scripts/gpu-check.sh [BUILD_DIR]        (default /tmp/ckptfix-gpu)
#
# The machine lacks some build dependencies and has no package registry:
# make them here with ../shared/gpu/make-deps.sh .gpu/deps (an ignored
# folder that travels with the checkout); this script copies them into /usr.
# LibTorch comes from the torch wheel, the CUDA Toolkit from /usr/local/cuda,
# and the only judge is the machine's python3 (CKPTFIX_JUDGES=local).
set -eu
cd "$(dirname "$0")/.."
BUILD="${1:-/tmp/ckptfix-gpu}"
if [ -d .gpu/deps/usr ]; then
  cp -rn .gpu/deps/usr/* /usr/ && ldconfig
fi
export PKG_CONFIG_PATH="${PKG_CONFIG_PATH:-/usr/lib/x86_64-linux-gnu/pkgconfig}"
PYTHON="$(command -v python3)"
TORCH_PREFIX="$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
echo "gpu-check: judge $PYTHON, torch $("$PYTHON" -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DCKPTFIX_JUDGES=local -DCKPTFIX_PYTHON="$PYTHON" -DCKPTFIX_BUILD_BENCH=ON
cmake --build "$BUILD" -j "$(nproc)"
CKPTFIX_REQUIRE_JUDGES=1 ctest --test-dir "$BUILD" -j "$(nproc)" --output-on-failure

# The loaders onto the GPU, Python's (ckptfix.load, docs/python.md) and C++'s
# (ckptfix::torch::load_state_dict, issue 36: target >= 14 GB/s), against
# torch.load(mmap=True) and safetensors: 4 GiB, page cache warm.
"$PYTHON" bench/python_load.py --ckptfix "$BUILD/ckptfix" --libtorch-load "$BUILD/bench/ckptfix_libtorch_load" \
  --device cuda --size-mib 4096 --rounds 3
