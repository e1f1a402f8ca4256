#!/usr/bin/python3
"""Batch and CI mode: many inputs and directories, --jobs, JSON reports for
every command, determinism, idempotence, progress bars, and the `check` gate
catching each kind of violation and passing after the matching fix."""
import json
import os
import re
import pty
import select
import shutil
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


def tree_hashes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            out[os.path.relpath(path, root)] = support.sha256(path)
    return out


class BatchTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def mixed_tree(self):
        """Valid, damaged and CUDA-tagged files, nested, plus files --recursive must skip."""
        root = self.path("tree")
        layout = {
            "plain.pt": "plain_state_dict.pt",
            "ddp.pth": "dataparallel.pt",
            "gpu/cuda0.pt": "cuda0.pt",
            "gpu/legacy.ckpt": "legacy_cuda.pt",
            "gpu/train.bin": "training_dp_cuda.pt",
            "bad/truncated.pt": "truncated_half.pt",
            "bad/notes.txt": "not_a_checkpoint.txt",  # not matched by the default globs
        }
        for rel, fixture in layout.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            shutil.copy(support.fixture(fixture), os.path.join(root, rel))
        return root

    def test_mixed_batch_with_two_jobs(self):
        root = self.mixed_tree()
        out = self.path("out")
        proc = support.run("fix", "--auto-prefix", "--to", "cpu", "-r", root, "--out-dir", out, "--jobs", "2", "--json")
        self.assertEqual(proc.returncode, 1, "one input is damaged")
        doc = json.loads(proc.stdout)  # stdout is only the JSON document
        self.assertEqual(doc["command"], "fix")
        self.assertEqual(doc["schema"], 1)
        by_path = {os.path.relpath(i["path"], root): i for i in doc["inputs"]}
        self.assertEqual(sorted(by_path), ["bad/truncated.pt", "ddp.pth", "gpu/cuda0.pt", "gpu/legacy.ckpt",
                                           "gpu/train.bin", "plain.pt"])
        self.assertEqual(by_path["bad/truncated.pt"]["status"], "failed")
        self.assertIn("failed finding central directory", by_path["bad/truncated.pt"]["error"])
        self.assertEqual(by_path["bad/truncated.pt"]["error_kind"], "corrupt")
        self.assertEqual(by_path["plain.pt"]["status"], "unchanged")  # nothing to strip or retag
        for rel in ["ddp.pth", "gpu/cuda0.pt", "gpu/legacy.ckpt", "gpu/train.bin"]:
            item = by_path[rel]
            self.assertEqual(item["status"], "ok", rel)
            self.assertEqual(item["output"], os.path.join(out, rel), "outputs mirror the input tree")
            self.assertEqual(item["verification"]["status"], "ok")
            self.assertIn(item["verification"]["gpu"]["status"], ("ok", "skipped"))
            self.assertIn("seconds", item)
            # No map_location: the retagged storages load on this CPU-only
            # machine. The inputs hold argparse.Namespace and numpy values,
            # which torch >= 2.6 refuses by default: these are our own trusted fixtures.
            torch.load(item["output"], weights_only=False)
        self.assertEqual(by_path["gpu/train.bin"]["changes"]["auto_stripped"], ["state_dict: module.", "ema: module."])
        self.assertEqual(doc["summary"]["ok"], 4)
        self.assertEqual(doc["summary"]["unchanged"], 1)
        self.assertEqual(doc["summary"]["failed"], 1)
        self.assertIn("ckptfix: error: '" + os.path.join(root, "bad", "truncated.pt") + "'", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "bad", "truncated.pt")))

    def test_summary_line_and_failures_do_not_stop_the_rest(self):
        root = self.mixed_tree()
        proc = support.run("convert", "-r", root, "--out-dir", self.path("out"), "-j", "2")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(proc.stderr.rstrip().endswith("ckptfix: convert: 6 files: 0 ok, 5 unchanged, 1 failed"),
                        proc.stderr)
        self.assertEqual(len(tree_hashes(self.path("out"))), 5)

    def test_deterministic_across_runs_and_job_counts(self):
        root = self.mixed_tree()
        for out, jobs in [("a", "1"), ("b", "2"), ("c", "2")]:
            support.run("fix", "--auto-prefix", "--to", "cpu", "--dtype", "bf16", "-r", root, "--out-dir",
                        self.path(out), "-j", jobs, "-q")
        a, b, c = (tree_hashes(self.path(x)) for x in "abc")
        self.assertEqual(len(a), 5)
        self.assertEqual(a, b)
        self.assertEqual(b, c)

    def test_idempotent_on_its_own_output(self):
        root = self.mixed_tree()
        shutil.rmtree(os.path.join(root, "bad"))
        first = self.path("first")
        support.run("fix", "--auto-prefix", "--to", "cpu", "--dtype", "bf16", "-r", root, "--out-dir", first, check=0)
        second = self.path("second")
        proc = support.run("fix", "--auto-prefix", "--to", "cpu", "--dtype", "bf16", "-r", first, "--out-dir", second,
                           "--json", check=0)
        self.assertEqual({i["status"] for i in json.loads(proc.stdout)["inputs"]}, {"unchanged"})
        self.assertEqual(tree_hashes(first), tree_hashes(second), "running again changes nothing")
        mtimes = {p: os.stat(os.path.join(first, p)).st_mtime_ns for p in tree_hashes(first)}
        proc = support.run("fix", "--auto-prefix", "--to", "cpu", "--dtype", "bf16", "-r", first, "--in-place", check=0)
        self.assertEqual(proc.stderr.count("nothing to change"), 5)
        self.assertEqual(mtimes, {p: os.stat(os.path.join(first, p)).st_mtime_ns for p in mtimes})

    def test_every_thread_count_writes_the_same_files(self):
        # --threads N (issue 54): large records split among N threads, with
        # --jobs sharing them. Two 3 MiB float32 tensors and a small one:
        # copied and cast, each written by 1, 2, 5 and 64 threads, by the
        # same bytes, and torch loads what it saved.
        src = self.path("big")
        os.mkdir(src)
        script = ("import sys, torch\n"
                  "g = torch.Generator().manual_seed(1)\n"
                  "for name in ('a', 'b'):\n"
                  "    torch.save({'module.w': torch.randn(786433, generator=g), 'module.v': torch.randn(786431, generator=g),"
                  " 'module.s': torch.randn(5, generator=g)}, '%s/%s.pt' % (sys.argv[1], name))\n")
        subprocess.run([sys.executable, "-c", script, src], check=True)
        trees = {}
        for threads, jobs in [("1", "1"), ("2", "1"), ("5", "2"), ("64", "2")]:
            for job, flags in [("copy", ["strip-prefix"]), ("cast", ["cast", "--dtype", "bf16"])]:
                out = self.path(f"{job}-{threads}")
                proc = support.run(*flags, "-r", src, "--out-dir", out, "--threads", threads, "-j", jobs, "--gpu", "off",
                                   "--json", check=0)
                self.assertEqual(json.loads(proc.stdout)["summary"]["failed"], 0, proc.stderr)
                trees.setdefault(job, []).append(tree_hashes(out))
        for job, hashes in trees.items():
            self.assertEqual(len(hashes[0]), 2)
            for other in hashes[1:]:
                self.assertEqual(other, hashes[0], job)
        for name in ("a", "b"):
            saved = torch.load(os.path.join(src, name + ".pt"))
            copied = torch.load(self.path("copy-64", name + ".pt"), weights_only=True)
            cast = torch.load(self.path("cast-5", name + ".pt"), weights_only=True)
            self.assertEqual(list(copied), [k[len("module."):] for k in saved])
            for key, tensor in saved.items():
                self.assertTrue(torch.equal(copied[key[len("module."):]], tensor), key)
                self.assertTrue(torch.equal(cast[key], tensor.to(torch.bfloat16)), key)

    def test_threads_must_be_one_or_more(self):
        for bad in ("0", "-1", "x"):
            proc = support.run("strip-prefix", support.fixture("dataparallel.pt"), "-o", self.path("o.pt"),
                               "--threads", bad, check=2)
            self.assertIn("--threads", proc.stderr)
            self.assertFalse(os.path.exists(self.path("o.pt")))

    def test_hundred_checkpoints_with_two_jobs(self):
        src = self.path("many")
        os.mkdir(src)
        script = ("import collections, sys, torch\n"
                  "for i in range(100):\n"
                  "    torch.manual_seed(i)\n"
                  "    sd = collections.OrderedDict(('module.l%d.weight' % j, torch.rand(64, 64)) for j in range(4))\n"
                  "    torch.save(sd, '%s/ckpt_%03d.pt' % (sys.argv[1], i))\n")
        subprocess.run([sys.executable, "-c", script, src], check=True)
        out = self.path("converted")
        proc = support.run("fix", "--strip-prefix", "--dtype", "bf16", "-r", src, "--out-dir", out, "-j", "2",
                           "--json", check=0)
        doc = json.loads(proc.stdout)
        self.assertEqual(len(doc["inputs"]), 100)
        self.assertEqual(doc["summary"], {**doc["summary"], "ok": 100, "unchanged": 0, "failed": 0})
        self.assertEqual(sorted(os.path.basename(i["output"]) for i in doc["inputs"]),
                         ["ckpt_%03d.pt" % i for i in range(100)])
        self.assertEqual(len(os.listdir(out)), 100)
        sd = torch.load(os.path.join(out, "ckpt_042.pt"))
        self.assertEqual(list(sd), ["l0.weight", "l1.weight", "l2.weight", "l3.weight"])
        self.assertEqual(sd["l0.weight"].dtype, torch.bfloat16)

    def test_json_on_every_command(self):
        files = [support.fixture("cuda0.pt"), support.fixture("empty.pt")]
        out = self.path("o")
        for args in [["inspect"], ["verify"], ["check", "--device", "cuda:0"], ["convert", "--out-dir", out],
                     ["strip-prefix", "--auto", "--out-dir", out, "--force"], ["add-prefix", "--prefix", "m.", "--out-dir", out, "-f"],
                     ["remap", "--to", "cpu", "--out-dir", out, "-f"], ["cast", "--dtype", "fp16", "--out-dir", out, "-f"],
                     ["fix", "--to", "cpu", "--out-dir", out, "-f"]]:
            with self.subTest(command=args[0]):
                proc = support.run(*args, *files, "--json", check=1)
                doc = json.loads(proc.stdout)
                self.assertEqual(doc["command"], args[0])
                self.assertEqual([i["path"] for i in doc["inputs"]], files)
                self.assertEqual(doc["inputs"][1]["status"], "failed")
                self.assertEqual(doc["summary"]["failed"], 1)
                for item in doc["inputs"]:
                    self.assertIn(item["status"], ("ok", "unchanged", "failed"))
                    self.assertIn("seconds", item)
                # check's violation is on stdout (--json: in the report); the others' errors on stderr.
                if args[0] == "check":
                    self.assertIn("file is empty", doc["inputs"][1]["violations"][0]["what"])
                else:
                    self.assertIn("ckptfix: error: '" + files[1] + "': file is empty", proc.stderr)

    def test_directories_need_recursive_and_globs_choose_files(self):
        root = self.mixed_tree()
        proc = support.run("inspect", root, "--json", check=1)
        self.assertIn("is a directory; use --recursive", json.loads(proc.stdout)["inputs"][0]["error"])
        proc = support.run("inspect", "-r", root, "--glob", "*.ckpt", "--glob", "*.bin", "--json", check=0)
        self.assertEqual(sorted(os.path.relpath(i["path"], root) for i in json.loads(proc.stdout)["inputs"]),
                         ["gpu/legacy.ckpt", "gpu/train.bin"])

    def test_colliding_outputs_are_a_usage_error(self):
        a, b = self.path("a"), self.path("b")
        os.makedirs(a), os.makedirs(b)
        shutil.copy(support.fixture("cuda0.pt"), os.path.join(a, "m.pt"))
        shutil.copy(support.fixture("cuda3.pt"), os.path.join(b, "m.pt"))
        proc = support.run("convert", os.path.join(a, "m.pt"), os.path.join(b, "m.pt"), "--out-dir",
                           self.path("out"), check=2)
        self.assertIn("would both be written to", proc.stderr)
        self.assertFalse(os.path.exists(self.path("out", "m.pt")))


