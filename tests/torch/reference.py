#!/usr/bin/python3
"""Reference data for the LibTorch bridge tests, produced by real torch.

  reference.py FILE [--key K] [--strip P] [--dtype float16|bfloat16|float32|float64]

Prints JSON: the state dict's entries in order, each with name, dtype, shape,
stride, storage offset, requires_grad, a storage group id (equal ids share a
storage) and the hex of its elements' bytes in row-major order, as Python's
torch.load(map_location='cpu') gives them; casts are Tensor.to on whole
storages (one thread), which is what ckptfix::libtorch::load_state_dict does.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import torch_compare  # noqa: E402

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def select(obj, key):
    if key:
        for part in key.split("/"):
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--key", default="")
    parser.add_argument("--strip", default="")
    parser.add_argument("--dtype", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sd = select(torch.load(args.file, map_location="cpu", weights_only=False), args.key)
    target = getattr(torch, args.dtype) if args.dtype else None
    converted, groups, out = {}, {}, []
    for name, original in sd.items():
        t = original.detach()
        sid = torch_compare.storage_id(t)
        if target is not None and t.dtype in FLOATS and t.dtype != target:
            if sid not in converted:
                storage = t.storage()
                whole = torch.empty(0, dtype=t.dtype).set_(storage, 0, (storage.size(),), (1,))
                converted[sid] = whole.to(target)
            t = torch.empty(0, dtype=target).set_(converted[sid].storage(), t.storage_offset(), t.size(), t.stride())
        if args.strip and name.startswith(args.strip):
            name = name[len(args.strip):]
        out.append({
            "name": name,
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "offset": t.storage_offset(),
            "requires_grad": bool(original.requires_grad),
            "group": groups.setdefault(sid, len(groups)),
            "data": torch_compare._element_bytes(t).tobytes().hex(),
        })
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
