#!/usr/bin/python3
"""Whole-command benchmarks: ckptfix against `cp` and against the same job
done in Python torch, on checkpoints generated at run time.

Each case runs its commands in turn (ckptfix, cp, torch, ckptfix, cp, ...)
so that drift in machine speed hits them alike, then prints the median wall
time of each, the median of the ratios taken round by round (ckptfix/cp,
torch/ckptfix), and peak resident memory (from /usr/bin/time).
Files are generated with real torch (Debian's torch 1.13) and kept in the
page cache: this measures the tools, not the disk.

  /usr/bin/python3 bench/bench.py --sizes 1 --jobs convert          # quick
  /usr/bin/python3 bench/bench.py --sizes 0.5,1,2,4 --runs 5        # the table in docs/performance.md
  /usr/bin/python3 bench/bench.py --baseline OLD/ckptfix --peers cp  # a change, before/after, in one run
  /usr/bin/python3 bench/bench.py --sizes 2 --jobs dcp              # a 2-rank DCP directory -> one .pt

On the GPU machine (its python3 is the judge; ../shared/gpu/README.md), the
GPU load test's cost: the same binary with and without it, on a file saved
from cuda, in one run (ckptfix/baseline is the verified job with the GPU
stage over the same job with --gpu off):

  python3 bench/bench.py --python python3 --sizes 4 --jobs strip-prefix --saved-on cuda:0 \
      --args="--gpu require" --baseline build/ckptfix --baseline-args="--gpu off" --peers cp

The dcp job's directory is written by 2 ranks of the sid judge's torch
(generate_dcp) and its Python peer, dcp_to_torch_save, runs in that judge.
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
    # Tensor health: NaN/Inf counts and the range of the finite values of every tensor.
    "stats": "sd = torch.load(src)\nfor k, v in sd.items():\n    f = v[torch.isfinite(v)]\n"
             "    print(k, int(torch.isnan(v).sum()), int(torch.isinf(v).sum()), f.min().item(), f.max().item(), "
             "f.double().mean().item(), f.abs().max().item())",
    # What people do today to make a file load with weights_only=True: load
    # it trusting it, turn what torch refuses into plain data, save again.
    "weights-only": "import argparse, numpy\n"
                    "def plain(x):\n"
                    "    if isinstance(x, argparse.Namespace): return {k: plain(v) for k, v in vars(x).items()}\n"
                    "    if isinstance(x, numpy.ndarray): return torch.from_numpy(x)\n"
                    "    if isinstance(x, numpy.generic): return x.item()\n"
                    "    if isinstance(x, dict) and type(x) is dict: return {k: plain(v) for k, v in x.items()}\n"
                    "    return x\n"
                    "ck = torch.load(src, weights_only=False)\ntorch.save(plain(ck), dst)",
    # The same, on a file that is one large numpy array (as torch.save's
    # default protocol 2 and as pickle_protocol=4 hold it).
    "weights-only-numpy": None,
    "weights-only-numpy4": None,
    # safetensors' own way (its convert script, save_pretrained): load it
    # all, then save_file. Run by the newest torch judge (scripts/judges.sh),
    # since Debian bookworm's torch 1.13 has no safetensors.
    "to-safetensors": "from safetensors.torch import save_file\nsd = torch.load(src)\nsave_file(dict(sd), dst)",
    # A .bin shard set to safetensors shards, shard by shard, as
    # safetensors' convert script and transformers do.
    "bin-set": "import json, os\nfrom safetensors.torch import save_file\n"
               "index = json.load(open(src))\nsrc_dir, out_dir = os.path.dirname(src), os.path.dirname(dst)\n"
               "os.makedirs(out_dir, exist_ok=True)\nnames = sorted(set(index['weight_map'].values()))\nwm = {}\n"
               "for i, name in enumerate(names):\n"
               "    out = f'model-{i + 1:05d}-of-{len(names):05d}.safetensors'\n"
               "    sd = torch.load(os.path.join(src_dir, name))\n"
               "    save_file(dict(sd), os.path.join(out_dir, out), metadata={'format': 'pt'})\n"
               "    wm.update({k: out for k in sd})\n"
               "json.dump({'metadata': index['metadata'], 'weight_map': wm}, "
               "open(os.path.join(out_dir, 'model.safetensors.index.json'), 'w'), indent=2, sort_keys=True)",
    # A torch.distributed.checkpoint directory to one torch.save file: torch's own way.
    "dcp": "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\ndcp_to_torch_save(src, dst)",
    # What a file cut at 60 % (a full disk, a killed copy) still holds. torch
    # cannot read such a file at all: there is no Python peer, only cp.
    "salvage": None,
}
TORCH_JOBS["weights-only-numpy"] = TORCH_JOBS["weights-only-numpy4"] = TORCH_JOBS["weights-only"]
# Jobs whose Python peer needs the newest torch (safetensors, torch.distributed.checkpoint).
JUDGED_JOBS = {"to-safetensors", "bin-set", "dcp"}
# The shard size of the bin-set job (the generated set's shards are 256 MiB).
BIN_SET_SHARD = "300MB"


def ckptfix_command(binary, job, src, dst, extra=()):
    return [*_ckptfix_command(binary, job, src, dst), *extra]


def _ckptfix_command(binary, job, src, dst):
    return {
        "convert": [binary, "convert", src, "-o", dst, "--force"],
        "strip-prefix": [binary, "strip-prefix", src, "-o", dst, "--force"],
        "remap": [binary, "remap", src, "--to", "cpu", "-o", dst, "--force"],
        "cast-bf16": [binary, "cast", src, "--dtype", "bf16", "-o", dst, "--force"],
        "inspect": [binary, "inspect", src],
        "verify": [binary, "verify", src],
        "stats": [binary, "inspect", "--stats", src],
        "weights-only": [binary, "weights-only", src, "-o", dst, "--force"],
        # The limit lets versions that held the whole pickle in memory read it.
        "weights-only-numpy": [binary, "weights-only", src, "-o", dst, "--force", "--limit", "max_pickle_bytes=8G"],
        "weights-only-numpy4": [binary, "weights-only", src, "-o", dst, "--force", "--limit", "max_pickle_bytes=8G"],
        "to-safetensors": [binary, "convert", src, "-o", dst, "--force"],
        "bin-set": [binary, "convert", src, "-o", dst, "--max-shard-size", BIN_SET_SHARD, "--force"],
        "dcp": [binary, "convert", src, "-o", dst, "--force"],
        "salvage": [binary, "salvage", src, "-o", dst, "--force"],
    }[job]


def generate(path, gib, device_tag=None, dtype="float32"):
    """A DataParallel-style state dict of about `gib` GiB in 64 MiB tensors
    (random float32 values, converted to `dtype`)."""
    script = f"""
