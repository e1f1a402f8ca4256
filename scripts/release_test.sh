#!/bin/sh
# Tests the artifacts scripts/release.sh wrote (issue 34's acceptance):
#
#   scripts/release_test.sh [DIR]      (default: dist/)
#
#  1. Each binary needs nothing but glibc: its NEEDED entries are glibc's
#     libraries, it has no RPATH, and no symbol it takes from them is newer
#     than GLIBC_2.31.
#  2. The x86_64 binary, unpacked from its tarball into bare roots
#     (mmdebstrap --variant=essential: no libstdc++, no zlib) of Debian
#     bullseye, bookworm, trixie and sid, repairs fixtures/training_dp_cuda.pt
#     with `fix --auto-prefix --to cpu`, and torch (/usr/bin/python3) loads
#     each output on the CPU with the prefix gone.
#  3. The aarch64 binary does the same under qemu-aarch64-static, with an
#     arm64 glibc unpacked from bullseye (--variant=extract --include=libc6).
#  4. The container image (Containerfile, from the x86_64 context) builds
#     with podman, and the ckptfix in it repairs the fixture.
#  5. The x86_64 wheel installs into a fresh venv with pip --no-index, runs
#     the same repair, and uninstalls leaving nothing (tests/release/test_wheel.sh);
#     the aarch64 wheel's metadata and RECORD are checked.
#  6. SHA256SUMS matches the files.
#  2b. The x86_64 binary runs docs/ci.md's Kubernetes Indexed Job arguments,
#     stopped (SIGTERM, SIGKILL) and retried: the retry finishes the work and
#     leaves what the first attempt finished (tests/cli/test_job_array.py).
#  7. The x86_64 C++ package, unpacked into an empty prefix, builds the
#     examples with default flags against this machine's LibTorch and sid's,
#     and its loader's forward output equals Python's (tests/release/test_cxx_package.sh).
#
# Roots are kept under $CKPTFIX_RELEASE_ROOTS (default
# /var/cache/ckptfix/release). Needs root (or sudo), like apt-get.
set -eu
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
DIST="$(cd "${1:-dist}" && pwd)"
ROOTS="${CKPTFIX_RELEASE_ROOTS:-/var/cache/ckptfix/release}"
FIXTURE="$REPO/fixtures/training_dp_cuda.pt"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
WORK="$(mktemp -d /var/tmp/ckptfix-release-test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() {
  echo "release_test: FAILED: $*" >&2
  failures=$((failures + 1))
}

echo "== release_test: checksums"
(cd "$DIST" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not match the files in $DIST"

# The output of a repair, judged by torch: loads, keys without 'module.', every tensor on the CPU.
judge() {
  /usr/bin/python3 - "$1" <<'EOF' || fail "torch does not load $1 as the repaired checkpoint"
import sys, torch
ckpt = torch.load(sys.argv[1], map_location=None, weights_only=False)
sd = ckpt["state_dict"]
assert sd and not any(k.startswith("module.") for k in sd), list(sd)
assert all(t.device.type == "cpu" for t in sd.values())
print(f"release_test: torch {torch.__version__} loads {sys.argv[1]}: {len(sd)} tensors, no 'module.'")
EOF
}

for tarball in "$DIST"/ckptfix-*-linux-*.tar.gz; do
  name="$(basename "$tarball" .tar.gz)"
  arch="${name##*-}"
  echo "== release_test: $name"
  tar -xzf "$tarball" -C "$WORK"
  bin="$WORK/$name/bin/ckptfix"
  for f in LICENSE README.md licenses; do [ -e "$WORK/$name/$f" ] || fail "$name has no $f"; done

  # 1. glibc only, 2.31 at most.
  needed="$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')"
  for lib in $needed; do
    case "$lib" in
      libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2|ld-linux-aarch64.so.1) ;;
      *) fail "$name: bin/ckptfix needs $lib, which is not glibc's" ;;
    esac
  done
  if readelf -d "$bin" | grep -q -E '\((RPATH|RUNPATH)\)'; then
    fail "$name: bin/ckptfix has an RPATH: the loader would search it (an empty entry is the current directory)"
  fi
  newest="$(readelf -W -V "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)"
  echo "release_test: $name needs $needed; newest glibc symbol version $newest"
  if [ "$(printf '%s\n2.31\n' "$newest" | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)" != 2.31 ]; then
    fail "$name: bin/ckptfix needs GLIBC_$newest, newer than 2.31"
  fi

  if [ "$arch" = x86_64 ]; then
    # 2. Bare roots: glibc and little else.
    for suite in bullseye bookworm trixie sid; do
      root="$ROOTS/bare-$suite"
      ./scripts/debian_root.sh make "$root" "$suite" "" --variant=essential
      if [ -e "$root/usr/lib/x86_64-linux-gnu/libstdc++.so.6" ]; then
        fail "the bare $suite root has libstdc++: it proves nothing"
      fi
      out="$WORK/out-$suite.pt"
      if CKPTFIX_JUDGE_BIND="$WORK" ./scripts/debian_root.sh run "$root" \
          "$bin" fix --auto-prefix --to cpu "$FIXTURE" -o "$out"; then
        judge "$out"
      else
        fail "$name does not repair the fixture in a bare $suite root"
      fi
    done
    # 2b. A retried Kubernetes Indexed Job, by the release binary.
    /usr/bin/python3 tests/cli/test_job_array.py --ckptfix "$bin" JobArrayTest.test_kubernetes_indexed_job_retried ||
      fail "$name: a retried Kubernetes Indexed Job does not finish the work"
  else
    # 3. Under qemu, with bullseye's arm64 glibc.
    command -v qemu-aarch64-static >/dev/null 2>&1 || {
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends qemu-user-static
    }
    libc="$ROOTS/arm64-libc"
    ./scripts/debian_root.sh make "$libc" bullseye libc6 --variant=extract --architectures=arm64
    out="$WORK/out-aarch64.pt"
    if qemu-aarch64-static -L "$libc" "$bin" --version &&
       qemu-aarch64-static -L "$libc" "$bin" fix --auto-prefix --to cpu "$FIXTURE" -o "$out"; then
      judge "$out"
    else
      fail "$name does not repair the fixture under qemu-aarch64-static"
    fi
  fi
