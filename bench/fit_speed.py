#!/usr/bin/python3
"""fix --like at scale (issue 51): many keys, and many bytes.

Files are saved by torch (the --python interpreter, by default the one
running this script) at run time, every key carrying the `module.` of a
DataParallel model; the reference is the plain model's meta-device state
dict (`torch.save(model.to("meta").state_dict())`), and for the largest
one a JSON reference, both with no `module.`:

  keys          a state dict of --keys (100,000) one-element tensors:
                  fix-like-keys     ckptfix fix --like ref.pt keys.pt -o out.pt
                  strip-keys        ckptfix strip-prefix keys.pt -o out.pt
  bytes         --size-mib (1024) MiB in 256 float32 tensors (--bytes-rounds, 15):
                  fix-like-bytes    ckptfix fix --like ref.pt bytes.pt -o out.pt
                  strip-bytes       ckptfix strip-prefix bytes.pt -o out.pt
  reference     check --like of a small file against a JSON reference of
                --big-reference (1,000,000) keys and of a tenth of that:
                  check-like-1000000-keys / check-like-100000-keys (time and
                  peak RSS: linear, bounded)

Each round runs every command in a shuffled order, a fresh output each
time, `sync` before each, the page cache warm (the first round is not
counted). Reported: fastest and median wall time, peak RSS, and the median
over rounds of fix-like-bytes / strip-bytes and fix-like-keys / strip-keys.
Targets: fix-like-keys <= 1 s; fix-like-bytes <= 1.05x strip-bytes.

  /usr/bin/python3 bench/fit_speed.py --ckptfix build/ckptfix
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE = r'''
import sys, torch, collections
kind, path, ref, count, size_mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
g = torch.Generator().manual_seed(0)
if kind == "keys":
    names = [f"layers.{i // 2}.{'weight' if i % 2 == 0 else 'bias'}" for i in range(count)]
    sd = collections.OrderedDict((n, torch.ones(1)) for n in names)
else:
    n = size_mib * 2**20 // 4 // 256
    sd = collections.OrderedDict((f"blocks.{i}.weight", torch.randn(n, generator=g)) for i in range(256))
torch.save(collections.OrderedDict(("module." + k, v) for k, v in sd.items()), path)
torch.save(collections.OrderedDict((k, v.to("meta")) for k, v in sd.items()), ref)
'''


def timed(command):
    """Wall seconds and the child's own peak RSS (MiB, from wait4), sync before."""
    subprocess.run(["sync"], check=True)
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ((0, 1) if command[1] == "check" else (0,)):
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {stderr.decode()[-500:]}")
    return seconds, usage.ru_maxrss / 1024


def run_rounds(jobs, rounds, out):
    """Runs every command of `jobs` (name -> argv) `rounds` + 1 times, each
    round in a shuffled order with `out` (a file or a directory) removed before each; returns the
    wall times of all but the first round and each command's peak RSS."""
    times = {name: [] for name in jobs}
    rss = {name: 0.0 for name in jobs}
    for round_ in range(rounds + 1):
        names = list(jobs)
        random.shuffle(names)
        for name in names:
            if os.path.isdir(out):  # a distributed checkpoint (dcp_write_speed.py)
                shutil.rmtree(out)
            elif os.path.exists(out):
                os.remove(out)
            t, peak = timed(jobs[name])
            if round_:
                times[name].append(t)
                rss[name] = max(rss[name], peak)
    return times, rss


def print_table(times, rss, ratios):
    """The table of fastest and median times and peak RSS, then the median
    of the per-round ratio of each (command, baseline) in `ratios`."""
    print("| command | fastest s | median s | peak RSS MiB |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {min(ts):.3f} | {statistics.median(ts):.3f} | {rss[name]:.0f} |")
    for a, base in ratios:
        ratio = statistics.median(x / y for x, y in zip(times[a], times[base]))
        print(f"{a} / {base}: median ratio {ratio:.2f}x")


def json_reference(path, count):
    with open(path, "w") as f:
        f.write("{")
        for i in range(count):
            f.write(f'{"," if i else ""}"layers.{i // 2}.{"weight" if i % 2 == 0 else "bias"}": '
                    f'{{"shape": [1], "dtype": "float32"}}')
        f.write("}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--python", default=sys.executable, help="the Python with torch that saves the files")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--big-reference", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes-rounds", type=int, default=15,
                        help="rounds of the 1 GiB pair, whose single runs the page cache's writeback "
                             "spreads from 0.2 to 0.9 s here")
    parser.add_argument("--dir", default=None, help="where the files are written (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-fit-bench-") as tmp:
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        subprocess.run([args.python, "-c", MAKE, "keys", p("keys.pt"), p("keys_ref.pt"), str(args.keys), "0"],
                       check=True)
        subprocess.run([args.python, "-c", MAKE, "bytes", p("bytes.pt"), p("bytes_ref.pt"), "0",
                        str(args.size_mib)], check=True)
        json_reference(p("ref_big.json"), args.big_reference)
        json_reference(p("ref_tenth.json"), args.big_reference // 10)
        small = p("small.pt")
        subprocess.run([args.python, "-c", "import sys, torch; torch.save({'module.layers.0.weight': torch.ones(1)}, "
                        "sys.argv[1])", small], check=True)
        b = args.ckptfix
        out = p("out.pt")
        jobs = {
            "fix-like-keys": [b, "fix", "--like", p("keys_ref.pt"), p("keys.pt"), "-o", out],
            "strip-keys": [b, "strip-prefix", p("keys.pt"), "-o", out],
            # check exits 1 (the reference's other keys are missing): 1 is its answer here.
            f"check-like-{args.big_reference // 10}-keys": [b, "check", "-q", "--like", p("ref_tenth.json"), small],
            f"check-like-{args.big_reference}-keys": [b, "check", "-q", "--like", p("ref_big.json"), small],
        }
        byte_jobs = {
            "fix-like-bytes": [b, "fix", "--like", p("bytes_ref.pt"), p("bytes.pt"), "-o", out],
            "strip-bytes": [b, "strip-prefix", p("bytes.pt"), "-o", out],
        }
        times, rss = run_rounds(jobs, args.rounds, out)
        byte_times, byte_rss = run_rounds(byte_jobs, args.bytes_rounds, out)
        times.update(byte_times)
        rss.update(byte_rss)
        print(f"# {args.keys} keys; {args.size_mib} MiB in 256 float32 tensors; JSON references of "
              f"{args.big_reference} and {args.big_reference // 10} keys; {args.rounds} rounds "
              f"({args.bytes_rounds} of the {args.size_mib} MiB pair), the first not counted, page cache warm")
        print_table(times, rss, (("fix-like-keys", "strip-keys"), ("fix-like-bytes", "strip-bytes")))

if __name__ == "__main__":
    main()
