#!/usr/bin/python3
"""How close ckptfix's rewrites come to `cp` (issue 36, part 1), on the file
systems you point it at (ext4, tmpfs, xfs, btrfs: loop files will do).

For each directory, a checkpoint of SIZE GiB in N float32 tensors whose keys
start with "module." is saved by torch (the --python interpreter, by default
the one running this script), and a file of
half that size is made for the cast's comparison. Then each round runs these
commands in a shuffled order, each with a fresh output (removed first) and
`sync` before it, so that no command pays for another's dirty pages, and
each ckptfix command next to its references (cp and cp-copy, or cp-half
for the cast; their order shuffled too), so that its ratios come from
adjacent runs:

  cp              cp SRC OUT             (on XFS and btrfs: a clone, cp's default)
  cp-copy         cp --reflink=never SRC OUT   (a copy of the bytes everywhere)
  cp-half         cp HALF OUT            (the bytes a cast to bf16 writes)
  strip-prefix    ckptfix strip-prefix SRC -o OUT            (verified)
  strip-nv        ckptfix strip-prefix --no-verify SRC -o OUT
  convert         ckptfix convert SRC -o OUT
  add-prefix      ckptfix add-prefix --prefix m. SRC -o OUT
  remap           ckptfix remap --to cpu SRC -o OUT
  cast            ckptfix cast --dtype bf16 SRC -o OUT
  cast-nv         ckptfix cast --dtype bf16 --no-verify SRC -o OUT

(--gpu off for every ckptfix command: this measures the copy, not a GPU.)
With --baseline OLD, each ckptfix command runs with OLD too, in the same
round; --args and --baseline-args add options to each side's commands
(the same binary with --baseline-args="--threads 2": what more threads
bring, issue 54). Reported per directory: each command's fastest and median wall time,
the ratios of the fastest times (on a VM whose freed memory goes back to
the host, time is only ever added: the fastest run is the command's own
cost), and the medians over rounds of its pairs' ratios to cp and cp-copy (cast: to
cp-half, which writes the same number of bytes; the half file is not a
torch file, so a clone of it is not what a cast could do).

  /usr/bin/python3 bench/copy_speed.py --ckptfix build/ckptfix --dirs /mnt/ext4,/mnt/tmpfs,/mnt/xfs,/mnt/btrfs
  /usr/bin/python3 bench/copy_speed.py --ckptfix new/ckptfix --baseline old/ckptfix --dirs /var/tmp --rounds 7
  python3 bench/copy_speed.py --ckptfix b/ckptfix --baseline b/ckptfix --baseline-args="--threads 2" --dirs /tmp
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

JOBS = {
    "strip-prefix": ["strip-prefix", "{src}", "-o", "{out}"],
    "strip-nv": ["strip-prefix", "--no-verify", "{src}", "-o", "{out}"],
    "convert": ["convert", "{src}", "-o", "{out}"],
    "add-prefix": ["add-prefix", "--prefix", "m.", "{src}", "-o", "{out}"],
    "remap": ["remap", "--to", "cpu", "{src}", "-o", "{out}"],
    "cast": ["cast", "--dtype", "bf16", "{src}", "-o", "{out}"],
    "cast-nv": ["cast", "--dtype", "bf16", "--no-verify", "{src}", "-o", "{out}"],
}


def is_cast(name):
    """A cast job ("cast", "old cast-nv"): compared with cp-half."""
    return name.split()[-1].startswith("cast")


def make(python, directory, size_gib, tensors):
    src = os.path.join(directory, "bench-src.pt")
    half = os.path.join(directory, "bench-half.bin")
    script = ("import sys, torch\n"
              "n = int(float(sys.argv[2]) * 2**30) // 4 // int(sys.argv[3])\n"
              "g = torch.Generator().manual_seed(0)\n"
              "torch.save({f'module.layer{i}.weight': torch.randn(n, generator=g) for i in range(int(sys.argv[3]))},"
              " sys.argv[1])\n")
    subprocess.run([python, "-c", script, src, str(size_gib), str(tensors)], check=True)
    with open(half, "wb") as f:
        f.truncate(os.path.getsize(src) // 2)
    with open(half, "r+b") as f:  # real bytes, not a hole
        chunk = os.urandom(1 << 20)
        for _ in range(os.path.getsize(half) // len(chunk)):
            f.write(chunk)
    return src, half


def timed(argv, out):
    if os.path.exists(out):
        os.remove(out)
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--baseline", help="another ckptfix binary, run beside it in every round")
    parser.add_argument("--dirs", required=True, help="comma-separated directories (one file system each)")
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch saves the input")
    parser.add_argument("--args", default="", help="options added to every ckptfix command, e.g. '--threads 8'")
    parser.add_argument("--baseline-args", default="", help="options added to every baseline command")
    args = parser.parse_args()
    binaries = {"": (os.path.abspath(args.ckptfix), args.args.split())}
    if args.baseline:
        binaries["old "] = (os.path.abspath(args.baseline), args.baseline_args.split())
    jobs = args.jobs.split(",")
    for directory in args.dirs.split(","):
        fs = subprocess.run(["stat", "-f", "-c", "%T", directory], capture_output=True, text=True).stdout.strip()
        src, half = make(args.python, directory, args.size_gib, args.tensors)
        out = os.path.join(directory, "bench-out")
        times, ratios = {}, {}
        references = {"cp": ["cp", src, out], "cp-copy": ["cp", "--reflink=never", src, out],
                      "cp-half": ["cp", "--reflink=never", half, out]}
        commands = {}
        for label, (binary, extra) in binaries.items():
            for job in jobs:
                commands[label + job] = [binary] + [a.format(src=src, out=out) for a in JOBS[job]] + ["--gpu", "off"] + extra
        shuffle = random.Random(0)
        for round_number in range(args.rounds + 1):  # the first round warms the page cache: not counted
            order = list(commands)
            shuffle.shuffle(order)
            for name in order:
                # Each command next to its references: this machine's noise
                # (a VM's first touch of memory, writeback) drifts over
                # seconds, and a ratio within adjacent runs cancels it. Their
                # order is shuffled too: on this VM a command that allocates
                # page cache soon after another freed its pages runs faster
                # than one that comes later (the freed memory goes back to
                # the host), so a fixed order is a bias.
                refs = ["cp-half"] if is_cast(name) else ["cp", "cp-copy"]
                runs = refs + [name]
                shuffle.shuffle(runs)
                took = {run: timed(references.get(run) or commands[run], out) for run in runs}
                if round_number == 0:
                    continue
                for run in runs:
                    times.setdefault(run, []).append(took[run])
                for ref in refs:
                    ratios.setdefault((name, ref), []).append(took[name] / took[ref])
        print(f"\n# {directory} ({fs}): {args.size_gib} GiB in {args.tensors} tensors, {args.rounds} rounds "
              f"(ckptfix {' '.join(args.args.split()) or 'as is'}"
              f"{'; old ' + (' '.join(args.baseline_args.split()) or 'as is') if args.baseline else ''}), "
              f"in a shuffled order, fresh outputs, sync before each command, each command paired with "
              f"its references")
        print("| command | min s | median s | min / min cp | min / min cp-copy | median of paired / cp | "
              "median of paired / cp-copy |")
        print("|---|---|---|---|---|---|---|")
        for ref in references:
            if ref in times:
                print(f"| {ref} | {min(times[ref]):.3f} | {statistics.median(times[ref]):.3f} | | | | |")
        for name in commands:
            fast, typical = min(times[name]), statistics.median(times[name])
            if is_cast(name):
                print(f"| {name} | {fast:.3f} | {typical:.3f} | {fast / min(times['cp-half']):.2f} (of cp-half) | | "
                      f"{statistics.median(ratios[(name, 'cp-half')]):.2f} (of cp-half) | |")
            else:
                print(f"| {name} | {fast:.3f} | {typical:.3f} | {fast / min(times['cp']):.2f} | "
                      f"{fast / min(times['cp-copy']):.2f} | {statistics.median(ratios[(name, 'cp')]):.2f} | "
                      f"{statistics.median(ratios[(name, 'cp-copy')]):.2f} |")
        for f in (src, half, out):
            if os.path.exists(f):
                os.remove(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
