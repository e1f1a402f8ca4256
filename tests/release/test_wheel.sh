#!/bin/sh
# The release wheel (scripts/make_wheel.py) installs, works and uninstalls
# cleanly with pip in a fresh virtual environment:
#   tests/release/test_wheel.sh WHEEL FIXTURE
#   1. the zip is intact and its RECORD lists exactly its entries, with the
#      right sha256 and size;
#   2. `pip install --no-index WHEEL` puts an executable ckptfix in venv/bin
#      (same bytes as in the wheel), which prints the wheel's version and
#      repairs FIXTURE (fix --auto-prefix --to cpu); where /usr/bin/python3
#      has torch, torch.load judges the output;
#   3. `import ckptfix; ckptfix.executable()` names venv/bin/ckptfix;
#   4. `pip uninstall -y ckptfix` leaves the venv's files as they were before
#      the install (only __pycache__ directories are ignored).
# The venv is made by $CKPTFIX_VENV_PYTHON (default python3) -m venv.
# Exit status: 0 passed, 1 failed, 2 bad usage, 77 skipped (no venv module).
set -eu

if [ "$#" -ne 2 ]; then
  echo "usage: $0 WHEEL FIXTURE" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
WHEEL="$1"
FIXTURE="$2"
PY="${CKPTFIX_VENV_PYTHON:-python3}"

fail() {
  echo "test_wheel: FAILED: $*" >&2
  exit 1
}

[ -f "$WHEEL" ] || fail "no wheel at $WHEEL"
[ -f "$FIXTURE" ] || fail "no fixture at $FIXTURE"
# Absolute paths: the checks below run from inside the temporary directory.
WHEEL="$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")"
FIXTURE="$(cd "$(dirname "$FIXTURE")" && pwd)/$(basename "$FIXTURE")"
# ckptfix-VERSION-py3-none-PLATFORM.whl
VERSION="$(basename "$WHEEL" | sed -n 's/^ckptfix-\([^-]*\)-.*\.whl$/\1/p')"
[ -n "$VERSION" ] || fail "$WHEEL is not named ckptfix-VERSION-TAGS.whl"

# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) separately, in
# python3-venv; without it `python3 -m venv` fails half-way.
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "test_wheel: skipped: '$PY -m venv' is unavailable (no venv or ensurepip module)." >&2
  echo "  On Debian/Ubuntu: apt-get install -y python3-venv" >&2
  exit 77
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 1' HUP INT TERM
cd "$TMP"
VENV="$TMP/venv"
# No network (--no-index) and no writes outside the venv and $TMP.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1
unset PYTHONPATH PIP_REQUIRE_VIRTUALENV PIP_USER 2>/dev/null || true

echo "== wheel: $WHEEL"
"$PY" -m zipfile -t "$WHEEL" > "$TMP/zipfile.log" 2>&1 || { cat "$TMP/zipfile.log" >&2; fail "zip integrity test (python3 -m zipfile -t)"; }

"$PY" "$HERE/check_wheel.py" "$WHEEL" || fail "the wheel's RECORD, modes or metadata are wrong (above)"
echo "zip and RECORD: ok"

# The venv's files (and directories), sorted, without __pycache__: pip may
# leave byte-code directories behind, and running pip compiles its own.
list_venv() {
  (cd "$VENV" && find . -print) | grep -v '/__pycache__\(/\|$\)' | LC_ALL=C sort
}

"$PY" -m venv "$VENV" > "$TMP/venv.log" 2>&1 || { cat "$TMP/venv.log" >&2; fail "$PY -m venv"; }
"$VENV/bin/pip" --version
list_venv > "$TMP/before.txt"

"$VENV/bin/pip" install --no-index "$WHEEL" > "$TMP/install.log" 2>&1 || { cat "$TMP/install.log" >&2; fail "pip install --no-index $WHEEL"; }
tail -n 1 "$TMP/install.log"

BIN="$VENV/bin/ckptfix"
[ -f "$BIN" ] || fail "pip installed no $BIN"
[ -x "$BIN" ] || fail "$BIN is not executable: $(ls -l "$BIN")"
# shellcheck disable=SC2012 # only the mode column of a known path is shown
echo "installed: $(ls -l "$BIN" | cut -d ' ' -f 1) $BIN"
# pip rewrites a script's first line only if it is '#!python'; an ELF must
# arrive byte for byte.
"$PY" - "$WHEEL" "$BIN" <<'EOF' || fail "$BIN differs from the wheel's script"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".data/scripts/ckptfix"))
    data = zf.read(name)
with open(sys.argv[2], "rb") as f:
    sys.exit(0 if f.read() == data else 1)
EOF

