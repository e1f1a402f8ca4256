#!/usr/bin/python3
"""A DeepSpeed ZeRO checkpoint into one file (issue 53): time and memory.

The checkpoint is made at run time by torch (the --python interpreter) in
DeepSpeed's ZeRO stage 2 layout (tests/interop/zero_synthetic.py; no
DeepSpeed needed): --ranks (2) data-parallel ranks, fp32 training,
--size-mib (1024) MiB of weights in 64 parameters of uneven sizes (so that
partitions cut through parameters), each rank's optimizer file holding its
partition of the master weights and its Adam moments (twice that), the model
states the full module. Commands, each round in a shuffled order, a fresh
output each time, `sync` before each, page cache warm (the first round is
not counted):

  ckptfix       ckptfix convert DIR -o out.pt
  cp            cp of the model states file (the weights' bytes: what any
                conversion must at least write)
  python-peer   zero_to_fp32.py's logic in the same --python's torch: every
                optimizer file torch.load-ed (mmap=True where torch has it,
                the Adam moments dropped as zero_to_fp32.py drops them), the
                model states loaded, each group's partitions concatenated,
                each parameter a narrow().view() of it, torch.save

Reported: fastest and median wall time, each process's own peak RSS (from
wait4), and the medians of the per-round ratios ckptfix / cp and
ckptfix / python-peer. Targets: memory flat (<= 64 MiB whatever the model),
time near cp.

  /usr/bin/python3 bench/zero_speed.py --ckptfix build/ckptfix
"""
import argparse
import os
import subprocess
import sys
import tempfile

from fit_speed import print_table, run_rounds  # the rounds, timed as the fit bench times them

# The checkpoint's maker, shared with tests/interop/test_zero.py.
MAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop", "zero_synthetic.py")
# zero_to_fp32.py's logic, with the judge's torch.
PEER = r'''
import collections, glob, os, sys, torch
tag, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import zero_synthetic
zero_synthetic.stand_in_enum()  # DeepSpeed's class, for torch.load(weights_only=False)
kw = {"mmap": True} if "mmap" in torch.load.__code__.co_varnames else {}
groups = []
for f in sorted(glob.glob(os.path.join(tag, "*_optim_states.pt"))):
    sd = torch.load(f, map_location="cpu", weights_only=False, **kw)
    sd["optimizer_state_dict"].pop("base_optimizer_state", None)  # zero_to_fp32.py drops the moments
    groups.append(sd["optimizer_state_dict"]["single_partition_of_fp32_groups"])
model = torch.load(os.path.join(tag, "mp_rank_00_model_states.pt"), map_location="cpu", weights_only=False, **kw)
state = collections.OrderedDict()
for i, shapes in enumerate(model["param_shapes"]):
    full = torch.cat([g[i] for g in groups], 0)
    offset = 0
    for name, shape in shapes.items():
        n = shape.numel()
        state[name] = full.narrow(0, offset, n).view(shape)
        offset += n
torch.save(state, out)
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--python", default=sys.executable, help="the Python with torch that makes the files and runs the peer")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/var/tmp", help="where the files are written (seen by judge roots)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-zero-bench-") as tmp:
        ckpt = os.path.join(tmp, "checkpoint")
        subprocess.run([args.python, MAKE, ckpt, str(args.ranks), str(args.size_mib * 2**20 // 4)], check=True)
        tag = os.path.join(ckpt, "global_step1")
        out = os.path.join(tmp, "out.pt")
        jobs = {
            "ckptfix": [args.ckptfix, "convert", ckpt, "-o", out],
            "cp": ["cp", os.path.join(tag, "mp_rank_00_model_states.pt"), out],
            "python-peer": [args.python, "-c", PEER, tag, out, os.path.dirname(MAKE)],
        }
        times, rss = run_rounds(jobs, args.rounds, out)
        print(f"# ZeRO stage 2, {args.ranks} ranks, {args.size_mib} MiB of fp32 weights (the directory holds "
              f"{4 * args.size_mib} MiB: weights in the model states, master weights and two moments in the "
              f"optimizer files); {args.rounds} rounds (first not counted), page cache warm")
        print_table(times, rss, (("ckptfix", "cp"), ("ckptfix", "python-peer")))

if __name__ == "__main__":
    main()
