#!/usr/bin/python3
"""What the GPU load test costs a verified write, in ckptfix's own words
(issues 26 and 54): a state dict saved from DEVICE (default cuda:0; 1 GiB of
float32 in 64 tensors whose keys start with "module."), rewritten by each
JOB (default `strip-prefix`; `cast` is `cast --dtype bf16`) with `--json`
and each --gpu mode in turn (default require, then off), ROUNDS rounds,
fresh outputs, sync before each command. For each job and mode: the whole
process's wall time and peak RSS (medians), the ratio of the medians to the
last mode's (issue 54's target: require <= 1.10x off, RSS <= 300 MiB), and
from the JSON report the final check's seconds (verification.seconds: the
pass over the finished file; large records were read back while they were
written) and where the load test's time went (verification.gpu: the
device's own time, GB/s, and `phases`: the device's opening and the wait
for it, the copies into pinned memory, the reference checksum, the waits
for the device, the writer's wait for the read-back; medians over rounds).

  python3 bench/gpu_stage.py --ckptfix /tmp/ckptfix-gpu/ckptfix --size-mib 4096 --jobs strip-prefix,cast   # GPU machine
  /usr/bin/python3 bench/gpu_stage.py --ckptfix build/ckptfix --saved-on cpu --modes auto,off   # anywhere
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(command):
    """Wall seconds, peak RSS in MiB and stdout of one command."""
    began = time.perf_counter()
    # Both streams into files: a pipe nobody reads until the child has
    # exited would stop a child that writes more than the pipe holds.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            sys.exit(f"{' '.join(command)} failed ({child.returncode}): {err.read().decode()}")
        out.seek(0)
        return seconds, usage.ru_maxrss / 1024, out.read().decode()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--saved-on", default="cuda:0")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--modes", default="require,off", help="comma-separated --gpu modes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch saves the input")
    parser.add_argument("--dir", default=None, help="where the files go (default: the system's temporary directory)")
    parser.add_argument("--jobs", default="strip-prefix", help="comma-separated: strip-prefix, cast")
    parser.add_argument("--args", default="", help="options added to every ckptfix command, e.g. '--threads 4'")
    args = parser.parse_args()
    commands = {"strip-prefix": ["strip-prefix"], "cast": ["cast", "--dtype", "bf16"]}
    jobs = args.jobs.split(",")
    for job in jobs:
        if job not in commands:
            sys.exit(f"unknown job {job!r}: one of {', '.join(commands)}")
    # torch runs in a child of its own: a process's peak RSS starts from its
    # parent's at fork, so this one must not have imported torch.
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-gpu-stage-") as tmp:
        src, out = os.path.join(tmp, "in.pt"), os.path.join(tmp, "out.pt")
        elements = args.size_mib * 2**20 // 4 // args.tensors
        save = ("import sys, torch; n, count, device, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]; "
                "torch.save({f'module.w{i}': torch.randn(n, device=device) for i in range(count)}, path); "
                "print(torch.__version__)")
        version = subprocess.run([args.python, "-c", save, str(elements), str(args.tensors), args.saved_on, src],
                                 check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)  # the page cache warm
        rows = {(job, mode): [] for job in jobs for mode in modes}
        for _ in range(args.rounds):
            for job in jobs:
                for mode in modes:
                    if os.path.exists(out):
                        os.remove(out)
                    os.sync()
                    command = [args.ckptfix] + commands[job] + ["--json", "--gpu", mode] + args.args.split() + [src, "-o", out]
                    seconds, rss, stdout = run(command)
                    verification = json.loads(stdout)["inputs"][0]["verification"]
                    rows[(job, mode)].append((seconds, rss, verification))
    print(f"# torch {version}, {args.size_mib} MiB in {args.tensors} tensors saved on {args.saved_on}, "
          f"{args.rounds} rounds (medians), --json {args.args}")
    print(f"| job | --gpu | whole process, s | / --gpu {modes[-1]} | peak RSS MiB | final check, s | GPU stage | phases, s |")
    print("|---|---|---|---|---|---|---|---|")
    for job in jobs:
        last = statistics.median(x[0] for x in rows[(job, modes[-1])])
        for mode in modes:
            r = rows[(job, mode)]
            gpu = r[-1][2].get("gpu", {})
            stage = {k: v for k, v in gpu.items() if k not in ("phases",)}
            phases = {}
            for name in gpu.get("phases", {}):
                phases[name] = round(statistics.median(x[2]["gpu"]["phases"][name] for x in r), 3)
            wall = statistics.median(x[0] for x in r)
            print(f"| {job} | {mode} | {wall:.3f} | {wall / last:.2f}x | {statistics.median(x[1] for x in r):.0f} | "
                  f"{statistics.median(x[2].get('seconds', 0) for x in r):.3f} | {json.dumps(stage)} | "
                  f"{json.dumps(phases) if phases else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