OUT_VERSION="$("$BIN" --version)" || fail "$BIN --version exits $?"
# The first line names the version ("ckptfix 0.1.0 (commit ...)"); the
# wheel must not claim another.
FIRST="$(echo "$OUT_VERSION" | head -n 1)"
echo "ckptfix --version: $FIRST"
echo "$FIRST" | tr -s ' \t()' '[\n*]' | grep -qxF "$VERSION" \
  || fail "$BIN --version prints '$FIRST', not the wheel's version $VERSION"

OUT="$TMP/out.pt"
"$BIN" fix --auto-prefix --to cpu "$FIXTURE" -o "$OUT" > "$TMP/fix.log" 2>&1 || { cat "$TMP/fix.log" >&2; fail "ckptfix fix --auto-prefix --to cpu $FIXTURE -o $OUT"; }
[ -s "$OUT" ] || fail "ckptfix fix wrote no $OUT"
echo "ckptfix fix: ok ($(wc -c < "$OUT" | tr -d ' ') bytes)"

# Judge with the system torch, if it has one (not the venv: it has no torch).
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 - "$FIXTURE" "$OUT" <<'EOF' || fail "torch.load of $OUT (above)"
import sys, torch

def state_dict_keys(path):
    """The string keys of every dict holding tensors (the state dicts), anywhere."""
    keys = set()
    def walk(x):
        if isinstance(x, dict):
            if any(isinstance(v, torch.Tensor) for v in x.values()):
                keys.update(k for k in x if isinstance(k, str))
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
    walk(torch.load(path, map_location="cpu", weights_only=False))
    return keys

before, after = state_dict_keys(sys.argv[1]), state_dict_keys(sys.argv[2])
prefixed = sorted(k for k in before if k.startswith("module."))
if not prefixed:
    sys.exit("the fixture has no 'module.' key: it cannot show --auto-prefix at work")
stripped = [k for k in prefixed if k not in after and k[len("module."):] in after]
if not stripped:
    sys.exit("no 'module.' key was stripped; output keys: {}".format(sorted(after)[:8]))
left = sorted(k for k in after if k.startswith("module."))
print("torch {}: loads; {} of {} 'module.' keys stripped, {} left".format(
    torch.__version__, len(stripped), len(prefixed), len(left)))
EOF
else
  echo "torch.load check: skipped (/usr/bin/python3 has no torch)"
fi

FOUND="$("$VENV/bin/python" -c 'import ckptfix; print(ckptfix.executable())')" || fail "import ckptfix; ckptfix.executable() in the venv"
[ "$FOUND" = "$BIN" ] || fail "ckptfix.executable() gives '$FOUND', not $BIN"
echo "ckptfix.executable(): $FOUND"

"$VENV/bin/pip" uninstall -y ckptfix > "$TMP/uninstall.log" 2>&1 || { cat "$TMP/uninstall.log" >&2; fail "pip uninstall -y ckptfix"; }
list_venv > "$TMP/after.txt"
if ! cmp -s "$TMP/before.txt" "$TMP/after.txt"; then
  echo "venv after uninstall vs before install (+ left behind, - removed):" >&2
  diff "$TMP/before.txt" "$TMP/after.txt" | sed -n 's/^> /  + /p; s/^< /  - /p' >&2
  fail "pip uninstall -y ckptfix did not restore the venv"
fi
echo "pip uninstall: venv restored ($(wc -l < "$TMP/before.txt" | tr -d ' ') paths)"

# The package itself, with a torch (issue 35): a venv of /usr/bin/python3
# that sees its distro torch, the wheel installed into it, and ckptfix.load
# judged by that torch's torch.load.
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$TMP/torch-venv" >/dev/null 2>&1 || fail "venv of /usr/bin/python3"
  "$TMP/torch-venv/bin/pip" install -q --no-index "$WHEEL" || fail "pip install into the torch venv"
  (cd "$TMP" && "$TMP/torch-venv/bin/python" - "$FIXTURE" <<'EOF'
import sys
import ckptfix, torch
path = sys.argv[1]
sd = ckptfix.load(path, key="state_dict", strip_prefix="module.")
ref = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
assert [k[len("module."):] for k in ref] == list(sd), (list(ref), list(sd))
for (_, want), got in zip(ref.items(), sd.values()):
    assert want.dtype == got.dtype and want.shape == got.shape and want.stride() == got.stride()
    assert torch.equal(want, got)
assert ckptfix.executable().startswith(sys.prefix), ckptfix.executable()
print(f"ckptfix.load in a venv of Python {sys.version.split()[0]} with torch {torch.__version__}: "
      f"{len(sd)} tensors as torch.load gives them")
EOF
  ) || fail "ckptfix.load from the installed wheel"
else
  echo "ckptfix.load check: skipped (/usr/bin/python3 has no torch)"
fi
echo "test_wheel: ok"
