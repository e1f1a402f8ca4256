#!/bin/sh
# Debian roots made with mmdebstrap, and commands run inside them: the
# torch judges (scripts/judges.sh), the release build root and the bare
# roots the release binaries are tested in (scripts/release.sh,
# scripts/release_test.sh).
#
#   scripts/debian_root.sh make DIR SUITE PACKAGES [MMDEBSTRAP_OPTION...]
#       make DIR unless it was made with the same SUITE, PACKAGES (comma-
#       separated) and options; built beside DIR and moved into place, so
#       a root that exists is whole
#   scripts/debian_root.sh run DIR CMD [ARG...]
#       run CMD inside DIR, cwd the caller's, in a private mount namespace
#       with /proc, /dev, this repository and $CKPTFIX_JUDGE_BIND (colon-
#       separated directories) mounted at their own paths, so commands see
#       the same absolute paths inside as outside
#
# Environment: CKPTFIX_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs root (or sudo), like apt-get.
set -eu

REPO="$(cd "$(dirname "$0")/.." && pwd)"
MIRROR="${CKPTFIX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

make_root() {
  dir="$1" suite="$2" pkgs="$3"
  shift 3
  stamp="$suite $pkgs $*"
  if [ -f "$dir/.ckptfix-root" ] && [ "$(cat "$dir/.ckptfix-root")" = "$stamp" ]; then
    return 0
  fi
  if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "debian_root: installing mmdebstrap"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends mmdebstrap
  fi
  echo "debian_root: making $dir ($suite; about a minute)"
  $SUDO mkdir -p "$(dirname "$dir")"
  $SUDO rm -rf "$dir.new"
  include=""
  [ -z "$pkgs" ] || include="--include=$pkgs"
  # sid's Release file may be past its Valid-Until between mirror pushes.
  # One retry: a mirror push in the middle of a download fails it once.
  for attempt in 1 2; do
    if $SUDO mmdebstrap --quiet --aptopt='Acquire::Check-Valid-Until "false"' $include "$@" \
        "$suite" "$dir.new" "$MIRROR"; then
      break
    fi
    $SUDO rm -rf "$dir.new"
    [ "$attempt" = 1 ] || { echo "debian_root: could not make $dir" >&2; exit 1; }
    echo "debian_root: mmdebstrap failed; trying once more" >&2
  done
  $SUDO rm -rf "$dir"
  $SUDO mv "$dir.new" "$dir"
  # Written last: a root without it is incomplete and is made again.
  echo "$stamp" | $SUDO tee "$dir/.ckptfix-root" >/dev/null
}

run_in() {
  dir="$1"
  shift
  binds="$REPO${CKPTFIX_JUDGE_BIND:+:$CKPTFIX_JUDGE_BIND}"
  # The mounts exist only in the new mount namespace: nothing to clean up,
  # and parallel runs do not see each other's.
  exec_env="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root"
  $SUDO unshare --mount --propagation private -- sh -eu -c '
    dir="$1"; binds="$2"; cwd="$3"; shift 3
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    old_ifs="$IFS"; IFS=":"
    for b in $binds; do
      [ -n "$b" ] && [ -d "$b" ] || continue
      mkdir -p "$dir$b"
      mount --rbind "$b" "$dir$b"
    done
    IFS="$old_ifs"
    exec chroot "$dir" /bin/sh -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$cwd" "$@"
  ' debian_root "$dir" "$binds" "$(pwd)" env $exec_env "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  make)
    [ $# -ge 3 ] || { echo "usage: debian_root.sh make DIR SUITE PACKAGES [MMDEBSTRAP_OPTION...]" >&2; exit 2; }
    make_root "$@"
    ;;
  run)
    [ $# -ge 2 ] || { echo "usage: debian_root.sh run DIR CMD [ARG...]" >&2; exit 2; }
    [ -f "$1/.ckptfix-root" ] || { echo "debian_root.sh: $1 is not a root made by debian_root.sh make" >&2; exit 3; }
    run_in "$@"
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
