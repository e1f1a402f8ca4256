#!/usr/bin/python3
"""Verification: `ckptfix verify`, the verification of every write, the GPU
load test's no-device path (and, with a device, its fault caught), and fault injection proving that no partial or
unverified output ever appears and that inputs are left untouched.

Faults are injected by the test-only build of the CLI,
ckptfix_fault_injection (docs/testing.md): --fault-injection PATH, else
CKPTFIX_FAULT_INJECTION_BIN, else <repo>/build/tests/ckptfix_fault_injection."""
import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import support  # noqa: E402
import torch  # noqa: E402
import torch_compare  # noqa: E402

FAULT_INJECTION = os.environ.get("CKPTFIX_FAULT_INJECTION_BIN",
                                 os.path.join(support.REPO, "build", "tests", "ckptfix_fault_injection"))

WRITERS = [  # every command that writes, with the options it needs
    ["convert"],
    ["strip-prefix"],
    ["add-prefix", "--prefix", "wrapped."],
    ["remap", "--to", "cpu"],
    ["cast", "--dtype", "bf16"],
    ["fix", "--auto-prefix", "--to", "cpu", "--dtype", "fp16"],
]


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def record_offset(path, name):
    """Data offset of a zip record (from its local header)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


class Verify(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def copy(self, name):
        dst = os.path.join(self.tmp, name)
        shutil.copy(support.fixture(name), dst)
        return dst

    def test_every_valid_fixture_verifies(self):
        for entry in support.manifest("valid"):
            with self.subTest(fixture=entry["file"]):
                proc = support.run("verify", "--json", support.fixture(entry["file"]), check=0)
                doc = json.loads(proc.stdout)["inputs"][0]
                self.assertEqual(doc["status"], "ok")
                gpu = doc["verification"]["gpu"]
                self.assertIn(gpu["status"], ("ok", "skipped"))
                if gpu["status"] == "skipped":
                    self.assertTrue(gpu["reason"], "a skipped GPU load test says why")
                if entry["format"] == "zip":
                    self.assertEqual(doc["verification"]["records_crc_checked"], doc["verification"]["records"])

    def test_damaged_tensor_record_is_named(self):
        path = self.copy("many_records.pt")
        offset, size = record_offset(path, "archive/data/299")
        flip_byte(path, offset + size // 2)
        proc = support.run("verify", path, check=1)
        self.assertRegex(proc.stderr, r"^ckptfix: error: '.*many_records.pt': archive/data/299: CRC-32 mismatch: "
                                      r"the archive records 0x[0-9a-f]{8} but the data gives 0x[0-9a-f]{8}; "
                                      r"the record is damaged; ckptfix salvage can recover 299 of 301 tensors\n$")

    def test_damaged_input_is_never_converted_to_safetensors(self):
        """safetensors has no CRCs of its own: a storage record of the input
        whose bytes do not match its CRC-32 must stop the conversion, whether
        the storage is streamed (small) or copied by the kernel (1 MiB and
        more, checked on its read-back), with the input blamed."""
        g = torch.Generator().manual_seed(25)
        path = os.path.join(self.tmp, "two.pt")
        torch.save({"big": torch.randn(1 << 19, generator=g), "small": torch.randn(1000, generator=g)}, path)
        root = os.path.splitext(os.path.basename(path))[0]
        for name, size in (("0", 1 << 21), ("1", 4000)):
            with self.subTest(storage=name):
                damaged = os.path.join(self.tmp, f"damaged{name}.pt")
                shutil.copy(path, damaged)
                offset, record_size = record_offset(damaged, f"{root}/data/{name}")
                self.assertEqual(record_size, size)
                flip_byte(damaged, offset + size // 2)
                out = os.path.join(self.tmp, f"out{name}.safetensors")
                proc = support.run("convert", damaged, "-o", out, "--gpu", "off", check=1)
                self.assertRegex(proc.stderr, rf"^ckptfix: error: '.*damaged{name}.pt': {root}/data/{name}: the input "
                                              r"record is damaged: its bytes have CRC-32 0x[0-9a-f]{8} but the archive "
                                              r"records 0x[0-9a-f]{8}\n$")
                self.assertFalse(os.path.exists(out))
        # Intact, the large storage is checked by the CRC-32 the input records.
        out = os.path.join(self.tmp, "out.safetensors")
        proc = support.run("convert", path, "-o", out, "--gpu", "off", "--json", check=0)
        verification = json.loads(proc.stdout)["inputs"][0]["verification"]
        self.assertEqual(verification["records_copied"], 1)

    def test_damaged_data_pkl_is_named(self):
        path = self.copy("training.pt")
        offset, size = record_offset(path, "training/data.pkl")
        flip_byte(path, offset + size // 3)
        proc = support.run("verify", path, check=1)
        self.assertIn("training/data.pkl: CRC-32 mismatch", proc.stderr)

    def test_damaged_central_directory(self):
        path = self.copy("plain_state_dict.pt")
        with open(path, "rb") as f:
            data = f.read()
        cd = data.index(b"PK\x01\x02")
        flip_byte(path, cd + 1)  # the signature
        proc = support.run("verify", path, check=1)
        self.assertIn("central directory entry 0", proc.stderr)
        path = self.copy("dataparallel.pt")
        with open(path, "rb") as f:
            data = f.read()
        second = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 1)
        flip_byte(path, second + 16)  # the CRC-32 field of the second entry
        proc = support.run("verify", path, check=1)
        self.assertIn("dataparallel/data/0: CRC-32 mismatch", proc.stderr)

    def large_checkpoint(self):
        """Storages of 2 MiB, which take the fast paths: kernel copy (checked
        by the input's recorded CRC-32 on read-back) and pipelined casts."""
        path = os.path.join(self.tmp, "large.pt")
        torch.manual_seed(0)
        torch.save({"module.a": torch.rand(1 << 19), "module.b": torch.rand(1 << 19)}, path)
        return path

    def test_damaged_large_inputs_are_refused_on_every_path(self):
        path = self.large_checkpoint()
        offset, _ = record_offset(path, "large/data/1")
        flip_byte(path, offset + 12345)
        for args in (["convert"], ["strip-prefix"], ["cast", "--dtype", "bf16"], ["cast", "--dtype", "fp64"]):
            with self.subTest(command=args):
                out = os.path.join(self.tmp, "out.pt")
                proc = support.run(*args, path, "-o", out, check=1)
                self.assertRegex(proc.stderr, r"^ckptfix: error: '.*large\.pt': large/data/1: the input record is "
                                              r"damaged: its bytes have CRC-32 0x[0-9a-f]{8} but the archive records "
                                              r"0x[0-9a-f]{8}\n$")
                self.assertEqual(sorted(os.listdir(self.tmp)), ["large.pt"])

    def test_large_writes_say_how_each_record_was_checked(self):
        path = self.large_checkpoint()
        out = os.path.join(self.tmp, "out.pt")
        proc = support.run("strip-prefix", path, "-o", out, "--json", check=0)
        v = json.loads(proc.stdout)["inputs"][0]["verification"]
        # The output has the input's records (torch 2.x writes .format_version,
        # .storage_alignment and .data/serialization_id too), plus byteorder
        # where torch 1.13 wrote none.
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
        records = len(names) + (0 if "large/byteorder" in names else 1)
        self.assertEqual((v["records"], v["records_copied"]), (records, 2))
        self.assertIn(f"verified: read back {records} records (2 copied unchanged: CRC-32 as the input records; "
                      f"{records - 2} others: CRC-32 and XXH3 as written)", proc.stderr)
        self.assertEqual(list(torch.load(out)), ["a", "b"])
        proc = support.run("cast", "--dtype", "bf16", path, "-o", out, "--force", "--json", check=0)
        self.assertEqual(json.loads(proc.stdout)["inputs"][0]["verification"]["records_copied"], 0)
        self.assertIn(f"verified: read back {records} records (CRC-32 and XXH3 as written)", proc.stderr)

    def test_damaged_inputs_are_refused_by_writers_too(self):
        # torch 1.13 does not check CRCs on load; ckptfix refuses to re-save bit rot.
        path = self.copy("plain_state_dict.pt")
        offset, size = record_offset(path, "plain_state_dict/data/7")
        flip_byte(path, offset + 1)
        for args in (["convert"], ["cast", "--dtype", "bf16"]):
            with self.subTest(command=args[0]):
                out = os.path.join(self.tmp, "out.pt")
                proc = support.run(*args, path, "-o", out, check=1)
                self.assertIn("plain_state_dict/data/7: the input record is damaged", proc.stderr)
                self.assertFalse(os.path.exists(out))

    def test_gpu_modes(self):
        proc = support.run("verify", "--json", "--gpu", "off", support.fixture("cuda0.pt"), check=0)
        self.assertEqual(json.loads(proc.stdout)["inputs"][0]["verification"]["gpu"], {"status": "off"})
        status = json.loads(support.run("verify", "--json", support.fixture("cuda0.pt"), check=0).stdout)
        gpu = status["inputs"][0]["verification"]["gpu"]
        if gpu["status"] == "skipped":
            # No usable GPU here: require must fail cleanly and write nothing.
            proc = support.run("verify", "--gpu", "require", support.fixture("cuda0.pt"), check=1)
            self.assertIn("GPU load test required but it cannot run", proc.stderr)
            out = os.path.join(self.tmp, "out.pt")
            proc = support.run("convert", "--gpu", "require", support.fixture("cuda0.pt"), "-o", out, check=1)
            self.assertIn(gpu["reason"], proc.stderr)
            self.assertEqual(os.listdir(self.tmp), [])
        else:
            self.assertEqual(gpu["status"], "ok")
            self.assertGreater(gpu["bytes"], 0)
            self.assertGreater(gpu["storages"], 0)
            self.assertGreater(gpu["gb_per_s"], 0)
            self.assertEqual((gpu["nan"], gpu["inf"]), (0, 0))
        support.run("verify", "--gpu", "sometimes", support.fixture("cuda0.pt"), check=2)


def gpu_skip_reason():
    """Why the GPU load test cannot run here ('' when it can)."""
    proc = support.run("verify", "--json", support.fixture("cuda0.pt"), check=0)
    gpu = json.loads(proc.stdout)["inputs"][0]["verification"]["gpu"]
    return "" if gpu["status"] == "ok" else gpu.get("reason", gpu["status"])


class VerifiedWrites(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.src = os.path.join(self.tmp, "in.pt")
        shutil.copy(support.fixture("training_dp_cuda.pt"), self.src)
        self.src_hash = support.sha256(self.src)

    def assert_nothing_new(self, allowed=("in.pt",)):
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(allowed))
        self.assertEqual(support.sha256(self.src), self.src_hash, "the input must be untouched")

    def test_every_write_is_verified_and_says_so(self):
        for command in WRITERS:
            with self.subTest(command=command[0]):
                out = os.path.join(self.tmp, "out.pt")
                proc = support.run(*command, self.src, "-o", out, "--force", "--json", check=0)
                doc = json.loads(proc.stdout)["inputs"][0]
                v = doc["verification"]
                self.assertEqual(v["status"], "ok")
                self.assertEqual(v["records"], v["records_crc_checked"])
                self.assertGreater(v["storages"], 0)
                self.assertGreater(v["tensors"], 0)
                self.assertIn(v["gpu"]["status"], ("ok", "skipped"))
                self.assertRegex(proc.stderr, r"out\.pt: verified: read back \d+ records \(CRC-32 and XXH3 as written\), "
                                              r"\d+ tensors as intended; GPU load test (ok|skipped: .+)")
                torch_compare.load_with_locations(out)  # and torch reads it

    def test_no_verify_says_so(self):
        out = os.path.join(self.tmp, "out.pt")
        proc = support.run("convert", self.src, "-o", out, "--no-verify", "--json", check=0)
        self.assertEqual(json.loads(proc.stdout)["inputs"][0]["verification"],
                         {"status": "skipped", "reason": "--no-verify"})
        self.assertIn("not verified (--no-verify)", proc.stderr)

    def run_with_fault(self, fault, *args):
        env = dict(os.environ, CKPTFIX_TEST_FAULT=fault)
        return subprocess.run([FAULT_INJECTION, *args], capture_output=True, text=True, env=env)

    def test_a_byte_changed_on_the_device_fails_the_write(self):
        # The test-only fault changes one byte in GPU memory after each upload
        # of the load test: the write must fail naming a storage, leave nothing.
        reason = gpu_skip_reason()
        if reason:
            self.skipTest("GPU test skipped: " + reason)
        for target, extract in (("out.pt", []), ("out.safetensors", ["--extract", "state_dict"])):
            with self.subTest(target=target):
                out = os.path.join(self.tmp, target)
                proc = self.run_with_fault("corrupt-on-device", "convert", "--gpu", "require", self.src, *extract,
                                           "-o", out)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertRegex(proc.stderr, r"differ from the bytes read on the CPU \(device checksum")
                self.assert_nothing_new()
        # Without the fault the same writes pass the load test.
        out = os.path.join(self.tmp, "out.pt")
        proc = self.run_with_fault("write-fails-after:100000000000", "convert", "--gpu", "require", self.src, "-o",
                                   out)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertRegex(proc.stderr, r"GPU load test ok on .+: \d+ storages")

    def test_the_production_binary_injects_no_fault(self):
        out = os.path.join(self.tmp, "out.pt")
        env = dict(os.environ, CKPTFIX_TEST_FAULT="corrupt-before-verify")
        proc = subprocess.run([support.CKPTFIX, "remap", "--to", "cpu", self.src, "-o", out], capture_output=True,
                              text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        torch_compare.load_with_locations(out)

    def test_sink_failing_part_way_leaves_nothing(self):
        size = os.path.getsize(support.fixture("training_dp_cuda.pt"))
        for after in [0, 100, 5000, size // 2, size - 200]:
            with self.subTest(fail_after=after):
                out = os.path.join(self.tmp, "out.pt")
                proc = self.run_with_fault(f"write-fails-after:{after}", "strip-prefix", self.src, "-o", out)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn("injected fault", proc.stderr)
                self.assertIn("nothing was written", proc.stderr)
                self.assert_nothing_new()

    def test_a_failed_write_leaves_no_directory_it_made(self):
        # -o and --out-dir make the output's missing directories; a run removes those it made
        # that a failure left empty, and no other: not one that was there before, not one that
        # holds another input's output.
        kept = os.path.join(self.tmp, "kept")
        os.makedirs(kept)
        for args in (["-o", os.path.join(self.tmp, "new", "deeper", "out.pt")],
                     ["-o", os.path.join(kept, "new", "out.pt")],
                     ["--out-dir", os.path.join(self.tmp, "new")]):
            with self.subTest(args=args):
                proc = self.run_with_fault("write-fails-after:100", "strip-prefix", self.src, *args)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn("injected fault", proc.stderr)
                self.assert_nothing_new(("in.pt", "kept"))
                self.assertEqual(os.listdir(kept), [])
        # Many inputs in parallel, one failing part-way (its output is larger than the fault
        # allows) and one not: only the directory of the failed one goes.
        tree = os.path.join(self.tmp, "tree")
        for name, fixture in (("a/small.pt", "plain_state_dict.pt"), ("b/c/large.pt", "many_records.pt")):
            os.makedirs(os.path.dirname(os.path.join(tree, name)), exist_ok=True)
            shutil.copy(support.fixture(fixture), os.path.join(tree, name))
        out = os.path.join(kept, "out")
        proc = self.run_with_fault("write-fails-after:20000", "strip-prefix", "--auto", "-r", tree, "--out-dir", out,
                                   "-j", "2")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("large.pt", proc.stderr)
        found = sorted(os.path.relpath(os.path.join(d, n), out) for d, dirs, files in os.walk(out) for n in dirs + files)
        self.assertEqual(found, ["a", "a/small.pt"])

    def test_an_input_that_shrinks_while_it_is_read_is_an_error_not_a_crash(self):
        # Another program truncating the input meanwhile (a training run's
        # torch.save truncates its file first): mapped bytes would raise SIGBUS.
        big = os.path.join(self.tmp, "big.pt")
        for args in (["cast", "--dtype", "bf16"], ["cast", "--dtype", "fp16", "--no-verify"], ["strip-prefix"],
                     ["convert", "--format", "safetensors"], ["cast", "--dtype", "bf16", "--format", "safetensors"]):
            with self.subTest(command=args):
                torch.save({"module.w": torch.rand(1 << 22, generator=torch.Generator().manual_seed(0))}, big)
                out = os.path.join(self.tmp, "out.pt")
                proc = self.run_with_fault(f"input-shrinks-after:{2 << 20}:{big}", *args, big, "-o", out)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertRegex(proc.stderr, r"^ckptfix: error: '.*big\.pt': (big/data/0|key 'module\.w'): .*"
                                              r"(shrank while being read|input ended during the copy).*; "
                                              r"nothing was written\n$")
                self.assertEqual(os.path.getsize(big), 4096, "the fault cut the input")
                self.assert_nothing_new(("big.pt", "in.pt"))

    def test_an_input_changed_meanwhile_is_not_replaced_in_place(self):
        # The file is small enough to be read whole when opened, so cutting it
        # while the output is written changes nothing of what is read: only
        # the in-place replacement can notice, and must not throw it away.
        proc = self.run_with_fault(f"input-shrinks-after:0:{self.src}", "cast", "--dtype", "bf16", self.src,
                                   "--in-place")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertRegex(proc.stderr, r"^ckptfix: error: '.*in\.pt': the file changed while it was being rewritten "
                                      r"\(another program wrote, replaced or removed it\): it was not replaced; "
                                      r"nothing was written\n$")
        self.assertEqual(os.path.getsize(self.src), 4096, "what the other program left is kept")
        self.assertEqual(os.listdir(self.tmp), ["in.pt"])

    def test_failures_leave_an_existing_output_and_in_place_input_untouched(self):
        out = os.path.join(self.tmp, "out.pt")
        shutil.copy(support.fixture("plain_state_dict.pt"), out)
        before = support.sha256(out)
        for fault in ["write-fails-after:3000", "corrupt-before-verify"]:
            with self.subTest(fault=fault):
                proc = self.run_with_fault(fault, "cast", "--dtype", "bf16", self.src, "-o", out, "--force")
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertEqual(support.sha256(out), before)
                proc = self.run_with_fault(fault, "cast", "--dtype", "bf16", self.src, "--in-place")
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assert_nothing_new(("in.pt", "out.pt"))

    def test_verification_mismatch_names_what_differed(self):
        out = os.path.join(self.tmp, "out.pt")
        proc = self.run_with_fault("corrupt-before-verify", "remap", "--to", "cpu", self.src, "-o", out)
        self.assertEqual(proc.returncode, 1)
        self.assertRegex(proc.stderr, r"^ckptfix: error: '.*out\.pt': training_dp_cuda/data/0: the bytes read back "
                                      r"differ from the bytes meant to be written \(XXH3 0x[0-9a-f]{16} read, "
                                      r"0x[0-9a-f]{16} expected\); nothing was written\n$")
        self.assert_nothing_new()

    def test_safetensors_read_back_catches_a_damaged_tensor(self):
        # Each tensor is read back while the next is written; one damaged
        # after it was written (and before the read-back) fails the output.
        out = os.path.join(self.tmp, "out.safetensors")
        proc = self.run_with_fault("corrupt-before-verify", "convert", "--key", "state_dict", self.src, "-o", out)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertRegex(proc.stderr, r"^ckptfix: error: '.*out\.safetensors': tensor '[^']+': the bytes read back "
                                      r"differ from the bytes meant to be written \(XXH3 0x[0-9a-f]{16} read, "
                                      r"0x[0-9a-f]{16} expected\); nothing was written\n$")
        self.assert_nothing_new()

    @contextlib.contextmanager
    def small_file_system(self, size):
        """A directory on a real file system of `size` bytes when this
        machine lets us mount a tmpfs (as root), else one where writes past
        `size` fail through RLIMIT_FSIZE. Yields (directory, run) where run(*args)
        runs ckptfix there, and the message the failure must carry."""
        full = os.path.join(self.tmp, "full")
        os.mkdir(full)
        try:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", full],
                                     capture_output=True).returncode == 0
        except FileNotFoundError:  # no mount(8) here (a minimal root): use the rlimit
            mounted = False
        if not mounted:
            print("note: no tmpfs could be mounted; the full file system is simulated with RLIMIT_FSIZE",
                  file=sys.stderr)

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

        def run(*args):
            return subprocess.run([support.CKPTFIX, *args], capture_output=True, text=True,
                                  preexec_fn=None if mounted else limit)
        try:
            yield full, run, "No space left on device" if mounted else "File too large"
        finally:
            if mounted:
                subprocess.run(["umount", full], check=True)

    def test_full_output_directory(self):
        with self.small_file_system(8192) as (full, run, message):
            proc = run("convert", self.src, "-o", os.path.join(full, "out.pt"))
            self.assertIn(message, proc.stderr)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
            self.assertEqual(os.listdir(full), [], "no partial output, no temporary file")
        self.assert_nothing_new(("in.pt", "full"))

    def test_file_system_full_during_an_unchanged_storages_copy(self):
        """Storages of 1 MiB or more are copied unread: by copy_file_range
        where the page phases agree (zip outputs), through a buffer where
        they do not (safetensors outputs). A full file system in the middle
        of either is one line, exit 1, nothing left, the input untouched."""
        src = os.path.join(self.tmp, "big.pt")
        torch.save({f"layer{i}.weight": torch.arange(1 << 20, dtype=torch.float32) + i for i in range(3)}, src)
        before = support.sha256(src)
        for name in ("out.pt", "out.safetensors"):
            with self.subTest(output=name), self.small_file_system(6 << 20) as (full, run, message):
                out = os.path.join(full, name)
                proc = run("convert", src, "-o", out)
                self.assertIn(message, proc.stderr)
                self.assertTrue(proc.stderr.startswith(f"ckptfix: error: '{out}': "), proc.stderr)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
                self.assertEqual(os.listdir(full), [], "no partial output, no temporary file")
            os.rmdir(os.path.join(self.tmp, "full"))
        self.assertEqual(support.sha256(src), before)
        self.assert_nothing_new(("in.pt", "big.pt"))


def parse_args():
    """Takes --fault-injection PATH off the command line, then support's options."""
    global FAULT_INJECTION
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--fault-injection")
    args, sys.argv[1:] = parser.parse_known_args()
    if args.fault_injection:
        FAULT_INJECTION = os.path.abspath(args.fault_injection)
    return support.parse_args()


if __name__ == "__main__":
    unittest.main(argv=parse_args())
