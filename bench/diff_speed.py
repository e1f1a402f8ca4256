#!/usr/bin/python3
"""ckptfix diff against cmp (issue 50): identical files, and files one
tensor apart.

A checkpoint of SIZE MiB in N float32 tensors is saved by torch (the
--python interpreter, by default the one running this script), copied
byte for byte ("same"), and saved again, under the same file name in
another directory (torch names the archive's root after the file), with
one element of the middle tensor changed ("changed": the same bytes but
that tensor's record and its CRC). Each round runs, in a shuffled order,
each command with `sync` before it and the page cache warm (the first
round is not counted):

  cmp-same        cmp A SAME             (reads both files whole)
  diff-same       ckptfix diff A SAME
  cmp-changed     cmp A CHANGED          (stops at the first differing byte, in the middle)
  diff-changed    ckptfix diff A CHANGED (must read both files whole)

Reported: each command's fastest and median wall time, and the medians
over rounds of the ratios of the diffs to cmp-same, the time cmp takes to
read both files. Targets: identical files <= 1.5x cmp; one changed tensor
<= 2x cmp.

  /usr/bin/python3 bench/diff_speed.py --ckptfix build/ckptfix
  /usr/bin/python3 bench/diff_speed.py --ckptfix new/ckptfix --baseline old/ckptfix --rounds 7
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE = r'''
import sys, torch
path, changed, size_mib, tensors = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
n = size_mib * 2**20 // 4 // tensors
g = torch.Generator().manual_seed(0)
sd = {f"layer{i}.weight": torch.randn(n, generator=g) for i in range(tensors)}
torch.save(sd, path)
sd[f"layer{tensors // 2}.weight"][n // 2] += 1
torch.save(sd, changed)
'''


def timed(command):
    subprocess.run(["sync"], check=True)
    began = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - began
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--baseline", default=None, help="another ckptfix binary, run in the same rounds")
    parser.add_argument("--python", default=sys.executable, help="the Python with torch that saves the files")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the files are written (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-diff-bench-") as tmp:
        os.mkdir(os.path.join(tmp, "changed"))
        a, same, changed = (os.path.join(tmp, n) for n in ("a.pt", "same.pt", "changed/a.pt"))
        subprocess.run([args.python, "-c", MAKE, a, changed, str(args.size_mib), str(args.tensors)], check=True)
        shutil.copyfile(a, same)
        binaries = {"": args.ckptfix}
        if args.baseline:
            binaries["old "] = args.baseline
        jobs = {"cmp-same": ["cmp", a, same], "cmp-changed": ["cmp", a, changed]}
        for label, binary in binaries.items():
            jobs[label + "diff-same"] = [binary, "diff", a, same]
            jobs[label + "diff-changed"] = [binary, "diff", a, changed]
        times = {name: [] for name in jobs}
        for round_ in range(args.rounds + 1):
            names = list(jobs)
            random.shuffle(names)
            for name in names:
                t = timed(jobs[name])
                if round_:
                    times[name].append(t)
        print(f"# {args.size_mib} MiB in {args.tensors} float32 tensors, {args.rounds} rounds "
              f"(first not counted), page cache warm")
        print("| command | fastest s | median s | median ratio to cmp-same |")
        print("|---|---|---|---|")
        for name, ts in times.items():
            ratio = statistics.median(t / b for t, b in zip(ts, times["cmp-same"]))
            print(f"| {name} | {min(ts):.3f} | {statistics.median(ts):.3f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
