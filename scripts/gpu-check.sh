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
#
# Time on that machine is short and a run may be cut off, so the steps go
# in order of what they tell: the build, the tests that use the GPU, the
# loader bench, the GPU load test's own report, the rewrites against cp on a
# second machine's file systems, the GPU load test's bench, then the rest of
# the suite (which a 560 s call did not finish on 2026-11-27: rerun the
# tests it did not reach). CKPTFIX_GPU_STEPS
# (names separated by spaces) runs only those steps after the build, e.g.
# CKPTFIX_GPU_STEPS="load-bench copy-bench".
# Each step's output goes to LOG_DIR/STEP.log and one line per step to
# LOG_DIR/summary.txt (LOG_DIR: $CKPTFIX_GPU_LOG, else $OUT where the
# device tool sets it, else BUILD_DIR/gpu-check). Exit status: 1 if any
# step failed.
set -u
cd "$(dirname "$0")/.."
BUILD="${1:-/tmp/ckptfix-gpu}"
LOG="${CKPTFIX_GPU_LOG:-${OUT:-$BUILD/gpu-check}}"
mkdir -p "$LOG"
failed=0

# step NAME COMMAND...: runs COMMAND, its output to LOG/NAME.log and the
# terminal, and says how it ended in LOG/summary.txt.
step() {
  name=$1
  shift
  case " machine build ${CKPTFIX_GPU_STEPS:-$name} " in
    *" $name "*) ;;
    *) echo "$name: skipped (not in CKPTFIX_GPU_STEPS)" | tee -a "$LOG/summary.txt"; return 0 ;;
  esac
  began=$(date +%s)
  echo "== $name: $*"
  { "$@" 2>&1; echo "rc=$?" >"$LOG/$name.rc"; } | tee "$LOG/$name.log"
  rc=$(sed 's/rc=//' "$LOG/$name.rc")
  rm -f "$LOG/$name.rc"
  echo "$name: exit $rc after $(($(date +%s) - began)) s" | tee -a "$LOG/summary.txt"
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

if [ -d .gpu/deps/usr ]; then
  cp -rn .gpu/deps/usr/* /usr/ && ldconfig
fi
export PKG_CONFIG_PATH="${PKG_CONFIG_PATH:-/usr/lib/x86_64-linux-gnu/pkgconfig}"
PYTHON="$(command -v python3)"
TORCH_PREFIX="$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
step machine sh -c "nproc; free -g | head -2; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; \
\"$PYTHON\" -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())'"
step build sh -c "cmake -S . -B \"$BUILD\" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=\"$TORCH_PREFIX\" \
  -DCKPTFIX_JUDGES=local -DCKPTFIX_PYTHON=\"$PYTHON\" -DCKPTFIX_BUILD_BENCH=ON && cmake --build \"$BUILD\" -j $(nproc)" \
  || exit 1

# The tests that use the GPU (they skip with a message where none is usable).
GPU_TESTS='Cuda|Gpu|cli_verify|python_api|LoadStateDict|LoadInto'
export CKPTFIX_REQUIRE_JUDGES=1
step gpu-tests ctest --test-dir "$BUILD" -j "$(nproc)" --output-on-failure -R "$GPU_TESTS"

# The loaders onto the GPU, Python's (ckptfix.load, docs/python.md) and C++'s
# (ckptfix::libtorch::load_state_dict, issue 36: target >= 14 GB/s), against
# torch.load(mmap=True) and safetensors: 4 GiB, page cache warm.
step load-bench "$PYTHON" bench/python_load.py --ckptfix "$BUILD/ckptfix" \
  --libtorch-load "$BUILD/bench/ckptfix_libtorch_load" --device cuda --size-mib 4096 --rounds 3

# The GPU load test in ckptfix's own words (issue 26): one verified 1 GiB
# job with --gpu require and off, whole-process times and the JSON report's
# verification.gpu (the device's own time and GB/s).
step gpu-stage-report "$PYTHON" bench/gpu_stage.py --python "$PYTHON" --ckptfix "$BUILD/ckptfix" --dir "$BUILD"

# The rewrites against cp (issue 36, part 1: <= 1.15x cp verified, <= 1.05x
# with --no-verify, the cast against cp of its output's size) on this
# machine's disk and its tmpfs: a second machine, with 16 cores where the
# development machine has 2. 1 GiB, fresh outputs, sync before each command.
COPY_DIRS="$BUILD/copy-bench"
mkdir -p "$COPY_DIRS"
# /dev/shm only where it has room for the input, the half file and an output
# (a container's is often 64 MiB).
if [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 4194304 ] 2>/dev/null; then
  mkdir -p /dev/shm/ckptfix-copy-bench && COPY_DIRS="$COPY_DIRS,/dev/shm/ckptfix-copy-bench"
fi
step copy-bench "$PYTHON" bench/copy_speed.py --python "$PYTHON" --ckptfix "$BUILD/ckptfix" --dirs "$COPY_DIRS" \
  --rounds 3 --jobs strip-prefix,strip-nv,convert,cast,cast-nv

# The GPU load test of verified writes (issue 26: the 4 GiB job with the
# GPU stage <= 1.10x the same job with --gpu off), the same binary both ways.
step gpu-stage-bench "$PYTHON" bench/bench.py --python "$PYTHON" --ckptfix "$BUILD/ckptfix" --sizes 4 \
  --jobs strip-prefix --saved-on cuda:0 --peers cp --runs 3 --args="--gpu require" \
  --baseline "$BUILD/ckptfix" --baseline-args="--gpu off"

step other-tests ctest --test-dir "$BUILD" -j "$(nproc)" --output-on-failure -E "$GPU_TESTS"
exit "$failed"