import torch, collections
dtype = getattr(torch, {dtype!r})
size = torch.empty(0, dtype=dtype).element_size()
total = int({gib} * (1 << 30))
chunk = (64 << 20) // size  # elements per tensor: 64 MiB
sd = collections.OrderedDict()
i = 0
while total >= size:
    n = min(chunk, total // size)
    values = torch.rand(n) * 200 - 100 if dtype == torch.int8 else torch.rand(n)
    sd[f'module.layer{{i}}.weight'] = values.to(dtype)
    total -= size * n
    i += 1
sd._metadata = collections.OrderedDict({{'': {{'version': 1}}, 'module': {{'version': 1}}}})
if {device_tag!r}:
    import torch.serialization as s
    s.location_tag = lambda storage: {device_tag!r}
torch.save(sd, {path!r})
"""
    subprocess.run([PYTHON, "-c", script], check=True)


def generate_bin_set(index, gib):
    """A transformers-style .bin shard set of about `gib` GiB: 256 MiB shards
    of 64 MiB fp32 tensors and pytorch_model.bin.index.json."""
    script = f"""
import json, os, torch
total, shard, chunk = int({gib} * (1 << 30)), 256 << 20, 16 << 20
names = []
wm = {{}}
i = 0
while total >= 4:
    sd = {{}}
    while total >= 4 and sum(4 * v.numel() for v in sd.values()) < shard:
        n = min(chunk, total // 4)
        sd[f'model.layer{{i}}.weight'] = torch.rand(n)
        total -= 4 * n
        i += 1
    names.append(sd)
d = os.path.dirname({index!r})
for k, sd in enumerate(names):
    name = f'pytorch_model-{{k + 1:05d}}-of-{{len(names):05d}}.bin'
    torch.save(sd, os.path.join(d, name))
    wm.update({{key: name for key in sd}})
size = sum(4 * v.numel() for sd in names for v in sd.values())
json.dump({{'metadata': {{'total_size': size}}, 'weight_map': wm}}, open({index!r}, 'w'), indent=2, sort_keys=True)
"""
    os.makedirs(os.path.dirname(index), exist_ok=True)
    subprocess.run([PYTHON, "-c", script], check=True)


def generate_dcp(directory, gib):
    """A torch.distributed.checkpoint directory of about `gib` GiB, saved by 2
    ranks (gloo on CPU, torch.multiprocessing.spawn, init_method file://) of
    the sid judge's torch: 64 MiB fp32 tensors (4096x4096) as DTensors,
    Shard(0) and Shard(1) in turn, so each rank writes one __R_0.distcp of
    half the size. Each rank makes the full tensor from a seed and keeps its
    half (DTensor.from_local): nothing is scattered."""
    script = f"""
import os, sys, tempfile, torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

def rank(r, init, out):
    dist.init_process_group("gloo", init_method="file://" + init, rank=r, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    total, n, sd, i = int({gib} * (1 << 30)), 4096, {{}}, 0
    while total > 0:
        full = torch.rand(n, n, generator=torch.Generator().manual_seed(i))
        dim = i % 2
        local = torch.tensor_split(full, 2, dim)[r].contiguous()
        sd[f"model.layer{{i}}.weight"] = DTensor.from_local(local, mesh, [Shard(dim)], run_check=False,
                                                            shape=full.shape, stride=full.stride())
        total -= 4 * n * n
        i += 1
    dcp.save({{"model": sd, "step": 1000}}, checkpoint_id=out)
    dist.barrier()
    # not destroy_process_group, which can hang with gloo after the save (seen
    # with torch 2.6, tests/interop/test_dcp.py): leave at once, exit code 0
    os._exit(0)

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank, args=(os.path.join(tmp, "pg"), {directory!r}), nprocs=2, join=True)
"""
    os.environ["CKPTFIX_JUDGE_BIND"] = os.path.dirname(directory)
    script_path = directory + ".py"
    with open(script_path, "w") as f:  # a file: spawned ranks re-import their __main__
        f.write(script)
    start = time.perf_counter()
    subprocess.run([os.path.join(REPO, "scripts", "judges.sh"), "run", "sid", "/usr/bin/python3", script_path],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.remove(script_path)
    print(f"# generated {directory} with 2 ranks of the sid judge's torch in {time.perf_counter() - start:.1f} s",
          file=sys.stderr, flush=True)


def generate_refused(path, gib):
    """A training checkpoint torch >= 2.6 refuses by default: the state dict of
    generate() plus an argparse Namespace, numpy scalars and a numpy array of
    1/16 of the size (what Lightning- and YOLO-style scripts save)."""
    state_dict = path + ".sd.pt"
    if not os.path.exists(state_dict):
        generate(state_dict, gib)
    script = f"""
import argparse, numpy, torch
sd = torch.load({state_dict!r})
ck = {{'state_dict': sd, 'epoch': numpy.int64(3), 'best': numpy.float64(0.25),
      'args': argparse.Namespace(lr=0.1, name='run'),
      'mask': numpy.ones(int({gib} * (1 << 30)) // 16 // 4, dtype=numpy.float32)}}
torch.save(ck, {path!r})
"""
    subprocess.run([PYTHON, "-c", script], check=True)


def generate_numpy(path, gib, protocol):
    """A checkpoint the default torch.load refuses that is one float32 numpy
    array of `gib` GiB (random values, so about half its bytes are >= 0x80 and
    take two bytes of UTF-8 at protocol 2) and a numpy scalar."""
    script = f"""
import numpy, torch
array = numpy.random.default_rng(0).random(int({gib} * (1 << 30)) // 4, dtype=numpy.float32)
torch.save({{'epoch': numpy.int64(3), 'array': array}}, {path!r}, pickle_protocol={protocol})
"""
    subprocess.run([PYTHON, "-c", script], check=True)


def timed(command, outputs=()):
    """(wall seconds, peak RSS MiB) of one run.

    Before each run (not timed) the outputs are removed and dirty pages are
    written back (sync), so every command starts from the same state: it
    writes a new file, and no earlier run's write-back competes with it."""
    for path in outputs:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    os.sync()
    with tempfile.NamedTemporaryFile(mode="r") as report:
        start = time.perf_counter()
        proc = subprocess.run([TIME, "-f", "%M", "-o", report.name, *command],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"failed: {' '.join(command)}\n{proc.stderr}")
        rss_kib = int(report.read().strip().splitlines()[-1])
    return wall, rss_kib / 1024


def run_case(binary, job, src, workdir, runs, peers, baseline=None, args=(), baseline_args=()):
    dst = os.path.join(workdir, {"to-safetensors": "out.safetensors", "bin-set": "out-set/model.safetensors"}.get(job, "out.pt"))
    copy = os.path.join(workdir, "copy.pt")
    commands = {"ckptfix": ckptfix_command(binary, job, src, dst, args)}
    if baseline:
        commands["baseline"] = ckptfix_command(baseline, job, src, dst, baseline_args)
    if "cp" in peers and job == "bin-set":  # the whole set
        copy = os.path.join(workdir, "copy-set")
        commands["cp"] = ["cp", "-r", os.path.dirname(src), copy]
    elif "cp" in peers and job == "dcp":  # the whole directory
        copy = os.path.join(workdir, "copy-dcp")
        commands["cp"] = ["cp", "-r", src, copy]
    elif "cp" in peers and job not in ("inspect", "verify", "stats"):
        commands["cp"] = ["cp", src, copy]
    if "torch" in peers and TORCH_JOBS[job] is not None:
        python = [PYTHON]
        if job in JUDGED_JOBS:  # the files must be visible inside the judge's root
            os.environ["CKPTFIX_JUDGE_BIND"] = workdir
            python = [os.path.join(REPO, "scripts", "judges.sh"), "run", "sid", "/usr/bin/python3"]
        commands["torch"] = [*python, "-c", f"import torch, collections\nsrc, dst = {src!r}, {dst!r}\n{TORCH_JOBS[job]}"]
    results = {name: [] for name in commands}
    outputs = (os.path.dirname(dst), copy) if job == "bin-set" else (dst, copy)
    for name, command in commands.items():  # warm-up, not counted
        timed(command, outputs)
    for _ in range(runs):
        for name, command in commands.items():
            results[name].append(timed(command, outputs))
    summary = {name: (statistics.median(w for w, _ in r), max(m for _, m in r)) for name, r in results.items()}
    # Ratios pair by pair (runs of one round follow each other), then the
    # median: robust to the machine's speed drifting between rounds.
    ratios = {}
    for peer in ("cp", "torch", "baseline"):
        if peer in results:
            a, b = results["ckptfix"], results[peer]
            ratios[peer] = statistics.median((y[0] / x[0]) if peer == "torch" else (x[0] / y[0]) for x, y in zip(a, b))
    return summary, ratios


def prefault_memory():
    """Touches most free memory once. On a virtual machine, the first use of a
    guest page costs a fault in the host (here ~2.5 us per 4 KiB page, so
    ~0.6 s per GiB): without this, whichever command first allocates page
    cache from never-used memory looks several times slower than it is."""
    available = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable")).split()[1]) * 1024
    chunk, blocks = 1 << 28, []
    for _ in range(max(0, (available - (3 << 30)) // chunk)):
        block = bytearray(chunk)
        block[::4096] = b"\x01" * len(range(0, chunk, 4096))
        blocks.append(block)
    del blocks


def generate_many(directory, count):
    """`count` small DataParallel-style checkpoints (4 tensors, 1 MiB each file)."""
    os.makedirs(directory, exist_ok=True)
    script = (f"import collections, torch\n"
              f"for i in range({count}):\n"
              f"    torch.manual_seed(i)\n"
              f"    sd = collections.OrderedDict(('module.l%d.weight' % j, torch.rand(256, 256)) for j in range(4))\n"
              f"    torch.save(sd, {directory!r} + '/ckpt_%03d.pt' % i)\n")
    subprocess.run([PYTHON, "-c", script], check=True)


def run_batch(binary, workdir, count, runs):
    """Wall time of one command converting `count` files, with --jobs 1 and --jobs 2."""
    src = os.path.join(workdir, f"many-{count}")
    if not os.path.isdir(src):
        generate_many(src, count)
    out = os.path.join(workdir, "many-out")
    times = {1: [], 2: []}
    for _ in range(runs + 1):
        for jobs in (1, 2):
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            wall, _ = timed([binary, "fix", "--strip-prefix", "-r", src, "--out-dir", out, "--jobs", str(jobs), "-q"])
            times[jobs].append(wall)
    one, two = statistics.median(times[1][1:]), statistics.median(times[2][1:])
    speedups = [a / b for a, b in zip(times[1][1:], times[2][1:])]
    print(f"| batch: {count} files of 1 MiB, fix --strip-prefix -r | {one:.3f} | {two:.3f} | "
          f"{statistics.median(speedups):.2f}x |", flush=True)


def main():
    global PYTHON
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", default=os.path.join(REPO, "build", "ckptfix"))
    parser.add_argument("--sizes", default="1", help="comma-separated GiB, e.g. 0.5,1,2,4")
    parser.add_argument("--jobs", default="convert", help="comma-separated: " + ",".join(TORCH_JOBS))
    parser.add_argument("--peers", default="cp,torch", help="comma-separated: cp,torch (or empty)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where to generate files (default: a temp dir)")
    parser.add_argument("--no-prefault", action="store_true", help="skip touching free memory first (see prefault_memory)")
    parser.add_argument("--batch", type=int, default=0, help="also time N small files with --jobs 1 and 2")
    parser.add_argument("--baseline", default=None,
                        help="another ckptfix binary (e.g. the last release) run in the same rounds: adds ckptfix/baseline")
    parser.add_argument("--args", default="", help="options added to every ckptfix command, e.g. '--gpu require'")
    parser.add_argument("--baseline-args", default="", help="options added to every baseline command, e.g. '--gpu off'")
    parser.add_argument("--python", default=PYTHON, help="the torch that generates files and is the peer (default %(default)s)")
    parser.add_argument("--saved-on", default=None, help="the device generated files say they were saved on, e.g. cuda:0")
    parser.add_argument("--dtype", default="float32", help="the generated tensors' dtype: float32, bfloat16, float16, int8, ...")
    args = parser.parse_args()
    PYTHON = args.python
    if not args.no_prefault:
        prefault_memory()
    peers = [p for p in args.peers.split(",") if p]
    workdir = args.workdir or tempfile.mkdtemp(prefix="ckptfix-bench-")
    os.makedirs(workdir, exist_ok=True)
    print(f"# machine: {os.cpu_count()} cores; {subprocess.run(['uname', '-srm'], capture_output=True, text=True).stdout.strip()}")
    extra_head = " baseline s | ckptfix/baseline | baseline peak MiB |" if args.baseline else ""
    print("| job | size | ckptfix s | cp s | torch s | ckptfix/cp | torch/ckptfix | ckptfix peak MiB | torch peak MiB |"
          + extra_head)
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.baseline else ""))
    try:
        for size in [float(s) for s in args.sizes.split(",")]:
            src = os.path.join(workdir, f"src-{size}g.pt" if args.dtype == "float32" else f"src-{size}g-{args.dtype}.pt")
            for job in args.jobs.split(","):
                job_src = src
                if job not in ("bin-set", "dcp") and not os.path.exists(src):
                    generate(src, size, args.saved_on, args.dtype)
                if job == "bin-set":
                    job_src = os.path.join(workdir, f"bin-set-{size}g", "pytorch_model.bin.index.json")
                    if not os.path.exists(job_src):
                        generate_bin_set(job_src, size)
                if job == "dcp":
                    job_src = os.path.join(workdir, f"dcp-{size}g")
                    if not os.path.exists(job_src):
                        generate_dcp(job_src, size)
                if job == "salvage":  # the generated file cut at 60 %
                    job_src = os.path.join(workdir, f"cut60-{size}g.pt")
                    if not os.path.exists(job_src):
                        with open(src, "rb") as f_in, open(job_src, "wb") as f_out:
                            shutil.copyfileobj(f_in, f_out)
                            f_out.truncate(os.path.getsize(src) * 6 // 10)
                if job == "weights-only":  # needs a file the default torch.load refuses
                    job_src = os.path.join(workdir, f"refused-{size}g.pt")
                    if not os.path.exists(job_src):
                        generate_refused(job_src, size)
                if job.startswith("weights-only-numpy"):
                    protocol = 4 if job.endswith("4") else 2
                    job_src = os.path.join(workdir, f"numpy-p{protocol}-{size}g.pt")
                    if not os.path.exists(job_src):
                        generate_numpy(job_src, size, protocol)
                r, ratios = run_case(args.ckptfix, job, job_src, workdir, args.runs, peers, args.baseline,
                                     args.args.split(), args.baseline_args.split())
                ck, ck_mem = r["ckptfix"]
                cp = r.get("cp", (None, None))[0]
                th, th_mem = r.get("torch", (None, None))
                fmt = lambda x, f="{:.3f}": "-" if x is None else f.format(x)
                print(f"| {job} | {size:g} GiB | {fmt(ck)} | {fmt(cp)} | {fmt(th)} | "
                      f"{fmt(ratios.get('cp'), '{:.2f}x')} | {fmt(ratios.get('torch'), '{:.1f}x')} | "
                      f"{ck_mem:.0f} | {fmt(th_mem, '{:.0f}')} |" +
                      (f" {fmt(r['baseline'][0])} | {fmt(ratios.get('baseline'), '{:.3f}x')} | {r['baseline'][1]:.0f} |"
                       if args.baseline else ""), flush=True)
        if args.batch:
            print()
            print("| batch | --jobs 1 s | --jobs 2 s | speed-up |")
            print("|---|---|---|---|")
            run_batch(args.ckptfix, workdir, args.batch, args.runs)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