class Progress(unittest.TestCase):
    def run_in_pty(self, args, env):
        """Runs ckptfix with stderr (and stdout) on a pseudo-terminal; returns everything it wrote."""
        try:
            pid, fd = pty.fork()
        except OSError as e:  # no /dev/ptmx or /dev/pts here
            self.skipTest(f"no pseudo-terminal on this machine ({e}); progress output is not tested")
        if pid == 0:
            os.execve(support.CKPTFIX, [support.CKPTFIX, *args], env)
        output = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        os.waitpid(pid, 0)
        return output.decode(errors="replace")

    def test_bars_only_on_a_terminal(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "big.pt")
            subprocess.run([sys.executable, "-c",
                            f"import torch; torch.save({{'w': torch.rand(48 << 20)}}, {src!r})"], check=True)
            env = dict(os.environ, CKPTFIX_PROGRESS_DELAY_MS="0")
            out = os.path.join(tmp, "out.pt")
            text = self.run_in_pty(["cast", "--dtype", "bf16", src, "-o", out, "-f"], env)
            self.assertIn("writing", text)
            self.assertIn("verifying", text)
            self.assertRegex(text, r"big\.pt writing   \[[#.]{24}\] [0-9.]+ [KMG]?i?B / 96\.0 MiB  [0-9.]+ [KMG]?i?B/s  ETA ")
            self.assertIn("\x1b[", text, "bars are redrawn in place")
            for quiet in (["-q"], ["--json"]):
                text = self.run_in_pty(["cast", "--dtype", "bf16", src, "-o", out, "-f", *quiet], env)
                self.assertNotIn("ETA", text, quiet)
            proc = subprocess.run([support.CKPTFIX, "cast", "--dtype", "bf16", src, "-o", out, "-f"],
                                  capture_output=True, text=True, env=env)
            self.assertNotIn("ETA", proc.stderr, "no bars when stderr is not a terminal")
            # By default bars wait about a second: a quick run shows none.
            text = self.run_in_pty(["inspect", support.fixture("plain_state_dict.pt")], dict(os.environ))
            self.assertNotIn("ETA", text)


