#!/usr/bin/python3
"""docs/architecture.md's layers, held against the code (issue 68):

  1. includes: each folder of src/ includes only the public headers and
     folders of its own layer or below (the table below is the doc's);
  2. calls: no two source files call each other (read from the object files
     of the core library and the CLI: a symbol one defines that the other
     uses, both ways).

Usage: layers_check.py BUILD_DIR. Exit 1 naming every breach."""
import collections
import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS = {1: ["io", "rerun", "dtype_kernels"], 2: ["zip", "pickle", "json", "safetensors"], 3: ["model"],
          4: ["formats", "bytes", "salvage"], 5: ["passes", "verify", "diff", "check", "stats"], 6: ["write"],
          7: ["libtorch", "cli"]}
LAYER = {folder: layer for layer, folders in LAYERS.items() for folder in folders}


def include_breaches():
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "src", "*", "*.*"))):
        folder = os.path.basename(os.path.dirname(path))
        if folder not in LAYER:
            out.append(f"{os.path.relpath(path, REPO)}: folder '{folder}' is in no layer of docs/architecture.md")
            continue
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'#include "([a-z_]+)/', line)
                if not m or m.group(1) == "ckptfix":
                    continue
                target = m.group(1)
                if LAYER.get(target, 99) > LAYER[folder]:
                    out.append(f"{os.path.relpath(path, REPO)}:{n}: layer {LAYER[folder]} includes {target}/ "
                               f"(layer {LAYER.get(target, '?')})")
    return out


def symbols(obj, *flags):
    text = subprocess.run(["nm", "-C", *flags, obj], capture_output=True, text=True, check=True).stdout
    return text.splitlines()


def mutual_calls(build):
    out = []
    for target in ("ckptfix_core", "ckptfix_cli"):
        objs = glob.glob(os.path.join(build, "CMakeFiles", target + ".dir", "src", "**", "*.o"), recursive=True)
        if not objs:
            out.append(f"no object files of {target} under {build}: build it first")
            continue
        defined, used = {}, {}
        for obj in objs:
            name = obj.split(".dir" + os.sep, 1)[1][:-2]
            source = os.path.join(REPO, name)
            if not os.path.exists(source):
                continue  # a stale object of a file since removed
            for line in symbols(obj, "--defined-only"):
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[1] == "T":
                    defined.setdefault(parts[2], name)
            used[name] = {l.strip().split(" ", 1)[1] for l in symbols(obj, "-u") if l.strip().startswith("U ")}
        calls = collections.defaultdict(set)
        for name, symbols_used in used.items():
            for s in symbols_used:
                if defined.get(s, name) != name:
                    calls[name].add(defined[s])
        for a in sorted(calls):
            for b in sorted(calls[a]):
                if a < b and a in calls.get(b, ()):
                    out.append(f"{a} and {b} call each other")
    return out


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build"))
    breaches = include_breaches() + mutual_calls(build)
    for b in breaches:
        print(b)
    print(f"layers: {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
