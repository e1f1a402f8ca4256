#!/usr/bin/python3
"""Judges a LibTorch program's forward pass with Python torch (issue 52).

  check_forward.py CHECKPOINT FORWARD

CHECKPOINT is the CUDA-saved DataParallel training fixture; FORWARD is what
examples/load_state_dict.cc --forward saved: {"input": x, "output": y}, y
being TinyCNN in eval mode on x after its state dict was loaded in C++. Python
loads the same state dict the way a user does (map_location="cpu", the
"module." prefix stripped, load_state_dict strict), runs the same model on x,
and the outputs must be equal, element for element: run by the torch whose
LibTorch the program used, the kernels are the same.
"""
import sys

import torch
from torch import nn


class TinyCNN(nn.Module):
    """fixtures/make_fixtures.py's model."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).flatten(1))


def main():
    checkpoint, forward = sys.argv[1], sys.argv[2]
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]  # a trusted fixture
    model = TinyCNN()
    model.load_state_dict({k[len("module."):]: v for k, v in state.items()}, strict=True)
    model.eval()
    saved = torch.load(forward)  # written by LibTorch through ckptfix: plain tensors
    with torch.no_grad():
        expected = model(saved["input"])
    got = saved["output"]
    if got.shape != expected.shape or got.dtype != expected.dtype or not torch.equal(got, expected):
        diff = (got.double() - expected.double()).abs().max().item() if got.shape == expected.shape else None
        print(f"check_forward: torch {torch.__version__}: the C++ forward output differs from Python's "
              f"(shape {tuple(got.shape)} vs {tuple(expected.shape)}, max |diff| {diff})\n{got}\n{expected}")
        return 1
    print(f"check_forward: torch {torch.__version__}: the C++ forward output equals Python's {tuple(got.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