class CheckGate(unittest.TestCase):
    """Each kind of violation is caught on a purpose-made input and passes after the matching fix."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def violations(self, *args, expect):
        proc = support.run("check", *args, "--json", check=expect)
        return [(v["where"], v["what"]) for i in json.loads(proc.stdout)["inputs"] for v in i["violations"]]

    def gate(self, check_args, fixture, fix_args, where, what):
        bad = support.fixture(fixture)
        found = self.violations(*check_args, bad, expect=1)
        self.assertIn((where, what), found)
        # --all: a line each; without it, a rule many keys or globals break is one line (issue 50).
        proc = support.run("check", "--all", *check_args, bad, check=1)
        self.assertIn(f"{bad}: {where}: {what}\n", proc.stdout)
        grouped = support.run("check", *check_args, bad, check=1).stdout
        noun = where.split(" ")[0]  # "key", "global"
        if sum(1 for w, v in found if w.startswith(noun + " ") and v == what) > 1:
            self.assertNotIn(f"{bad}: {where}: {what}\n", grouped)
            self.assertRegex(grouped, f"{re.escape(bad)}: [0-9]+ {noun}s ")
        else:
            self.assertIn(f"{bad}: {where}: {what}\n", grouped)
        fixed = os.path.join(self.tmp, "fixed.pt")
        support.run(*fix_args, bad, "-o", fixed, "-f", check=0)
        self.assertEqual(self.violations(*check_args, fixed, expect=0), [])
        self.assertEqual(support.run("check", *check_args, fixed, check=0).stdout, f"{fixed}: ok\n")

    def test_device(self):
        self.gate(["--device", "cpu"], "cuda0.pt", ["remap", "--to", "cpu"], "key 'conv.weight'",
                  "saved on 'cuda:0', not 'cpu'")

    def test_no_prefix(self):
        self.gate(["--no-prefix", "module."], "dataparallel.pt", ["strip-prefix"], "key 'module.fc.bias'",
                  "starts with 'module.'")
        self.gate(["--no-prefix", "_orig_mod.", "--no-prefix", "module."], "compiled_dataparallel.pt",
                  ["strip-prefix", "--auto"], "key '_orig_mod.module.conv.weight'", "starts with '_orig_mod.'")

    def test_dtype(self):
        self.gate(["--dtype", "bf16,fp16"], "plain_state_dict.pt", ["cast", "--dtype", "bf16"], "key 'fc.weight'",
                  "is float32, allowed: bfloat16, float16")

    def test_weights_only_allowlist_by_default(self):
        what = "is outside the weights_only allowlist of torch.load (known data)"
        self.gate([], "training.pt", ["convert", "--extract", "state_dict"], "global 'argparse.Namespace'", what)
        self.gate(["--safe"], "training.pt", ["convert", "--extract", "state_dict"], "global 'argparse.Namespace'", what)
        torch.load(support.fixture("plain_state_dict.pt"), weights_only=True)  # what the gate passes, torch accepts
        # A project trusts its own globals with --allow-global (exact names or globs).
        trusted = ["--allow-global", "argparse.Namespace", "--allow-global", "numpy.*"]
        self.assertEqual(self.violations(*trusted, support.fixture("training.pt"), expect=0), [])
        found = self.violations("--allow-global", "numpy.*", support.fixture("training.pt"), expect=1)
        self.assertEqual(found, [("global 'argparse.Namespace'", what)])
        support.run("check", "--allow-global", "", support.fixture("training.pt"), check=2)

    def test_pickle_opcodes_outside_the_weights_only_subset(self):
        src = os.path.join(self.tmp, "p4.pt")
        torch.save({"w": torch.ones(2)}, src, pickle_protocol=4)
        proc = support.run("check", src, "--json", check=1)
        entry = json.loads(proc.stdout)["inputs"][0]
        self.assertEqual(entry["weights_only"]["loads"], False)
        self.assertIn("STACK_GLOBAL", entry["weights_only"]["opcodes"])
        self.assertIn(("opcode STACK_GLOBAL", "is outside the pickle opcodes torch.load reads with weights_only "
                       "(ckptfix convert re-writes the pickle at protocol 2)"),
                      [(v["where"], v["what"]) for v in entry["violations"]])
        fixed = os.path.join(self.tmp, "p2.pt")
        support.run("convert", src, "-o", fixed, check=0)
        self.assertEqual(self.violations(fixed, expect=0), [])
        torch.load(fixed, weights_only=True)

    def test_crc(self):
        damaged = os.path.join(self.tmp, "damaged.pt")
        shutil.copy(support.fixture("plain_state_dict.pt"), damaged)
        with zipfile.ZipFile(damaged) as z:
            info = z.getinfo("plain_state_dict/data/7")
        with open(damaged, "r+b") as f:
            f.seek(info.header_offset + 26)
            name_len, extra_len = struct.unpack("<HH", f.read(4))
            at = info.header_offset + 30 + name_len + extra_len + 5  # inside the record's data
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0xFF]))
        found = self.violations("--crc", damaged, expect=1)
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0][0], "plain_state_dict/data/7")
        self.assertIn("CRC-32 mismatch", found[0][1])
        # The matching fix for a damaged file is a good copy.
        self.assertEqual(self.violations("--crc", support.fixture("plain_state_dict.pt"), expect=0), [])

    def test_default_gate_refuses_damaged_and_dangerous_files(self):
        found = self.violations(support.fixture("malicious_zip.pt"), support.fixture("truncated_half.pt"),
                                support.fixture("plain_state_dict.pt"), expect=1)
        self.assertEqual(len(found), 2)
        self.assertIn("dangerous global 'posix.system'", found[0][1])
        self.assertEqual(found[1][0], "structure")
        self.assertEqual(self.violations(support.fixture("plain_state_dict.pt"), expect=0), [])

    def test_usage_errors(self):
        support.run("check", "--device", "gpu", support.fixture("cuda0.pt"), check=2)
        support.run("check", "--dtype", "int8", support.fixture("cuda0.pt"), check=2)


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
