#!/usr/bin/python3
"""Zip64 records written by ckptfix, judged by Python's zipfile.

tests/tools/write_sparse_zip64 writes, with ckptfix's zip writer, an archive
with a 5 GiB record and records whose local headers lie past 4 GiB, into a
sparse file (zeros become holes, so this costs no disk and little time).
Python's zipfile must find every record with the right size and offset,
read the records past 4 GiB, and accept their CRCs; the data must be 64-byte
aligned as torch lays it out.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

WRITER = None


class Zip64(unittest.TestCase):
    def test_python_zipfile_reads_records_past_4gib(self):
        import zipfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.zip")
            subprocess.run([WRITER, path], check=True)
            with zipfile.ZipFile(path) as z:
                infos = {i.filename: i for i in z.infolist()}
                self.assertEqual(list(infos), ["big/data.pkl", "big/data/0", "big/data/1", "big/version"])
                self.assertEqual(infos["big/data/0"].file_size, 5 << 30)
                self.assertGreater(infos["big/data/1"].header_offset, 1 << 32)
                self.assertEqual(z.read("big/data/1"), b"tail")  # checks the CRC too
                self.assertEqual(z.read("big/version"), b"3\n")
                with open(path, "rb") as f:
                    for info in infos.values():
                        f.seek(info.header_offset)
                        header = f.read(30)
                        name_len, extra_len = struct.unpack("<HH", header[26:30])
                        data = info.header_offset + 30 + name_len + extra_len
                        self.assertEqual(data % 64, 0, info.filename)
                # The 5 GiB record's CRC, computed by zlib over 5 GiB of zeros in 64 MiB steps.
                crc = 0
                zero = bytes(64 << 20)
                for _ in range(80):
                    crc = zlib.crc32(zero, crc)
                self.assertEqual(infos["big/data/0"].CRC, crc)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--writer", required=True)
    args, rest = parser.parse_known_args()
    WRITER = args.writer
    unittest.main(argv=[sys.argv[0]] + rest)
