#!/usr/bin/python3
"""Unattended runs at scale (issue 65): what a rerun costs, and what a JSON
report of many inputs holds in memory.

  rerun    a batch of --files (2,000) small checkpoints, each saved by
           torch (the --python interpreter) with its keys under `module.`:
             first   ckptfix strip-prefix -r in --out-dir out --json  (outputs absent)
             rerun   the same command again (every output done)
           --rounds rounds (first and rerun in each, a fresh out/ for each
           first run, `sync` before every command). Target: rerun <= 0.3x
           the first run (median of the per-round ratios).
  report   ckptfix check -r over --report-inputs (100,000) small files,
           with --json and without; peak RSS of each (wait4). Target: the
           report costs at most 64 MiB more.

  /usr/bin/python3 bench/unattended.py --ckptfix build/ckptfix [--only rerun|report]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE = r'''
import sys, torch, collections
torch.manual_seed(0)
sd = collections.OrderedDict((f"module.layer{i}.weight", torch.randn(16)) for i in range(8))
torch.save(sd, sys.argv[1])
'''


def timed(args, stdout=subprocess.DEVNULL):
    """Wall seconds and peak RSS (MiB) of one command, after a sync."""
    subprocess.run(["sync"], check=True)
    start = time.monotonic()
    proc = subprocess.Popen(args, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(args)} exited {code}")
    return seconds, usage.ru_maxrss / 1024


def make_tree(python, root, count):
    os.makedirs(root)
    first = os.path.join(root, "m0000000.pt")
    subprocess.run([python, "-c", MAKE, first], check=True)
    for i in range(1, count):  # the same bytes: the cost is per file
        shutil.copy(first, os.path.join(root, f"m{i:07d}.pt"))


def bench_rerun(args, work):
    src = os.path.join(work, "in")
    make_tree(args.python, src, args.files)
    out = os.path.join(work, "out")
    command = [args.ckptfix, "strip-prefix", "-r", src, "--out-dir", out, "--json"]
    ratios, firsts, reruns = [], [], []
    for _ in range(args.rounds + 1):  # the first round warms the cache and is not counted
        shutil.rmtree(out, ignore_errors=True)
        first, _ = timed(command)
        rerun, _ = timed(command)
        firsts.append(first)
        reruns.append(rerun)
        ratios.append(rerun / first)
    doc = json.loads(subprocess.run(command, capture_output=True, text=True).stdout)
    assert doc["summary"]["unchanged"] == args.files, doc["summary"]
    firsts, reruns, ratios = firsts[1:], reruns[1:], ratios[1:]
    print(f"rerun of a finished {args.files}-file batch (strip-prefix -r --out-dir --json), {args.rounds} rounds:")
    print(f"  first run  median {statistics.median(firsts):.3f} s (fastest {min(firsts):.3f})")
    print(f"  rerun      median {statistics.median(reruns):.3f} s (fastest {min(reruns):.3f})")
    ratio = statistics.median(ratios)
    print(f"  rerun / first: median {ratio:.3f}x (target <= 0.3x): {'met' if ratio <= 0.3 else 'MISSED'}")


def bench_report(args, work):
    src = os.path.join(work, "many")
    make_tree(args.python, src, args.report_inputs)
    plain = [args.ckptfix, "check", "-r", src, "-q"]
    with_json = [args.ckptfix, "check", "-r", src, "--json"]
    rows = []
    for _ in range(args.report_rounds):
        s0, rss0 = timed(plain)
        s1, rss1 = timed(with_json)
        rows.append((s0, rss0, s1, rss1))
    rss0 = statistics.median(r[1] for r in rows)
    rss1 = statistics.median(r[3] for r in rows)
    print(f"check -r of {args.report_inputs} inputs, {args.report_rounds} rounds (medians):")
    print(f"  without --json  {statistics.median(r[0] for r in rows):.2f} s, peak RSS {rss0:.1f} MiB")
    print(f"  with --json     {statistics.median(r[2] for r in rows):.2f} s, peak RSS {rss1:.1f} MiB")
    print(f"  the report costs {rss1 - rss0:+.1f} MiB (target <= 64 MiB): {'met' if rss1 - rss0 <= 64 else 'MISSED'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--ckptfix", default=os.path.join(here, "..", "build", "ckptfix"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--report-inputs", type=int, default=100000)
    parser.add_argument("--report-rounds", type=int, default=2)
    parser.add_argument("--only", choices=["rerun", "report"])
    parser.add_argument("--dir", help="where to make the files (default: a temporary directory)")
    args = parser.parse_args()
    args.ckptfix = os.path.abspath(args.ckptfix)
    work = tempfile.mkdtemp(prefix="ckptfix-unattended-", dir=args.dir)
    try:
        if args.only in (None, "rerun"):
            bench_rerun(args, os.path.join(work, "rerun"))
        if args.only in (None, "report"):
            bench_report(args, os.path.join(work, "report"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
