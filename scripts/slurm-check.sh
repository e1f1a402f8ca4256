#!/bin/sh
# docs/ci.md's Slurm job array, run on a real single-node Slurm (issue 65):
# Debian's slurm-wlm and munge are installed, munged, slurmctld and slurmd
# started here (as root), the recipe's array submitted over a directory of
# checkpoints saved by torch, one array task cancelled midway (scancel, as a
# time limit or an operator does), and the array run again as a retry does.
# Then every output must be there and be what torch itself makes of its
# input, no temporary file may be left, and every task's report must be
# valid JSON. CI cannot start Slurm's daemons (it runs this script's logic
# without Slurm: tests/cli/test_job_array.py); run this before a release:
#
#   sudo scripts/slurm-check.sh [build/ckptfix]
set -eu
cd "$(dirname "$0")/.."
CKPTFIX="$(realpath "${1:-build/ckptfix}")"
PYTHON="${CKPTFIX_PYTHON:-/usr/bin/python3}"
[ "$(id -u)" -eq 0 ] || { echo "slurm-check: run as root (it starts Slurm's daemons)" >&2; exit 2; }

missing=""
for p in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

work="$(mktemp -d /tmp/ckptfix-slurm.XXXXXX)"
node="$(hostname -s)"
cleanup() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# --- a single-node cluster ----------------------------------------------------
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge /etc/slurm \
         "$work/spool/ctld" "$work/spool/d" "$work/log"
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0400 /etc/munge/munge.key
pkill -x munged 2>/dev/null || true
runuser -u munge -- /usr/sbin/munged --force
cpus="$(nproc)"
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=ckptfix
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/spool/ctld
SlurmdSpoolDir=$work/spool/d
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=30
MpiDefault=none
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld
slurmd
for _ in $(seq 1 30); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 1
done
sinfo -h -o %T | grep -q idle || { cat "$work/log/"*; echo "slurm-check: the node did not come up" >&2; exit 1; }
echo "slurm-check: Slurm $(sinfo -V | cut -d' ' -f2) up on $node ($cpus CPUs)"

# --- the checkpoints and the recipe (docs/ci.md) ------------------------------
cd "$work"
mkdir -p checkpoints/a checkpoints/b converted reports
"$PYTHON" - <<'EOF'
import collections, torch
torch.manual_seed(0)
for i in range(6):
    sd = collections.OrderedDict((f"module.layer{j}.weight", torch.randn(64, 64)) for j in range(4))
    torch.save(sd, f"checkpoints/{'a' if i % 2 else 'b'}/model{i}.pt")
# One large enough that its task is still writing when it is cancelled.
big = collections.OrderedDict((f"module.block{j}.weight", torch.full((64 << 20,), float(j))) for j in range(4))
torch.save(big, "checkpoints/big.pt")
EOF
find checkpoints -name '*.pt' | sort > files.txt
count="$(wc -l < files.txt)"
big_task="$(grep -n 'checkpoints/big.pt' files.txt | cut -d: -f1)"
# docs/ci.md's convert.sbatch, word for word but for the binary's path and --mem
# (this node's memory is not configured).
cat > convert.sbatch <<EOF
#!/bin/sh
#SBATCH --cpus-per-task=1
f=\$(sed -n "\${SLURM_ARRAY_TASK_ID}p" files.txt)
$CKPTFIX fix --auto-prefix --to cpu -o "converted/\${f#checkpoints/}" "\$f" --json > "reports/\${SLURM_ARRAY_TASK_ID}.json"
EOF

# --- run, cancel one task midway, run again -------------------------------------
job="$(sbatch --parsable --array=1-"$count" --chdir="$work" convert.sbatch)"
echo "slurm-check: array job $job, $count tasks; task $big_task converts a 1 GiB checkpoint"
for _ in $(seq 1 600); do
  ls converted/.big.pt.ckptfix-*.tmp >/dev/null 2>&1 && break
  sleep 0.05
done
ls converted/.big.pt.ckptfix-*.tmp >/dev/null 2>&1 || { echo "slurm-check: task $big_task never started writing" >&2; exit 1; }
scancel "${job}_${big_task}"
echo "slurm-check: cancelled task ${job}_${big_task} while it was writing"
for _ in $(seq 1 120); do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
  sleep 0.5
done
leftover="$(find converted -name '.*ckptfix-*' | wc -l)"
[ "$leftover" -eq 0 ] || { find converted -name '.*ckptfix-*'; echo "slurm-check: temporary files left" >&2; exit 1; }
"$PYTHON" - "$big_task" <<'EOF'
import json, sys
doc = json.load(open(f"reports/{sys.argv[1]}.json"))
assert doc["inputs"][0]["status"] == "interrupted", doc["inputs"][0]
print("slurm-check: the cancelled task's report is whole:", doc["summary"])
EOF
[ ! -e converted/big.pt ] || { echo "slurm-check: the cancelled task left an output" >&2; exit 1; }

job2="$(sbatch --parsable --wait --array=1-"$count" --chdir="$work" convert.sbatch)" || {
  echo "slurm-check: the retried array failed" >&2; cat reports/*.json; exit 1; }
echo "slurm-check: array job $job2 (the retry) finished"

# --- judged -------------------------------------------------------------------------
leftover="$(find converted -name '.*ckptfix-*' | wc -l)"
[ "$leftover" -eq 0 ] || { echo "slurm-check: temporary files left after the retry" >&2; exit 1; }
"$PYTHON" - "$count" <<'EOF'
import json, sys, torch
files = open("files.txt").read().split()
unchanged = 0
for task, f in enumerate(files, start=1):
    doc = json.load(open(f"reports/{task}.json"))  # each report valid JSON
    entry = doc["inputs"][0]
    assert entry["status"] in ("ok", "unchanged"), entry
    unchanged += entry["status"] == "unchanged"
    out = "converted/" + f[len("checkpoints/"):]
    want = {k[len("module."):]: v for k, v in torch.load(f).items()}
    got = torch.load(out, weights_only=True)
    assert list(got) == list(want), out
    assert all(torch.equal(got[k], want[k]) for k in want), out
print(f"slurm-check: {len(files)} outputs right (torch {torch.__version__}); the retry left {unchanged} done ones as they were")
assert unchanged == len(files) - 1, "the retry rewrote outputs the first run had finished"
EOF
echo "slurm-check: passed"
