#!/bin/sh
# The torch judges: real PyTorch builds that every interop test asks.
#
#   scripts/judges.sh provision [NAME...]   make the missing roots (default: all)
#   scripts/judges.sh list                  each judge, its torch, and whether it is there
#   scripts/judges.sh run NAME CMD [ARG...] run CMD inside judge NAME's root
#   scripts/judges.sh path NAME             print the root's directory (exit 1 if absent)
#
# Judges:
#   local    the /usr/bin/python3 of this machine (Debian bookworm: torch 1.13)
#   trixie   a Debian trixie root: torch 2.6, numpy 2.2, safetensors, omegaconf
#   sid      a Debian sid root: the newest torch 2.x, plus g++, CMake and
#            libtorch-dev, so that the whole project also builds there
#   models   a Debian sid root with torchvision and transformers, for
#            bench/real_models.py (real architectures saved whole; made
#            only when asked: `provision models`, about 2 GB)
#   models-trixie  the same with trixie's torch 2.6 (torchvision only:
#            trixie has no transformers)
#
# The roots live under $CKPTFIX_JUDGE_ROOTS (default /var/cache/ckptfix/judges):
# the one setting the tests read to find them. Each is made once by mmdebstrap
# (scripts/debian_root.sh; about a minute and 1-2 GB each) and kept;
# `provision` remakes a root only when its package list changed. `run` enters
# a root in a private mount namespace with /proc, /dev, this repository and
# $CKPTFIX_JUDGE_BIND (colon-separated directories, e.g. a build folder
# outside the repository) mounted at their own paths, so commands see the
# same absolute paths inside as outside. Needs root (or sudo), like apt-get.
set -eu

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOTS="${CKPTFIX_JUDGE_ROOTS:-/var/cache/ckptfix/judges}"

# What every root needs to judge: torch and its friends, and the shared
# libraries a ckptfix built on the host loads.
JUDGE_PACKAGES="python3-torch,python3-numpy,python3-safetensors,python3-omegaconf,libdeflate0,libxxhash0,zlib1g,mount,util-linux"
# Real architectures (bench/real_models.py): Debian's torchvision and transformers.
MODEL_PACKAGES="python3-torchvision,python3-transformers,python3-accelerate"
# sid also builds and tests the whole project (newest g++, CMake, LibTorch).
BUILD_PACKAGES="g++,cmake,ninja-build,pkg-config,git,time,libcli11-dev,nlohmann-json3-dev,zlib1g-dev,libdeflate-dev,libxxhash-dev,libgtest-dev,libgmock-dev,libbenchmark-dev,libtorch-dev"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

packages_of() {
  case "$1" in
    trixie) echo "$JUDGE_PACKAGES" ;;
    sid) echo "$JUDGE_PACKAGES,$BUILD_PACKAGES" ;;
    models) echo "$JUDGE_PACKAGES,$MODEL_PACKAGES" ;;
    models-trixie) echo "$JUDGE_PACKAGES,python3-torchvision" ;;
    *) echo "judges.sh: unknown judge '$1' (local, trixie, sid, models, models-trixie)" >&2; exit 2 ;;
  esac
}

# The Debian suite a judge's root is made from.
suite_of() {
  case "$1" in
    models) echo sid ;;
    models-trixie) echo trixie ;;
    *) echo "$1" ;;
  esac
}

provision_one() {
  name="$1"
  dir="$ROOTS/$name"
  was="$(cat "$dir/.ckptfix-root" 2>/dev/null || true)"
  "$HERE/debian_root.sh" make "$dir" "$(suite_of "$name")" "$(packages_of "$name")" --variant=apt
  if [ "$(cat "$dir/.ckptfix-root")" = "$was" ] && [ -f "$dir/.ckptfix-torch-version" ]; then
    echo "judges: $name is ready ($dir)"
    return 0
  fi
  run_in "$name" /usr/bin/python3 -c 'import torch; print(torch.__version__)' | $SUDO tee "$dir/.ckptfix-torch-version" >/dev/null
  echo "judges: $name ready: torch $(cat "$dir/.ckptfix-torch-version")"
}

# run_in NAME CMD...: CMD inside the root, cwd = the caller's cwd.
run_in() {
  name="$1"
  shift
  "$HERE/debian_root.sh" run "$ROOTS/$name" "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  provision)
    [ $# -gt 0 ] || set -- trixie sid
    for n in "$@"; do
      [ "$n" = local ] || provision_one "$n"
    done
    ;;
  list)
    for n in local trixie sid; do
      if [ "$n" = local ]; then
        v="$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'no torch')"
        echo "local   /usr/bin/python3   torch $v"
      elif [ -f "$ROOTS/$n/.ckptfix-root" ]; then
        v="$(run_in "$n" /usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
        echo "$n  $ROOTS/$n   torch $v"
      else
        echo "$n  $ROOTS/$n   missing (scripts/judges.sh provision $n)"
      fi
    done
    ;;
  path)
    [ $# -eq 1 ] || { echo "usage: judges.sh path NAME" >&2; exit 2; }
    packages_of "$1" >/dev/null
    [ -f "$ROOTS/$1/.ckptfix-root" ] || exit 1
    echo "$ROOTS/$1"
    ;;
  run)
    [ $# -ge 2 ] || { echo "usage: judges.sh run NAME CMD [ARG...]" >&2; exit 2; }
    name="$1"
    shift
    if [ "$name" = local ]; then
      exec "$@"
    fi
    packages_of "$name" >/dev/null
    if [ ! -f "$ROOTS/$name/.ckptfix-root" ]; then
      echo "judges.sh: judge '$name' is not provisioned in $ROOTS (run scripts/judges.sh provision $name)" >&2
      exit 3
    fi
    run_in "$name" "$@"
    ;;
  *)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
