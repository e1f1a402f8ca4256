#!/bin/sh
# Builds the release artifacts of this checkout (docs/release.md):
#
#   scripts/release.sh [DIR]          (default: dist/)
#
# writes into DIR, for VERSION (CMakeLists.txt) and ARCH x86_64 and aarch64:
#
#   ckptfix-VERSION-linux-ARCH.tar.gz   ckptfix-VERSION-linux-ARCH/{bin/ckptfix,
#                                       LICENSE,README.md,licenses/}
#   ckptfix-VERSION-py3-none-manylinux_2_31_ARCH.whl
#                                       pip puts `ckptfix` on PATH (and the
#                                       `ckptfix` Python package)
#   ckptfix-VERSION-container-ARCH.tar.gz
#                                       the build context of Containerfile: the
#                                       binary and the C library it links
#   ckptfix-VERSION-cxx-ARCH.tar.gz     the C++ package (docs/library.md):
#                                       include/, lib/libckptfix.a (the core
#                                       library with zlib, libdeflate and xxHash
#                                       in it), lib/cmake/ckptfix/, and the
#                                       LibTorch bridge's sources, which its
#                                       CMake package compiles in the consumer's
#                                       build against the consumer's LibTorch
#   SHA256SUMS
#
# The binaries need nothing but glibc >= 2.31 (Debian 11, Ubuntu 20.04, RHEL
# 9 and newer): they are built in a Debian bullseye root (made once with
# mmdebstrap from Debian's mirror, and kept), libstdc++, libgcc, zlib,
# libdeflate and xxHash linked statically. x86_64 has the GPU load test with
# the CUDA runtime linked statically (the Toolkit in /usr/local/cuda);
# aarch64 is cross-built with Debian's g++-aarch64-linux-gnu, without it
# (no CUDA Toolkit for arm64 here: docs/release.md). The same commit gives
# the same bytes: timestamps come from the commit (SOURCE_DATE_EPOCH), no
# build path enters a binary, archives are written in a fixed order with
# fixed owners. scripts/release_check.sh builds twice and compares.
#
# Environment: CKPTFIX_RELEASE_ROOT (the bullseye root; default
# /var/cache/ckptfix/release/bullseye), CKPTFIX_RELEASE_WORK (the build
# folder; default /var/tmp/ckptfix-release, emptied first),
# CKPTFIX_CUDA (the CUDA Toolkit; default /usr/local/cuda, none: no GPU
# stage in the x86_64 binary either), CKPTFIX_RELEASE_ARCHES (default
# "x86_64 aarch64"; CI builds x86_64 alone, scripts/test.sh). Needs root
# (or sudo), like apt-get.
set -eu
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
OUT="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
ROOT="${CKPTFIX_RELEASE_ROOT:-/var/cache/ckptfix/release/bullseye}"
WORK="${CKPTFIX_RELEASE_WORK:-/var/tmp/ckptfix-release}"
ARCHES="${CKPTFIX_RELEASE_ARCHES:-x86_64 aarch64}"
for arch in $ARCHES; do
  case "$arch" in
    x86_64|aarch64) ;;
    *) echo "release: CKPTFIX_RELEASE_ARCHES names '$arch'; it takes x86_64 and aarch64" >&2; exit 2 ;;
  esac
done
CUDA="$(readlink -f "${CKPTFIX_CUDA:-/usr/local/cuda}" 2>/dev/null || true)"

VERSION="$(sed -n 's/^project(ckptfix VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)"
COMMIT="$(git rev-parse --short=12 HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release: the checkout has uncommitted changes; the binaries name commit $COMMIT-dirty" >&2
  COMMIT="$COMMIT-dirty"
fi
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)"
export SOURCE_DATE_EPOCH
echo "release: ckptfix $VERSION, commit $COMMIT, into $OUT"

# The build root: bullseye's g++ 10 and glibc 2.31, its cross toolchain, and
# every library's static archive for both architectures.
PACKAGES="g++,cmake,ninja-build,pkg-config,make,file,zlib1g-dev,libdeflate-dev,libxxhash-dev,\
g++-aarch64-linux-gnu,zlib1g-dev:arm64,libdeflate-dev:arm64,libxxhash-dev:arm64"
./scripts/debian_root.sh make "$ROOT" bullseye "$PACKAGES" --variant=apt --architectures=amd64,arm64

