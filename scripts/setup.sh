#!/bin/sh
# Installs what ckptfix needs on Debian bookworm (as root, or with sudo) and
# builds it into build/. Safe to run again: installed packages are skipped.
set -eu
cd "$(dirname "$0")/.."

# Build tools and libraries, and for the tests real PyTorch (python3-torch,
# run with /usr/bin/python3) and LibTorch. The CUDA Toolkit is used when
# present in /usr/local/cuda; it is not an apt package here. clang and its
# libFuzzer runtime build the fuzz targets (scripts/fuzz.sh); omegaconf lets
# the tests save real OmegaConf configs, a common non-tensor payload.
# python3-venv, qemu-user-static and podman test the release (a wheel in a
# fresh venv, the aarch64 binary, the container image: docs/release.md).
# xfsprogs and btrfs-progs make the loop file systems scripts/fs_check.sh
# copies on (blocks shared with the input there).
PACKAGES="g++ cmake ninja-build pkg-config git time python3-venv qemu-user-static podman xfsprogs btrfs-progs
  libcli11-dev nlohmann-json3-dev zlib1g-dev libdeflate-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libfuzzer-14-dev
  python3-torch python3-numpy python3-omegaconf libtorch-dev"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing$missing"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

BUILD_TYPE="${BUILD_TYPE:-Release}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE"
cmake --build build
