#!/usr/bin/python3
"""One file into a torch.distributed.checkpoint directory (issue 53, part 2):
time and memory. The file is saved at run time by torch (the --python
interpreter): --size-mib (1024) MiB of float32 weights in 256 tensors, a
plain state dict. Commands, each round in a shuffled order, a fresh output
each time, `sync` before each, page cache warm (the first round is not
counted):
  ckptfix       ckptfix convert model.pt -o DIR --format dcp (written and verified)
  cp            cp of model.pt (the bytes any conversion must at least write)
  python-peer   torch's own torch_save_to_dcp(model.pt, DIR) (format_utils), run
                by --peer (default: the sid judge's torch 2.14 through
                scripts/judges.sh, with the scratch directory bound into it)
Reported: fastest and median wall time, each process's own peak RSS (from
wait4; for the peer, of the process judges.sh starts, which waits for the
judge's Python), and the medians of the per-round ratios. Targets: memory
flat (not growing with the file), time near cp.
  /usr/bin/python3 bench/dcp_write_speed.py --ckptfix build/ckptfix
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile

from fit_speed import print_table, run_rounds  # the rounds, timed as the fit bench times them

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAKE = r'''
import sys, torch, collections
path, size_mib = sys.argv[1], int(sys.argv[2])
g = torch.Generator().manual_seed(0)
n = size_mib * 2**20 // 4 // 256
torch.save(collections.OrderedDict((f"blocks.{i}.weight", torch.randn(n, generator=g)) for i in range(256)), path)
'''
PEER = r'''
import sys
from torch.distributed.checkpoint.format_utils import torch_save_to_dcp
torch_save_to_dcp(sys.argv[1], sys.argv[2])
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True)
    parser.add_argument("--python", default=sys.executable, help="the Python with torch that saves the file")
    parser.add_argument("--peer", default=f"sh {REPO}/scripts/judges.sh run sid /usr/bin/python3",
                        help="the command (a Python with torch >= 2.4) that runs torch_save_to_dcp")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/var/tmp", help="where the files are written (seen by judge roots)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-dcp-bench-") as tmp:
        os.environ["CKPTFIX_JUDGE_BIND"] = tmp  # the judge root sees the scratch directory
        src = os.path.join(tmp, "model.pt")
        subprocess.run([args.python, "-c", MAKE, src, str(args.size_mib)], check=True)
        out = os.path.join(tmp, "out")
        jobs = {
            "ckptfix": [args.ckptfix, "convert", src, "-o", out, "--format", "dcp"],
            "cp": ["cp", src, out],
            "python-peer": [*shlex.split(args.peer), "-c", PEER, src, out],
        }
        times, rss = run_rounds(jobs, args.rounds, out)
        print(f"# {args.size_mib} MiB of float32 in 256 tensors into a DCP directory; {args.rounds} rounds "
              "(first not counted), page cache warm")
        print_table(times, rss, (("ckptfix", "cp"), ("ckptfix", "python-peer")))


if __name__ == "__main__":
    main()
