#!/usr/bin/python3
"""Every one of the 2^32 float32 bit patterns cast by `ckptfix cast` to
float16, bfloat16, float8_e4m3fn and float8_e5m2, compared bit for bit with
torch's Tensor.to() (single-threaded, as ckptfix models it).

Run once by hand, not by ctest (minutes, and several GiB of temporary files):

    scripts/judges.sh run sid /usr/bin/python3 bench/exhaustive_casts.py \
        [--ckptfix build/ckptfix] [--chunk-log2 26] [--workdir DIR] [--first N --count M]

ckptfix models torch 2.14 with AVX2/AVX512 kernels; under another judge the
script still runs and prints the mismatches (docs/format.md says which to
expect). The patterns go in chunks of 2^chunk-log2 elements (a multiple of
every vector block, so each chunk is all "block" elements), and each
checkpoint also holds the chunk's last 1013 patterns as a tensor of their own,
so every one of them is also converted in torch's tails (1013 = 15 blocks of
64 + 53). The totals line at the end gives mismatches per target and the time.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = collections.OrderedDict([("float16", torch.float16), ("bfloat16", torch.bfloat16)])
if hasattr(torch, "float8_e4m3fn"):
    TARGETS["float8_e4m3fn"] = torch.float8_e4m3fn
    TARGETS["float8_e5m2"] = torch.float8_e5m2
TAIL = 1013


def bits(t):
    return t.contiguous().view(torch.uint8).numpy().view({1: np.uint8, 2: np.uint16}[t.element_size()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckptfix", default=os.path.join(REPO, "build", "ckptfix"))
    parser.add_argument("--chunk-log2", type=int, default=26)
    parser.add_argument("--workdir", default=None, help="where the temporary checkpoints go (default: a temp dir)")
    parser.add_argument("--first", type=int, default=0, help="first chunk")
    parser.add_argument("--count", type=int, default=None, help="chunks to run (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunk = 1 << args.chunk_log2
    chunks = (1 << 32) // chunk
    last = chunks if args.count is None else min(chunks, args.first + args.count)
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    print(f"torch {torch.__version__} ({capability}), ckptfix {args.ckptfix}: chunks {args.first}..{last - 1} "
          f"of {chunks} x {chunk} patterns, targets {', '.join(TARGETS)}", flush=True)
    mismatches = collections.Counter()
    examples = {}
    compared = 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        src = os.path.join(tmp, "in.pt")
        for c in range(args.first, last):
            patterns = np.arange(c * chunk, (c + 1) * chunk, dtype=np.uint64).astype(np.uint32)
            x = torch.from_numpy(patterns.view(np.int32)).view(torch.float32)
            sd = collections.OrderedDict([("chunk", x), ("tail", x[-TAIL:].clone())])
            torch.save(sd, src)
            for name, dtype in TARGETS.items():
                out = os.path.join(tmp, f"out-{name}.pt")
                flag = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}.get(name, name)
                subprocess.run([args.ckptfix, "cast", "-q", "-f", "--no-verify", "--dtype", flag, src, "-o", out],
                               check=True)
                actual = torch.load(out)
                for key, t in sd.items():
                    a, b = bits(actual[key]), bits(t.to(dtype))
                    differ = np.nonzero(a != b)[0]
                    compared += len(a)
                    if len(differ):
                        mismatches[(name, key)] += len(differ)
                        i = differ[0]
                        examples.setdefault((name, key), f"{int(bits(t.view(torch.int32))[i]) & 0xFFFFFFFF:#010x}: "
                                                         f"ckptfix {a[i]:#x}, torch {b[i]:#x}")
                os.remove(out)
            done = c - args.first + 1
            elapsed = time.monotonic() - start
            print(f"chunk {c}: {done}/{last - args.first} done, {elapsed:.0f} s, "
                  f"mismatches so far {sum(mismatches.values())}", flush=True)
    elapsed = time.monotonic() - start
    for name in TARGETS:
        for key in ("chunk", "tail"):
            n = mismatches[(name, key)]
            print(f"float32 -> {name} ({key} positions): {n} mismatches" +
                  (f", e.g. {examples[(name, key)]}" if n else ""))
    print(f"total: {compared} conversions compared, {sum(mismatches.values())} mismatches, {elapsed:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
