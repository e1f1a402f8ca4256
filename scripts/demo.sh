#!/bin/sh
# Sets everything up, then repairs a bundled checkpoint: a training
# checkpoint saved from a DataParallel model on cuda:0, which plain
# torch.load refuses on a machine without a GPU and whose keys do not fit a
# plain model.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh
SAMPLE=fixtures/training_dp_cuda.pt
OUT="${TMPDIR:-/tmp}/ckptfix-demo"
mkdir -p "$OUT"

echo
echo "== ckptfix inspect $SAMPLE"
./build/ckptfix inspect "$SAMPLE"

echo
echo "== ckptfix fix --auto-prefix --to cpu $SAMPLE -o $OUT/training.pt"
./build/ckptfix fix --auto-prefix --to cpu "$SAMPLE" -o "$OUT/training.pt" --force

echo
echo "== plain torch.load now works, and the state dict loads strictly into the unwrapped model"
/usr/bin/python3 - "$OUT/training.pt" <<'PY'
import sys, torch, torch.nn as nn
class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(8, 3)
ckpt = torch.load(sys.argv[1])
TinyCNN().load_state_dict(ckpt["state_dict"], strict=True)
print("torch.load + load_state_dict(strict=True): ok; epoch", ckpt["epoch"], "args", ckpt["args"])
PY
