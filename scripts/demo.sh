#!/bin/sh
# Sets everything up, then repairs a bundled checkpoint: a training
# checkpoint saved from a DataParallel model on cuda:0, which plain
# torch.load refuses on a machine without a GPU.
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
echo "== ckptfix convert $SAMPLE -o $OUT/training.pt"
./build/ckptfix convert "$SAMPLE" -o "$OUT/training.pt" --force

echo
echo "== the converted file loads in torch like the original"
/usr/bin/python3 tests/interop/torch_compare.py "$SAMPLE" "$OUT/training.pt"
