#!/usr/bin/python3
"""Issue 66, item 00: what torch reads of an archive is what ckptfix checks.

tests/attacks/zip_differentials.py writes archives that readers read
differently: each holds a harmless data.pkl (or tensor, or byteorder) that a
reader following the zip specification takes, and another one that torch's
own reader (miniz) takes. For each, judged by this interpreter's torch:

  * control: torch.load(weights_only=False) in a fresh process and directory
    does what the hostile reading says (touches the canary, or loads the other
    tensor bytes), where this torch release reads it so;
  * refusal: check, verify, inspect and every rewriting command exit 1 naming
    the ambiguity, write nothing, and never touch the canary.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "attacks"))
import support  # noqa: E402
import torch  # noqa: E402
import zip_differentials  # noqa: E402

CANARY = "ckptfix-pwned-zip"

COMMANDS = [
    ["check"],
    ["verify"],
    ["inspect", "--json"],
    ["convert", "-o", "out.pt"],
    ["strip-prefix", "--auto", "-o", "out.pt"],
    ["cast", "--dtype", "bf16", "-o", "out.pt"],
    ["convert", "-o", "out.safetensors"],
]

# What each file's hostile reading does in torch, from which release on.
LOAD = """
import sys, torch
try:
    value = torch.load(sys.argv[1], weights_only=False) if tuple(map(int, torch.__version__.split('.')[:2])) >= (1, 13) else None
    print(repr({k: v.tolist() for k, v in value.items()} if isinstance(value, dict) and value and
               all(isinstance(v, torch.Tensor) for v in value.values()) else value))
except Exception as e:
    print('refused:', type(e).__name__, str(e)[:200])
"""


class ZipDifferentialTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ckptfix-zipdiff-")
        cls.files = os.path.join(cls.dir, "files")
        # The canary is created relative to the cwd of whoever runs the payload.
        subprocess.run([sys.executable, zip_differentials.__file__, cls.files, CANARY], check=True)
        cls.version = support.torch_version()

    def torch_load(self, name):
        """torch's reading, in a fresh directory: (what load printed, whether the canary appeared)."""
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run([sys.executable, "-c", LOAD, os.path.join(self.files, name)], cwd=cwd,
                                  capture_output=True, text=True, timeout=120)
            return proc.stdout.strip(), os.path.exists(os.path.join(cwd, CANARY))

    def assert_refused(self, name, pattern):
        for command in COMMANDS:
            with self.subTest(file=name, command=command[0]):
                with tempfile.TemporaryDirectory() as cwd:
                    args = command[:1] + [os.path.join(self.files, name)] + command[1:]
                    proc = support.run(*args, cwd=cwd)
                    self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
                    said = proc.stdout + proc.stderr
                    if command[0] == "inspect":
                        said = json.loads(proc.stdout)["inputs"][0].get("error", "")
                    self.assertRegex(said, pattern)
                    self.assertEqual(os.listdir(cwd), [], "a refused file left something behind, or ran")

    def test_names_that_differ_in_case(self):
        ran = [self.torch_load(name)[1] for name in ("case_names_a.pt", "case_names_b.pt")]
        self.assertTrue(any(ran), f"torch {torch.__version__} took the harmless record in both orders")
        for name in ("case_names_a.pt", "case_names_b.pt"):
            self.assert_refused(name, r"differ only in case.*ambiguous")

    def test_storages_that_differ_in_case(self):
        printed, _ = self.torch_load("case_storage.pt")
        self.assertIn("666.0", printed, f"torch {torch.__version__} read the record named in lower case: {printed}")
        self.assert_refused("case_storage.pt", r"differ only in case")

    def test_a_byteorder_record_in_capitals_is_read(self):
        printed, _ = self.torch_load("case_byteorder.pt")
        if self.version >= (2, 1):  # byteorder is read from 2.1 on: the tensor is byte-swapped
            self.assertNotIn("[1.0, 2.0]", printed, printed)
        # ckptfix finds the record as torch does: big-endian bytes, read as such.
        proc = support.run("inspect", "--json", os.path.join(self.files, "case_byteorder.pt"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("big", json.dumps(json.loads(proc.stdout)["inputs"][0]).lower())

    def test_an_end_record_in_the_comment(self):
        printed, ran = self.torch_load("end_in_comment.pt")
        self.assertTrue(ran, f"torch {torch.__version__} did not take the last end record: {printed}")
        self.assert_refused("end_in_comment.pt", r"end of central directory.*ambiguous")

    def test_a_zip64_extra_read_two_ways(self):
        printed, ran = self.torch_load("zip64_extra.pt")
        if self.version >= (2, 6):  # miniz 3.0.2 as torch patched it
            self.assertTrue(ran, f"torch {torch.__version__} did not read the extra as miniz does: {printed}")
        self.assert_refused("zip64_extra.pt", r"zip64 extra field")

    def test_a_record_the_directory_does_not_name(self):
        self.assert_refused("hidden_record.pt", r"belong to no record.*ambiguous")

    def test_a_deflated_storage_record(self):
        # torch.load(mmap=True) maps a storage where it lies: a deflated record is read as its
        # compressed bytes (no error), while torch.load without mmap inflates it, as ckptfix does.
        import zipfile
        plain, deflated, out = (os.path.join(self.dir, n) for n in ("stored.pt", "deflated.pt", "restored.pt"))
        torch.save({"w": torch.arange(64.0)}, plain)
        with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(deflated, "w") as zout:
            for info in zin.infolist():
                method = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
                zout.writestr(info.filename, zin.read(info), compress_type=method)
        self.assertTrue(torch.equal(torch.load(deflated)["w"], torch.arange(64.0)))
        if self.version >= (2, 1):  # mmap=True from 2.1 on
            self.assertFalse(torch.equal(torch.load(deflated, mmap=True)["w"], torch.arange(64.0)),
                             f"torch {torch.__version__} inflated the record under mmap=True")
        proc = support.run("check", deflated)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(proc.stdout + proc.stderr, r"record '[^']*/data/0': is deflated: torch.load\(mmap=True\)")
        support.run("convert", deflated, "-o", out, check=0)
        self.assertEqual(support.run("check", out).returncode, 0)
        self.assertTrue(torch.equal(torch.load(out)["w"], torch.arange(64.0)))
        if self.version >= (2, 1):
            self.assertTrue(torch.equal(torch.load(out, mmap=True)["w"], torch.arange(64.0)))


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
