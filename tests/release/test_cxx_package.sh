#!/bin/sh
# The C++ package as a new user meets it (issue 52): unpacked into an empty
# prefix, found by a consumer project with default flags (examples/: no
# language standard of its own, the targets carry C++20), built against
# Debian bookworm's LibTorch (this machine's) and sid's (the sid judge root),
# then run on the CUDA-saved DataParallel training checkpoint: its state dict
# loaded onto the CPU into a plain module, whose forward output must equal
# Python's (the same torch as the LibTorch, tests/install/check_forward.py).
#
#   tests/release/test_cxx_package.sh TARBALL FIXTURE
set -eu
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
TARBALL="$1"
FIXTURE="$2"
WORK="$(mktemp -d /var/tmp/ckptfix-cxx-package.XXXXXX)"  # /var/tmp: seen inside the judge roots too
trap 'rm -rf "$WORK"' EXIT
name="$(basename "$TARBALL" .tar.gz)"
mkdir "$WORK/prefix"
tar -xzf "$TARBALL" -C "$WORK/prefix"
prefix="$WORK/prefix/$name"
for f in include/ckptfix/libtorch.h include/ckptfix/checkpoint.h lib/libckptfix.a lib/cmake/ckptfix/ckptfixConfig.cmake \
         lib/cmake/ckptfix/ckptfixConfigVersion.cmake share/ckptfix/libtorch/load.cc LICENSE licenses; do
  [ -e "$prefix/$f" ] || { echo "test_cxx_package: $name has no $f" >&2; exit 1; }
done
cp "$FIXTURE" "$WORK/fixture.pt"

# consume WHERE: configure, build and run the examples; WHERE's python judges.
consume() {
  where="$1"
  build="$WORK/build-$where"
  script='
    prefix="$1" src="$2" build="$3" fixture="$4" repo="$5"
    echo "test_cxx_package: $(c++ --version | head -n 1), $(cmake --version | head -n 1)"
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >"$build.configure.log" ||
      { cat "$build.configure.log"; exit 1; }
    cmake --build "$build" >"$build.build.log" || { tail -n 60 "$build.build.log"; exit 1; }
    [ -x "$build/load_state_dict" ] || { echo "test_cxx_package: the package gave no ckptfix::libtorch"; exit 1; }
    "$build/list_tensors" "$fixture" | grep -q "state_dict/module.fc.weight .*float32 .*shape \[3,8\] offset 0 on cuda:0"
    "$build/load_state_dict" "$fixture" "$build/state.pt" --key state_dict --strip module. --forward "$build/forward.pt"
    /usr/bin/python3 "$repo/tests/install/check_forward.py" "$fixture" "$build/forward.pt"
  '
  if [ "$where" = local ]; then
    sh -euc "$script" consume "$prefix" "$REPO/examples" "$build" "$WORK/fixture.pt" "$REPO"
  else
    CKPTFIX_JUDGE_BIND="$WORK" "$REPO/scripts/judges.sh" run "$where" \
      sh -euc "$script" consume "$prefix" "$REPO/examples" "$build" "$WORK/fixture.pt" "$REPO"
  fi
  echo "test_cxx_package: $name builds and loads with $where's LibTorch: ok"
}
# CI consumes with bookworm's LibTorch only (CKPTFIX_CXX_PACKAGE_LIBTORCHES=local,
# scripts/test.sh: about two minutes less); scripts/release_check.sh with both.
for where in ${CKPTFIX_CXX_PACKAGE_LIBTORCHES:-local sid}; do consume "$where"; done
