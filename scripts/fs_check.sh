#!/bin/sh
# How ckptfix copies on each kind of local file system (docs/performance.md,
# "Copy speed"): spliced through a 1 MiB pipe on ext4 and tmpfs, blocks
# shared with the input on XFS (reflink) and btrfs. For each of ext4, tmpfs,
# XFS and btrfs, on a small loop file (tmpfs: in memory):
#   1. the atomic-file and splice-copy unit tests with TMPDIR there: every
#      page phase gives the input's bytes; on XFS and btrfs the block-sharing
#      test must run (not skip) and find exactly the whole blocks shared;
#   2. a checkpoint torch saves there, rewritten by `ckptfix strip-prefix`,
#      loaded by torch 1.13 (local) and the newest 2.x (sid) and compared
#      with the input; on XFS and btrfs, filefrag must show shared extents.
#
#   scripts/fs_check.sh [--if-possible] [BUILD_DIR]    (default build/)
#
# Needs root (mount). With --if-possible, a machine that cannot mount loop
# files (a container without CAP_SYS_ADMIN or /dev/loop*) is reported and
# passed over; without it, that is a failure. scripts/test.sh runs it with
# --if-possible.
set -eu
cd "$(dirname "$0")/.."

IF_POSSIBLE=0
if [ "${1:-}" = "--if-possible" ]; then IF_POSSIBLE=1; shift; fi
BUILD="$(cd "${1:-build}" && pwd)"
WORK="${CKPTFIX_FS_WORK:-/var/tmp/ckptfix-fs}"

cleanup() {
  for m in "$WORK"/mnt-*; do
    [ -d "$m" ] && mountpoint -q "$m" && umount "$m"
  done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
cleanup
mkdir -p "$WORK"

cannot() {
  if [ "$IF_POSSIBLE" = 1 ]; then
    echo "fs_check: NOT RUN: $1 (run scripts/fs_check.sh as root on a machine with loop devices)"
    exit 0
  fi
  echo "fs_check: $1" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || cannot "needs root to mount loop files"
for tool in mkfs.ext4 mkfs.xfs mkfs.btrfs filefrag; do
  command -v "$tool" >/dev/null || cannot "$tool is missing (apt-get install e2fsprogs xfsprogs btrfs-progs)"
done

# name, mkfs command; images are sparse (XFS wants at least 300 MiB).
make_fs() {
  name="$1"; shift
  mkdir -p "$WORK/mnt-$name"
  if [ "$name" = tmpfs ]; then
    mount -t tmpfs -o size=256m tmpfs "$WORK/mnt-$name" 2>"$WORK/err" || cannot "mount tmpfs: $(cat "$WORK/err")"
    return
  fi
  truncate -s 512M "$WORK/$name.img"
  "$@" "$WORK/$name.img" >"$WORK/err" 2>&1 || cannot "$1 failed: $(tail -n 1 "$WORK/err")"
  mount -o loop "$WORK/$name.img" "$WORK/mnt-$name" 2>"$WORK/err" || cannot "mount a loop $name: $(cat "$WORK/err")"
}
make_fs ext4 mkfs.ext4 -q -F
make_fs tmpfs
make_fs xfs mkfs.xfs -q -f -m reflink=1
make_fs btrfs mkfs.btrfs -q -f

SAVE='
import sys, torch
g = torch.Generator().manual_seed(7)
sd = {f"module.layer{i}.weight": torch.randn(1 << 20, generator=g) for i in range(4)}
sd["module.bias"] = torch.arange(10.0)
torch.save(sd, sys.argv[1])'
COMPARE='
import sys, torch
a = torch.load(sys.argv[1])
b = torch.load(sys.argv[2])
want = {k[len("module."):]: v for k, v in a.items()}
assert list(b) == list(want), (list(b), list(want))
for k, v in want.items():
    assert b[k].dtype == v.dtype and torch.equal(b[k], v), k
print(f"  torch {torch.__version__}: {len(b)} tensors equal to the input")'

status=0
for name in ext4 tmpfs xfs btrfs; do
  dir="$WORK/mnt-$name"
  echo "== $name ($dir)"
  TMPDIR="$dir" "$BUILD/tests/ckptfix_unit_tests" --gtest_filter='AtomicFileTest.*:SpliceCopyTest.*' >"$WORK/unit.log" 2>&1 || {
    cat "$WORK/unit.log"; status=1; continue; }
  case "$name" in
    xfs|btrfs)
      if grep -q "SKIPPED \]" "$WORK/unit.log"; then
        echo "  FAILED: the block-sharing test skipped on $name"; grep "SKIPPED\|skip" "$WORK/unit.log"; status=1
      fi ;;
  esac
  echo "  unit tests: $(grep -c '^\[       OK \]' "$WORK/unit.log") passed"

  /usr/bin/python3 -c "$SAVE" "$dir/in.pt"
  "$BUILD/ckptfix" strip-prefix --gpu off "$dir/in.pt" -o "$dir/out.pt" >/dev/null
  /usr/bin/python3 -c "$COMPARE" "$dir/in.pt" "$dir/out.pt" || status=1
  if sid="$(scripts/judges.sh path sid 2>/dev/null)" && [ -n "$sid" ]; then
    CKPTFIX_JUDGE_BIND="$dir" scripts/judges.sh run sid python3 -c "$COMPARE" "$dir/in.pt" "$dir/out.pt" || status=1
  fi
  shared="$(filefrag -v "$dir/out.pt" 2>/dev/null | grep -c shared || true)"
  case "$name" in
    xfs|btrfs)
      if [ "$shared" -gt 0 ]; then echo "  $shared extents of the output shared with the input"
      else echo "  FAILED: no extent of the output is shared on $name"; status=1; fi ;;
    *) echo "  copied (no shared extents: $shared)" ;;
  esac
done
[ "$status" = 0 ] && echo "fs_check: all file systems passed"
exit "$status"
