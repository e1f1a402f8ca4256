#!/bin/sh
# A real > 4 GiB round trip judged by torch (too big for the test suite: it
# needs ~10 GB of disk and ~10 GB of memory for torch's side). torch saves a
# 4.4 GiB tensor (a zip64 record, and records past the 4 GiB offset),
# ckptfix converts it (peak memory printed), and torch loads the output and
# compares it with the original.
set -eu
CKPTFIX="${CKPTFIX:-$(cd "$(dirname "$0")/.." && pwd)/build/ckptfix}"
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
/usr/bin/python3 -c "
import torch
torch.save({'big': torch.arange(4500 * 1024 * 1024 // 8, dtype=torch.int64), 'small': torch.ones(3)}, 'big.pt')"
/usr/bin/time -f "ckptfix convert: %e s, peak %M KiB" "$CKPTFIX" convert big.pt -o out.pt
/usr/bin/python3 -c "
import torch, zipfile
print([(i.filename, i.file_size, i.header_offset) for i in zipfile.ZipFile('out.pt').infolist()])
a, b = torch.load('big.pt'), torch.load('out.pt')
assert torch.equal(a['big'], b['big']) and torch.equal(a['small'], b['small'])
print('torch: equal')"
