#!/usr/bin/python3
"""ckptfix.load against torch.load(mmap=True) and safetensors (issue 35):
load a state dict and touch every page, each in a fresh process, rounds
alternating, medians and per-round ratios.

For a generated state dict (default 1 GiB of float32 in 256 tensors, made
by torch.save; also saved as safetensors when the judge has it), each round
runs, each in a new Python process that imports torch first (not timed):

  torch      torch.load(path, mmap=True, map_location=DEVICE, weights_only=True)
  ckptfix-mmap  ckptfix.load(path, map_location=DEVICE, mmap=True)
  torch-copy torch.load(path, map_location=DEVICE, weights_only=True) (the default: tensors own their memory)
  ckptfix    ckptfix.load(path, map_location=DEVICE) (the default: tensors own their memory)
  safetensors safetensors.torch.load_file(path.safetensors, device=DEVICE)
  libtorch   (with --libtorch-load BIN) ckptfix::libtorch::load_state_dict in a C++
             process (bench/libtorch_load.cc; its start, with no Python, timed apart)

then reads one element of every 4 KiB page of every tensor (on a GPU: a
sum per tensor, synchronized). The device's context is made first and
timed apart ("device init"). Reported: seconds of load + touch, GB/s,
and the process's RssAnon (its own memory, which must stay flat: the
bytes are the page cache's, mapped, for the mapping peers; the copying
peers own what they load) and RssFile after it; the time from the process's start to its last byte
on the device (the parent's clock at the launch to the child's at the end
of its touch, both CLOCK_MONOTONIC: what a server waits for, issue 54); and
the whole process as its parent times it, from exec to exit (for Python
peers that includes `import torch`; for the C++ loader, loading LibTorch's
libraries).

  /usr/bin/python3 bench/python_load.py --ckptfix build/ckptfix            # CPU, 1 GiB, 5 rounds
  python3 bench/python_load.py --ckptfix /tmp/b/ckptfix --libtorch-load /tmp/b/bench/ckptfix_libtorch_load \
      --device cuda --size-mib 4096                                        # the GPU machine
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = r'''
import os, sys, time, json
sys.path.insert(0, sys.argv[1])
import torch
peer, path, device = sys.argv[2], sys.argv[3], sys.argv[4]
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0
# The device's context is made before the clock starts (its time is "init"),
# so that "seconds" is the load itself, whoever loads.
began = time.perf_counter()
if device != "cpu":
    torch.empty(1, device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
start = time.perf_counter()
if peer == "torch":
    mmap = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 1)  # mmap=True since 2.1
    sd = torch.load(path, map_location=device, weights_only=True, **({"mmap": True} if mmap else {}))
elif peer == "torch-copy":
    sd = torch.load(path, map_location=device, weights_only=True)
elif peer in ("ckptfix", "ckptfix-mmap"):
    import ckptfix
    sd = ckptfix.load(path, map_location=device, mmap=peer == "ckptfix-mmap")
else:
    from safetensors.torch import load_file
    sd = load_file(path, device=device)
total = 0.0
for t in sd.values():
    flat = t.reshape(-1)
    total += float(flat[:: max(1, 4096 // t.element_size())].sum())  # one element of every page
if device.startswith("cuda"):
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
done_at = time.monotonic()  # CLOCK_MONOTONIC: the parent's clock too
print(json.dumps({"seconds": seconds, "init": start - began, "anon": status("RssAnon"), "file": status("RssFile"),
                  "check": total, "done_at": done_at}))
'''


def make(path, size_mib, tensors):
    import torch
    n = size_mib * 2**20 // 4 // tensors
    g = torch.Generator().manual_seed(0)
    sd = {f"layer{i}.weight": torch.randn(n, generator=g) for i in range(tensors)}
    torch.save(sd, path)
    try:
        from safetensors.torch import save_file
        save_file(sd, path + ".safetensors")
        return True
    except ImportError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", required=True, help="the ckptfix binary the package runs")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dir", default=None, help="where the checkpoint is written (default: a temp dir)")
    parser.add_argument("--libtorch-load", default=None, help="bench/libtorch_load.cc's binary: the C++ loader too")
    parser.add_argument("--peers", default=None,
                        help="comma-separated subset of torch,ckptfix-mmap,torch-copy,ckptfix,safetensors,libtorch "
                             "(torch is always run)")
    args = parser.parse_args()
    env = dict(os.environ, CKPTFIX_BIN=os.path.abspath(args.ckptfix))
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckptfix-bench-") as tmp:
        path = os.path.join(tmp, "sd.pt")
        has_st = make(path, args.size_mib, args.tensors)
        peers = ["torch", "ckptfix-mmap", "torch-copy", "ckptfix"] + (["safetensors"] if has_st else []) + (["libtorch"] if args.libtorch_load else [])
        if args.peers:
            wanted = set(args.peers.split(",")) | {"torch"}  # the ratios are to torch.load
            peers = [p for p in peers if p in wanted]
        results = {p: [] for p in peers}
        for _ in range(args.rounds + 1):  # the first round warms the page cache and is not counted
            for peer in peers:
                target = path + ".safetensors" if peer == "safetensors" else path
                subprocess.run(["sync"], check=True)
                if peer == "libtorch":
                    command = [args.libtorch_load, target, args.device]
                else:
                    command = [sys.executable, "-c", RUN, os.path.join(REPO, "python"), peer, target, args.device]
                launched = time.monotonic()
                began = time.perf_counter()
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                whole = time.perf_counter() - began
                row = __import__("json").loads(out.stdout)
                results[peer].append(dict(row, process=whole, to_last_byte=row["done_at"] - launched))
        import torch
        gb = args.size_mib * 2**20 / 1e9
        print(f"# torch {torch.__version__}, Python {sys.version.split()[0]}, {args.size_mib} MiB in {args.tensors} "
              f"tensors, device {args.device}, {args.rounds} rounds (median; first round not counted)")
        print("| loader | device init, s | load + touch every page, s | GB/s | RssAnon MiB | RssFile MiB | time / torch.load (mmap=True from torch 2.1) | process start to last byte, s | whole process, s |")
        print("|---|---|---|---|---|---|---|---|---|")
        base = [r["seconds"] for r in results["torch"][1:]]
        for peer in peers:
            rows = results[peer][1:]
            secs = [r["seconds"] for r in rows]
            ratio = statistics.median(s / b for s, b in zip(secs, base))
            print(f"| {peer} | {statistics.median(r.get('init', 0) for r in rows):.3f} | "
                  f"{statistics.median(secs):.3f} | {gb / statistics.median(secs):.1f} | "
                  f"{statistics.median(r['anon'] for r in rows) / 2**20:.0f} | "
                  f"{statistics.median(r['file'] for r in rows) / 2**20:.0f} | {ratio:.2f} | "
                  f"{statistics.median(r['to_last_byte'] for r in rows):.3f} | "
                  f"{statistics.median(r['process'] for r in rows):.3f} |")
        checks = {peer: results[peer][-1]["check"] for peer in peers}
        if len(set(round(c, 3) for c in checks.values())) != 1:
            print(f"the loaders read different values: {checks}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
