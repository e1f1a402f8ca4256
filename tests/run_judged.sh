#!/bin/sh
# Runs one python test under one torch judge (see scripts/judges.sh):
#   run_judged.sh JUDGE SCRIPT [ARG...]
# JUDGE is `local` (the interpreter in $CKPTFIX_PYTHON, default /usr/bin/python3)
# or the name of a root made by scripts/judges.sh (trixie, sid).
#
# A judge that is not provisioned is skipped loudly (exit 77, which ctest
# reports as "Skipped") unless CKPTFIX_REQUIRE_JUDGES=1, as in CI, where a
# missing judge fails the test.
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
JUDGES="$HERE/../scripts/judges.sh"
judge="$1"
shift

missing() {
  if [ "${CKPTFIX_REQUIRE_JUDGES:-0}" = 1 ]; then
    echo "run_judged: FAILED: judge '$judge' is required (CKPTFIX_REQUIRE_JUDGES=1) but $1" >&2
    exit 1
  fi
  echo "run_judged: SKIPPED: judge '$judge' is not available: $1" >&2
  echo "run_judged: run scripts/judges.sh provision to make it; CI requires every judge" >&2
  exit 77
}

if [ "$judge" = local ]; then
  python="${CKPTFIX_PYTHON:-/usr/bin/python3}"
  version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" ||
    missing "$python cannot import torch"
  echo "run_judged: judge local ($python): torch $version"
  exec "$python" "$@"
fi

root="$(sh "$JUDGES" path "$judge")" || missing "no root in ${CKPTFIX_JUDGE_ROOTS:-/var/cache/ckptfix/judges}/$judge"
echo "run_judged: judge $judge ($root): torch $(cat "$root/.ckptfix-torch-version" 2>/dev/null || echo '?')"
exec sh "$JUDGES" run "$judge" /usr/bin/python3 "$@"
