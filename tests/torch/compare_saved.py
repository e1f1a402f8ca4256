#!/usr/bin/python3
"""Judges ckptfix::libtorch::save_state_dict with real torch.

  compare_saved.py SAVED FIXTURE [--key K]

SAVED (written from C++ with save_state_dict, from the tensors
load_state_dict read out of FIXTURE's state dict at K) must load with plain
torch.load as an OrderedDict equal to that state dict: keys and order,
dtypes, shapes, strides, offsets, values bit for bit, storage sharing, and
saved location 'cpu'. Exit 0 when equal.
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import torch_compare  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("saved")
    parser.add_argument("fixture")
    parser.add_argument("--key", default="")
    args = parser.parse_args()
    expected = torch.load(args.fixture, map_location="cpu", weights_only=False)  # a trusted fixture
    for part in filter(None, args.key.split("/")):
        expected = expected[part]
    # The C++ side sees plain tensors: no _metadata, no Parameter wrappers.
    expected = collections.OrderedDict((k, v.detach().requires_grad_(v.requires_grad)) for k, v in expected.items())
    actual = torch.load(args.saved)  # the default load (weights_only=True since 2.6); every storage on the CPU
    if type(actual) is not collections.OrderedDict:
        print(f"torch.load returned {type(actual).__name__}, expected OrderedDict")
        return 1
    diffs = torch_compare.compare(expected, actual, None, None, torch_compare.CompareOptions(check_aliasing=False))
    for d in diffs:
        print(d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
