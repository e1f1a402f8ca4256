#!/usr/bin/python3
"""Whole-command benchmarks: ckptfix against `cp` and against the same job
done in Python torch, on checkpoints generated at run time.

Each case runs its commands in turn (cp, ckptfix, torch, cp, ckptfix, ...)
so that drift in machine speed hits them alike, then prints the median wall
time of each, their ratios, and peak resident memory (from /usr/bin/time).
Files are generated with real torch (Debian's torch 1.13) and kept in the
page cache: this measures the tools, not the disk.

  /usr/bin/python3 bench/bench.py --sizes 1 --jobs convert          # quick
  /usr/bin/python3 bench/bench.py --sizes 0.5,1,2,4 --runs 5        # the table in docs/performance.md
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
TIME = "/usr/bin/time"

# The same job done the Python way: load everything, edit, save.
TORCH_JOBS = {
    "convert": "sd = torch.load(src)\ntorch.save(sd, dst)",
    "strip-prefix": "sd = torch.load(src)\ntorch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, 'module.')\n"
                    "torch.save(sd, dst)",
    "remap": "sd = torch.load(src, map_location='cpu')\ntorch.save(sd, dst)",
    "cast-bf16": "sd = torch.load(src)\nfor k, v in sd.items():\n    if v.is_floating_point(): sd[k] = v.to(torch.bfloat16)\n"
                 "torch.save(sd, dst)",
    "inspect": "sd = torch.load(src)\nfor k, v in sd.items(): print(k, v.dtype, tuple(v.shape))",
    "verify": "sd = torch.load(src)",
}


def ckptfix_command(binary, job, src, dst):
    return {
        "convert": [binary, "convert", src, "-o", dst, "--force"],
        "strip-prefix": [binary, "strip-prefix", src, "-o", dst, "--force"],
        "remap": [binary, "remap", src, "--to", "cpu", "-o", dst, "--force"],
        "cast-bf16": [binary, "cast", src, "--dtype", "bf16", "-o", dst, "--force"],
        "inspect": [binary, "inspect", src],
        "verify": [binary, "verify", src],
    }[job]


def generate(path, gib, device_tag=None):
    """A DataParallel-style fp32 state dict of about `gib` GiB in 64 MiB tensors."""
    script = f"""
import torch, collections
total = int({gib} * (1 << 30))
chunk = 16 << 20  # floats per tensor: 64 MiB
sd = collections.OrderedDict()
i = 0
while total > 0:
    n = min(chunk, total // 4)
    sd[f'module.layer{{i}}.weight'] = torch.rand(n)
    total -= 4 * n
    i += 1
sd._metadata = collections.OrderedDict({{'': {{'version': 1}}, 'module': {{'version': 1}}}})
if {device_tag!r}:
    import torch.serialization as s
    s.location_tag = lambda storage: {device_tag!r}
torch.save(sd, {path!r})
"""
    subprocess.run([PYTHON, "-c", script], check=True)


def timed(command):
    """(wall seconds, peak RSS MiB) of one run."""
    with tempfile.NamedTemporaryFile(mode="r") as report:
        start = time.perf_counter()
        proc = subprocess.run([TIME, "-f", "%M", "-o", report.name, *command],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"failed: {' '.join(command)}\n{proc.stderr}")
        rss_kib = int(report.read().strip().splitlines()[-1])
    return wall, rss_kib / 1024


def run_case(binary, job, src, workdir, runs, peers):
    dst = os.path.join(workdir, "out.pt")
    commands = {"ckptfix": ckptfix_command(binary, job, src, dst)}
    if "cp" in peers and job not in ("inspect", "verify"):
        commands["cp"] = ["cp", src, os.path.join(workdir, "copy.pt")]
    if "torch" in peers:
        commands["torch"] = [PYTHON, "-c", f"import torch, collections\nsrc, dst = {src!r}, {dst!r}\n{TORCH_JOBS[job]}"]
    results = {name: [] for name in commands}
    for name, command in commands.items():  # warm-up, not counted
        timed(command)
    for _ in range(runs):
        for name, command in commands.items():
            results[name].append(timed(command))
    return {name: (statistics.median(w for w, _ in r), max(m for _, m in r)) for name, r in results.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", default=os.path.join(REPO, "build", "ckptfix"))
    parser.add_argument("--sizes", default="1", help="comma-separated GiB, e.g. 0.5,1,2,4")
    parser.add_argument("--jobs", default="convert", help="comma-separated: " + ",".join(TORCH_JOBS))
    parser.add_argument("--peers", default="cp,torch", help="comma-separated: cp,torch (or empty)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where to generate files (default: a temp dir)")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    workdir = args.workdir or tempfile.mkdtemp(prefix="ckptfix-bench-")
    os.makedirs(workdir, exist_ok=True)
    print(f"# machine: {os.cpu_count()} cores; {subprocess.run(['uname', '-srm'], capture_output=True, text=True).stdout.strip()}")
    print("| job | size | ckptfix s | cp s | torch s | ckptfix/cp | torch/ckptfix | ckptfix peak MiB | torch peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for size in [float(s) for s in args.sizes.split(",")]:
            src = os.path.join(workdir, f"src-{size}g.pt")
            if not os.path.exists(src):
                generate(src, size)
            for job in args.jobs.split(","):
                r = run_case(args.ckptfix, job, src, workdir, args.runs, peers)
                ck, ck_mem = r["ckptfix"]
                cp = r.get("cp", (None, None))[0]
                th, th_mem = r.get("torch", (None, None))
                fmt = lambda x, f="{:.3f}": "-" if x is None else f.format(x)
                print(f"| {job} | {size:g} GiB | {fmt(ck)} | {fmt(cp)} | {fmt(th)} | "
                      f"{fmt(ck / cp if cp else None, '{:.2f}x')} | {fmt(th / ck if th else None, '{:.1f}x')} | "
                      f"{ck_mem:.0f} | {fmt(th_mem, '{:.0f}')} |", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