done

# 4. The container image: built by podman from Containerfile, then its
# filesystem (podman export) entered with chroot to repair the fixture:
# `podman run` needs setrlimit, which sandboxed machines (this one) deny.
ctx="$(ls "$DIST"/ckptfix-*-container-x86_64.tar.gz 2>/dev/null | head -n 1)"
if [ -n "$ctx" ] && command -v podman >/dev/null 2>&1; then
  echo "== release_test: the container image"
  name="$(basename "$ctx" .tar.gz)"
  mkdir -p "$WORK/ctx" "$WORK/image"
  tar -xzf "$ctx" -C "$WORK/ctx"
  # A store of its own under $WORK, removed with it: the machine's own store
  # (another graph driver, images of its own) is neither used nor changed.
  mkdir -p "$WORK/podman/root" "$WORK/podman/run"
  podman="podman --root $WORK/podman/root --runroot $WORK/podman/run --storage-driver=vfs"
  tag="localhost/ckptfix-release-test:$$"
  if $podman build --isolation=chroot -q -f Containerfile --build-arg CONTEXT="$name" -t "$tag" "$WORK/ctx" >/dev/null &&
     $podman create --name "ckptfix-release-test-$$" "$tag" >/dev/null &&
     $podman export "ckptfix-release-test-$$" | tar -x -C "$WORK/image"; then
    echo "release_test: the image holds $(find "$WORK/image" -type f | wc -l) files, $(du -sk "$WORK/image" | cut -f1) KiB:" \
      "$(cd "$WORK/image" && find . -type f ! -path './usr/local/share/*' | sort | tr '\n' ' ')"
    $SUDO unshare --mount --propagation private -- sh -euc '
      image="$1" fixtures="$2" out="$3"; shift 3
      mkdir -p "$image$fixtures" "$image/out"
      mount --bind "$fixtures" "$image$fixtures"
      mount --bind "$out" "$image/out"
      exec chroot "$image" /usr/local/bin/ckptfix "$@"
    ' image "$WORK/image" "$REPO/fixtures" "$WORK" fix --auto-prefix --to cpu "$FIXTURE" -o /out/out-container.pt &&
      judge "$WORK/out-container.pt" || fail "the container image's ckptfix does not repair the fixture"
  else
    fail "the container image does not build"
  fi
  $podman rm -f "ckptfix-release-test-$$" >/dev/null 2>&1 || true
  $podman rmi -f "$tag" >/dev/null 2>&1 || true
else
  echo "release_test: no podman: the container image is not tested" >&2
fi

# 5. The wheels.
for wheel in "$DIST"/ckptfix-*.whl; do
  echo "== release_test: $(basename "$wheel")"
  case "$wheel" in
    *_x86_64.whl) sh tests/release/test_wheel.sh "$wheel" "$FIXTURE" || fail "$(basename "$wheel")" ;;
    *) python3 tests/release/check_wheel.py "$wheel" || fail "$(basename "$wheel")" ;;
  esac
done

# 7. The C++ package.
for cxx in "$DIST"/ckptfix-*-cxx-x86_64.tar.gz; do
  [ -e "$cxx" ] || { fail "no x86_64 C++ package in $DIST"; break; }
  echo "== release_test: $(basename "$cxx")"
  sh tests/release/test_cxx_package.sh "$cxx" "$FIXTURE" || fail "$(basename "$cxx")"
done

if [ "$failures" -ne 0 ]; then
  echo "release_test: $failures check(s) failed" >&2
  exit 1
fi
echo "== release_test: all checks passed"
