#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a
# fixed time. Exit 0 when nothing was found, 1 on any finding, 2 on a
# build or usage problem. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS: per target (default 60; CI gives 30 with CKPTFIX_FUZZ_JOBS=nproc, `scripts/fuzz.sh 1800`
# is a 30-minute local run). TARGET: checkpoint unpickle pickle_roundtrip zip
# legacy safetensors shard_index dcp_metadata file_graph salvage call_policy fit made_from nested
# (default: all, one after the other). Environment: CKPTFIX_FUZZ_DIR
# (default build-fuzz), CKPTFIX_FUZZ_JOBS (parallel fuzzing processes per
# target, default 1), CKPTFIX_FUZZ_MINIMIZE (at most this many findings per
# target are minimized, default 10). Fuzzing goes on after a finding (fork
# mode), so one known bug does not hide the others.
#
# Left in $CKPTFIX_FUZZ_DIR/fuzz/:
#   corpus/<target>/      the growing corpus, reused by the next run
#   findings/<target>/    crash-*, timeout-*, oom-*, leak-* as libFuzzer wrote
#                         them, and minimized-<same name> for each
#   logs/<target>.log     libFuzzer's output (<target>.minimize.log: minimizing)
#   summary.txt           one line per target: time, executions, cov, ft, findings
set -eu
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
[ $# -gt 0 ] && shift
TARGETS="${*:-checkpoint unpickle pickle_roundtrip zip legacy safetensors shard_index dcp_metadata file_graph salvage call_policy fit made_from nested}"
BUILD="${CKPTFIX_FUZZ_DIR:-build-fuzz}"
JOBS="${CKPTFIX_FUZZ_JOBS:-1}"
case "$SECONDS_PER_TARGET" in
  ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$SECONDS_PER_TARGET'" >&2; exit 2 ;;
esac

echo "== building the fuzz targets in $BUILD"
launcher=""
command -v ccache >/dev/null 2>&1 && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCKPTFIX_FUZZ=ON -DBUILD_SHARED_LIBS=OFF -DCKPTFIX_BUILD_TESTS=OFF -DCKPTFIX_BUILD_BENCH=OFF \
  -DCKPTFIX_WITH_TORCH=OFF -DCKPTFIX_WITH_CUDA=OFF $launcher >/dev/null || exit 2
targets=""
for t in $TARGETS; do targets="$targets fuzz_$t"; done
cmake --build "$BUILD" --target $targets || exit 2

OUT="$BUILD/fuzz"
mkdir -p "$OUT/logs"
rm -rf "$OUT/seeds"
python3 scripts/fuzz_seeds.py fixtures "$OUT/seeds" || exit 2
cat fuzz/pickle.dict fuzz/zip.dict >"$OUT/file.dict"
cat fuzz/pickle.dict fuzz/zip.dict fuzz/safetensors.dict fuzz/graph.dict >"$OUT/graph.dict"
: >"$OUT/summary.txt"

# signature TARGET INPUT: what went wrong, and the innermost ckptfix frame.
signature() {
  "$BUILD/fuzz/fuzz_$1" -runs=1 -timeout=10 -rss_limit_mb=2048 "$2" 2>&1 | awk '
    /SUMMARY:|terminate called|pickle round trip:/ && !what { what = $0; sub(/^==[0-9]*== */, "", what) }
    / in ckptfix::/ && !frame { sub(/.* in ckptfix::/, ""); gsub(/\(anonymous namespace\)::/, ""); sub(/\(.*/, ""); frame = $0 }
    END { printf "%s | %s\n", what, frame }'
}

found=0
for t in $TARGETS; do
  case "$t" in
    checkpoint|zip|salvage) dict="$OUT/file.dict"; max_len=65536 ;;
    legacy) dict="fuzz/pickle.dict"; max_len=65536 ;;
    safetensors|shard_index) dict="fuzz/safetensors.dict"; max_len=16384 ;;
    fit) dict="fuzz/fit.dict"; max_len=16384 ;;
    made_from) dict="fuzz/made_from.dict"; max_len=8192 ;;
    unpickle|pickle_roundtrip|dcp_metadata|call_policy|nested) dict="fuzz/pickle.dict"; max_len=16384 ;;
    file_graph) dict="$OUT/graph.dict"; max_len=131072 ;;
    *) echo "fuzz.sh: unknown target '$t'" >&2; exit 2 ;;
  esac
  corpus="$OUT/corpus/$t"
  findings="$OUT/findings/$t"
  mkdir -p "$corpus" "$findings" "$OUT/seeds/$t"
  log="$OUT/logs/$t.log"
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s (log: $log)"
  before="$(ls "$findings" | grep -v '^minimized-' | wc -l)"
  start=$(date +%s)
  status=0
  "$BUILD/fuzz/fuzz_$t" "$corpus" "$OUT/seeds/$t" -dict="$dict" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 \
    -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -artifact_prefix="$findings/" \
    -fork="$JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 >"$log" 2>&1 || status=$?
  elapsed=$(( $(date +%s) - start ))
  # Fork mode reports "#<executions>: cov: N ft: N ..." lines.
  execs="$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)"
  ft="$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)"
  # Each new artifact is replayed once to learn where it fails; the first two
  # of each kind get a minimized copy beside them (one bug often yields many inputs).
  : >"$OUT/signatures.tmp"
  for f in "$findings"/*; do
    [ -f "$f" ] || continue
    name="$(basename "$f")"
    case "$name" in minimized-*) continue ;; esac
    [ -f "$findings/minimized-$name" ] && continue
    sig="$(signature "$t" "$f")"
    seen="$(grep -cxF "$sig" "$OUT/signatures.tmp" || true)"
    echo "$sig" >>"$OUT/signatures.tmp"
    [ "$seen" -lt 2 ] || continue
    "$BUILD/fuzz/fuzz_$t" -minimize_crash=1 -runs=20000 -timeout=10 -rss_limit_mb=2048 \
      -exact_artifact_path="$findings/minimized-$name" "$f" >>"$OUT/logs/$t.minimize.log" 2>&1 || true
    [ -f "$findings/minimized-$name" ] || cp "$f" "$findings/minimized-$name"
  done
  after="$(ls "$findings" | grep -v '^minimized-' | wc -l)"
  new=$((after - before))
  line="fuzz_$t: ${elapsed}s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, $new new finding(s)"
  echo "$line" | tee -a "$OUT/summary.txt"
  if [ "$new" -gt 0 ] || [ "$status" -ne 0 ]; then
    found=1
    echo "   inputs in $findings/ (minimized-*: the smallest input that still fails); new ones by where they fail:"
    sort "$OUT/signatures.tmp" | uniq -c | sort -rn | sed 's/^/   /' | tee -a "$OUT/summary.txt"
  fi
done
[ "$found" -eq 0 ] && echo "== fuzzing found nothing" || echo "== fuzzing found something: see $OUT/summary.txt"
exit "$found"
