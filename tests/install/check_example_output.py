#!/usr/bin/python3
"""Judges the LibTorch example's output with Python torch: the nested state
dict of a CUDA-saved DataParallel checkpoint, loaded onto the CPU with
'module.' stripped and cast to bfloat16, must equal what Python gets doing
the same (Tensor.to on whole storages, one thread)."""
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import torch_compare  # noqa: E402

torch.set_num_threads(1)
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=False)["state_dict"]  # a trusted fixture
expected = collections.OrderedDict()
for key, t in sd.items():
    if t.is_floating_point():
        storage = t.storage()
        whole = torch.empty(0, dtype=t.dtype).set_(storage, 0, (storage.size(),), (1,)).to(torch.bfloat16)
        t = torch.empty(0, dtype=torch.bfloat16).set_(whole.storage(), t.storage_offset(), t.size(), t.stride())
    expected[key[len("module."):]] = t
actual = torch.load(sys.argv[2])  # the default load; saved by LibTorch on the CPU: no map_location needed
diffs = torch_compare.compare(expected, actual, None, None, torch_compare.CompareOptions(check_aliasing=False))
for d in diffs:
    print(d)
sys.exit(1 if diffs else 0)