rm -rf "$WORK"
mkdir -p "$WORK/deps"
# CLI11 and nlohmann/json are header-only (bullseye has no CLI11): the
# versions this machine builds with, copied in.
for pkg in libcli11-dev nlohmann-json3-dev; do
  dpkg -L "$pkg" >/dev/null 2>&1 || { echo "release: $pkg is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
  dpkg -L "$pkg" | while read -r f; do
    [ -f "$f" ] || continue
    mkdir -p "$WORK/deps$(dirname "$f")"
    cp "$f" "$WORK/deps$f"
  done
done

binds="$WORK"
cuda_args="-DCKPTFIX_WITH_CUDA=OFF"
if [ -n "$CUDA" ] && [ -x "$CUDA/bin/nvcc" ]; then
  binds="$binds:$CUDA"
  cuda_args="-DCKPTFIX_WITH_CUDA=ON -DCUDAToolkit_ROOT=$CUDA -DCMAKE_CUDA_COMPILER=$CUDA/bin/nvcc"
else
  echo "release: no CUDA Toolkit (${CKPTFIX_CUDA:-/usr/local/cuda}): the x86_64 binary has no GPU load test" >&2
fi

# build ARCH CMAKE_ARGS...: the ckptfix binary, in $WORK/build-ARCH.
build() {
  arch="$1"
  shift
  echo "== release: building ckptfix for $arch"
  CKPTFIX_JUDGE_BIND="$binds" ./scripts/debian_root.sh run "$ROOT" sh -euc '
    src="$1" build="$2" commit="$3" deps="$4"
    shift 4
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPTFIX_RELEASE=ON -DBUILD_SHARED_LIBS=OFF \
      -DCKPTFIX_BUILD_TESTS=OFF -DCKPTFIX_BUILD_BENCH=OFF -DCKPTFIX_WITH_TORCH=OFF -DCKPTFIX_COMMIT="$commit" \
      -DCMAKE_PREFIX_PATH="$deps/usr" "$@" >"$build.configure.log" || { cat "$build.configure.log"; exit 1; }
    cmake --build "$build" --target ckptfix
    # The C++ package'"'"'s stand-in for the GPU load test (CMakeLists.txt), where there is one.
    if grep -q "ckptfix_gpu_none" "$build/build.ninja"; then cmake --build "$build" --target ckptfix_gpu_none; fi
  ' release "$REPO" "$WORK/build-$arch" "$COMMIT" "$WORK/deps" "$@"
}
for arch in $ARCHES; do
  if [ "$arch" = x86_64 ]; then
    # shellcheck disable=SC2086
    build x86_64 $cuda_args
  else
    build aarch64 -DCKPTFIX_WITH_CUDA=OFF -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/aarch64-linux-gnu.cmake"
  fi
done

# The licenses of what is linked in, from the packages they came from.
licenses="$WORK/licenses"
mkdir -p "$licenses"
for pkg in zlib1g libdeflate0 libxxhash0 libstdc++6 libgcc-s1; do
  cp "$ROOT/usr/share/doc/$pkg/copyright" "$licenses/$pkg.copyright"
done
cp /usr/share/doc/libcli11-dev/copyright "$licenses/cli11.copyright"
# The CUDA EULA: at the Toolkit's top (NVIDIA's installers) or with its
# runtime's metadata (a Toolkit assembled from NVIDIA's wheels, as here).
cuda_eula=""
if [ -n "$CUDA" ]; then
  for f in "$CUDA/EULA.txt" "$CUDA"/dist-info/nvidia_cuda_runtime-*/licenses/License.txt; do
    if [ -f "$f" ]; then cuda_eula="$f"; break; fi
  done
  [ -n "$cuda_eula" ] || { echo "release: no CUDA EULA found in $CUDA to ship beside its runtime" >&2; exit 1; }
fi
cp /usr/share/doc/nlohmann-json3-dev/copyright "$licenses/nlohmann-json.copyright"

# in_root PATH: PATH of the root as a file on this machine, its symbolic links
# followed inside the root (glibc's are absolute: /lib64/ld-linux-x86-64.so.2
# -> /lib/x86_64-linux-gnu/ld-2.31.so).
in_root() {
  p="$1"
  while [ -L "$ROOT$p" ]; do
    target="$(readlink "$ROOT$p")"
    case "$target" in
      /*) p="$target" ;;
      *) p="$(dirname "$p")/$target" ;;
    esac
  done
  echo "$ROOT$p"
}

# archive DIR NAME: DIR/NAME as a reproducible NAME.tar.gz in $OUT.
archive() {
  tar -C "$1" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --mode='u+rwX,go+rX,go-w' --format=gnu -cf - "$2" | gzip -9n >"$OUT/$2.tar.gz"
}

rm -f "$OUT"/ckptfix-*.tar.gz "$OUT"/ckptfix-*.whl "$OUT/SHA256SUMS"
for arch in $ARCHES; do
  name="ckptfix-$VERSION-linux-$arch"
  stage="$WORK/stage/$name"
  mkdir -p "$stage/bin" "$stage/licenses"
  cp "$WORK/build-$arch/ckptfix" "$stage/bin/ckptfix"
  cp LICENSE README.md "$stage/"
  cp "$licenses"/* "$stage/licenses/"
  if [ "$arch" = x86_64 ] && [ -n "$cuda_eula" ]; then
    cp "$cuda_eula" "$stage/licenses/cuda-runtime.EULA.txt"  # the CUDA runtime is linked in
  fi
  archive "$WORK/stage" "$name"

  python3 scripts/make_wheel.py --binary "$stage/bin/ckptfix" --version "$VERSION" \
    --platform "manylinux_2_31_$arch" --out-dir "$OUT" --readme README.md --package-dir python/ckptfix \
    --license LICENSE $(for f in "$stage"/licenses/*; do printf -- '--license %s ' "$f"; done)

  # The container's build context (Containerfile): the binary and the parts
  # of bullseye's glibc it loads, at their paths; nothing else.
  ctx="ckptfix-$VERSION-container-$arch"
  rootfs="$WORK/container/$ctx"
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/share/doc/ckptfix" "$rootfs/tmp"
  cp "$stage/bin/ckptfix" "$rootfs/usr/local/bin/ckptfix"
  cp -r LICENSE "$stage/licenses" "$rootfs/usr/local/share/doc/ckptfix/"
  multiarch="$arch-linux-gnu"
  loader="$( [ "$arch" = x86_64 ] && echo lib64/ld-linux-x86-64.so.2 || echo lib/ld-linux-aarch64.so.1 )"
  for lib in "$loader" "lib/$multiarch/libc.so.6" "lib/$multiarch/libm.so.6" "lib/$multiarch/libpthread.so.0" \
             "lib/$multiarch/libdl.so.2" "lib/$multiarch/librt.so.1"; do
    mkdir -p "$rootfs/$(dirname "$lib")"
    cp "$(in_root "/$lib")" "$rootfs/$lib"
  done
  archive "$WORK/container" "$ctx"

  # The C++ package. Its lib/libckptfix.a is the binary's core library (built
  # position independent, CMakeLists.txt) merged with the static libraries it
  # links, so that a consumer needs nothing but the C++ runtime; on x86_64 the
  # GPU load test is swapped for its no-CUDA twin (a CUDA runtime of ours in a
  # LibTorch program would meet LibTorch's).
  cxx="ckptfix-$VERSION-cxx-$arch"
  pkg="$WORK/cxx/$cxx"
  mkdir -p "$pkg/include" "$pkg/lib/cmake/ckptfix" "$pkg/share/ckptfix/libtorch" "$pkg/licenses"
  cp -r include/ckptfix "$pkg/include/"
  cp src/libtorch/*.cc src/libtorch/*.h "$pkg/share/ckptfix/libtorch/"
  cp cmake/package/ckptfixConfig.cmake "$WORK/build-$arch/ckptfixConfigVersion.cmake" "$pkg/lib/cmake/ckptfix/"
  cp LICENSE README.md "$pkg/"
  cp "$licenses"/*.copyright "$pkg/licenses/"
  ar="$( [ "$arch" = x86_64 ] && echo ar || echo aarch64-linux-gnu-ar )"
  lib="/usr/lib/$arch-linux-gnu"
  {
    echo "CREATE $pkg/lib/libckptfix.a"
    echo "ADDLIB $WORK/build-$arch/libckptfix.a"
    if [ -f "$WORK/build-$arch/CMakeFiles/ckptfix_gpu_none.dir/src/bytes/gpu_none.cc.o" ]; then
      echo "DELETE gpu_cuda.cu.o"
      echo "ADDMOD $WORK/build-$arch/CMakeFiles/ckptfix_gpu_none.dir/src/bytes/gpu_none.cc.o"
    fi
    echo "ADDLIB $lib/libz.a"
    echo "ADDLIB $lib/libdeflate.a"
    echo "ADDLIB $lib/libxxhash.a"
    echo "SAVE"
    echo "END"
  } >"$WORK/$cxx.mri"
  CKPTFIX_JUDGE_BIND="$WORK" ./scripts/debian_root.sh run "$ROOT" sh -euc '"$1" -M <"$2"' merge "$ar" "$WORK/$cxx.mri"
  if "${ar#aarch64-linux-gnu-}" t "$pkg/lib/libckptfix.a" | grep -q "gpu_cuda"; then
    echo "release: the C++ package's libckptfix.a still holds the CUDA load test" >&2
    exit 1
  fi
  archive "$WORK/cxx" "$cxx"
done

(cd "$OUT" && sha256sum ckptfix-*.tar.gz ckptfix-*.whl >SHA256SUMS)
echo "== release: written to $OUT"
cat "$OUT/SHA256SUMS"
