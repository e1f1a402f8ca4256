#!/usr/bin/python3
"""Issue 65, stopping: SIGINT, SIGTERM and SIGHUP at a random point of a 1 GiB
write, of an --in-place rewrite and of a 400-file batch stop the run, remove
every temporary file it made, finish the report (every finished input with
its outcome, the others interrupted; valid JSON), say so in one line and exit
128 + the signal; a second signal exits at once, still removing them; the
same command run again finishes the work. Standard output that fails (a full
disk, a closed pipe) is never a silent success.

The points are random (seeded by CKPTFIX_SIGNAL_SEED, printed) over a run's
measured length; what each run leaves is judged, whatever point it hit.
"""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import support  # noqa: E402

SEED = int(os.environ.get("CKPTFIX_SIGNAL_SEED", str(int(time.time()))))
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
# A signal in the first moments of a process, before main() blocks it,
# ends it as by default (a sanitizer's start-up can take longer than a
# whole run): every delay counts from the moment /proc shows it blocked.
EARLIEST = 0.0

# 1 GiB of float32 in 8 tensors, each key under 'module.'.
GENERATE_BIG = """
import collections, sys, torch
sd = collections.OrderedDict((f'module.layer{i}.weight', torch.full((32 << 20,), float(i))) for i in range(8))
torch.save(sd, sys.argv[1])
"""


def leftovers(*roots):
    """ckptfix's temporary files below `roots`."""
    out = []
    for root in roots:
        out += [p for p in glob.glob(os.path.join(root, "**", ".*"), recursive=True) if ".ckptfix-" in p]
    return out


class SignalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print(f"signal points seeded with CKPTFIX_SIGNAL_SEED={SEED}", file=sys.stderr)
        cls.random = random.Random(SEED)
        cls.dir = tempfile.mkdtemp(prefix="ckptfix-signals-")
        cls.big = os.path.join(cls.dir, "big.pt")
        subprocess.run([sys.executable, "-c", GENERATE_BIG, cls.big], check=True)  # the judge's torch
        cls.big_sha = support.sha256(cls.big)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(dir=self.dir)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def start(self, *args):
        return subprocess.Popen([support.CKPTFIX, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def timed(self, *args):
        """A whole run's length, to spread the signals over."""
        start = time.monotonic()
        proc = self.start(*args)
        proc.communicate()
        return time.monotonic() - start

    @staticmethod
    def wait_until_handled(proc, sig):
        """Until `proc` blocks or catches `sig` (or has ended)."""
        bit = 1 << (int(sig) - 1)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with open(f"/proc/{proc.pid}/status") as status:
                    masks = dict(l.split(":", 1) for l in status if l.startswith(("SigBlk", "SigCgt")))
            except OSError:
                return
            if any(int(v.strip(), 16) & bit for v in masks.values()):
                return
            time.sleep(0.0005)

    def signalled(self, args, sig, delay, twice=False):
        proc = self.start(*args)
        self.wait_until_handled(proc, sig)
        time.sleep(delay)
        proc.send_signal(sig)
        if twice:
            time.sleep(0.002)
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err

    def check_stopped(self, code, expected, out, err, finished):
        """What a run stopped by a signal (or finished before it came) must show."""
        if code == 0:
            finished()
            return None
        self.assertEqual(code, expected, err)
        lines = [l for l in err.splitlines() if "interrupted by" in l]
        self.assertEqual(len(lines), 1, err)
        doc = json.loads(out)  # whole and valid
        self.assertGreaterEqual(doc["summary"]["interrupted"], 0)
        return doc

    def test_each_signal_at_random_points_of_a_1gib_write(self):
        out = os.path.join(self.work, "out.pt")
        args = ["cast", "--dtype", "bf16", self.big, "-o", out, "--json"]
        length = self.timed(*args)
        os.unlink(out)
        for sig, expected in SIGNALS:
            delay = self.random.uniform(EARLIEST, length)
            with self.subTest(signal=sig.name, delay=round(delay, 3)):
                code, stdout, err = self.signalled(args, sig, delay)
                doc = self.check_stopped(code, expected, stdout, err, lambda: self.assertTrue(os.path.exists(out)))
                self.assertEqual(leftovers(self.work), [], "a temporary file was left")
                if doc is not None and doc["inputs"][0]["status"] == "interrupted":
                    self.assertFalse(os.path.exists(out), "an interrupted write left an output")
                    self.assertEqual(doc["inputs"][0]["error_kind"], "interrupted")
                # The same command again finishes the work.
                again = support.run(*args)
                self.assertEqual(again.returncode, 0, again.stderr)
                self.assertEqual(json.loads(again.stdout)["summary"]["failed"], 0)
                os.unlink(out)
        self.assertEqual(support.sha256(self.big), self.big_sha)

    def test_each_signal_at_random_points_of_an_in_place_rewrite(self):
        work = os.path.join(self.work, "model.pt")
        shutil.copy(self.big, work)
        length = self.timed("strip-prefix", "--in-place", work)
        new_sha = support.sha256(work)
        self.assertNotEqual(new_sha, self.big_sha)
        for sig, expected in SIGNALS:
            shutil.copy(self.big, work)
            delay = self.random.uniform(EARLIEST, length)
            with self.subTest(signal=sig.name, delay=round(delay, 3)):
                code, _, err = self.signalled(["strip-prefix", "--in-place", work], sig, delay)
                self.assertIn(code, (0, expected), err)
                self.assertEqual(leftovers(self.work), [], "a temporary file was left")
                now = support.sha256(work)
                self.assertIn(now, (self.big_sha, new_sha), "the input is neither the original nor the new file")
                if code == expected:
                    self.assertEqual(len([l for l in err.splitlines() if "interrupted by" in l]), 1, err)
                if now == self.big_sha:  # not replaced: a rerun does it
                    self.assertEqual(support.run("strip-prefix", "--in-place", work).returncode, 0)
                self.assertEqual(support.sha256(work), new_sha)

    def make_batch(self, n=400):
        src = os.path.join(self.work, "in")
        os.makedirs(src)
        fixture = support.fixture("dataparallel.pt")
        for i in range(n):
            shutil.copy(fixture, os.path.join(src, f"m{i:03d}.pt"))
        return src

    def test_each_signal_at_random_points_of_a_400_file_batch(self):
        src = self.make_batch()
        out = os.path.join(self.work, "out")
        args = ["strip-prefix", "-r", src, "--out-dir", out, "--json", "--jobs", "2"]
        length = self.timed(*args)
        shutil.rmtree(out)
        for sig, expected in SIGNALS:
            delay = self.random.uniform(EARLIEST, length * 0.8)
            with self.subTest(signal=sig.name, delay=round(delay, 3)):
                code, stdout, err = self.signalled(args, sig, delay)
                doc = self.check_stopped(code, expected, stdout, err, lambda: None)
                self.assertEqual(leftovers(self.work), [], "a temporary file was left")
                if doc is not None:
                    self.assertEqual(len(doc["inputs"]), 400, "every input is in the report")
                    for entry in doc["inputs"]:
                        output = os.path.join(out, os.path.basename(entry["path"]))
                        if entry["status"] == "ok":
                            self.assertTrue(os.path.exists(output), output)
                        else:
                            self.assertEqual(entry["status"], "interrupted", entry)
                            self.assertFalse(os.path.exists(output), output)
                    done = doc["summary"]["ok"] + doc["summary"]["unchanged"]
                    self.assertIn(f"interrupted by {sig.name}: {done} of 400 inputs done", err)
                # The same command again: exit 0, the finished outputs left as they are.
                again = support.run(*args)
                self.assertEqual(again.returncode, 0, again.stderr[-2000:])
                summary = json.loads(again.stdout)["summary"]
                self.assertEqual(summary["ok"] + summary["unchanged"], 400)
                if doc is not None:
                    self.assertGreaterEqual(summary["unchanged"], doc["summary"]["ok"])
                shutil.rmtree(out)

    def test_a_second_signal_ends_the_run_at_once(self):
        out = os.path.join(self.work, "out.pt")
        args = ["cast", "--dtype", "bf16", self.big, "-o", out]
        proc = self.start(*args)
        deadline = time.monotonic() + 20
        while not leftovers(self.work) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        self.wait_until_handled(proc, signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertIn(proc.returncode, (143, 0), err)
        self.assertEqual(leftovers(self.work), [])

    # -- standard output and standard error that fail --------------------------

    def test_a_lost_report_is_a_failure(self):
        src = self.make_batch(3)
        with open("/dev/full", "w") as full:
            for args in (["check", "-r", src, "--json"], ["inspect", "--json", os.path.join(src, "m000.pt")],
                         ["check", "-r", src]):
                with self.subTest(args=args[:2]):
                    proc = subprocess.run([support.CKPTFIX, *args], stdout=full, stderr=subprocess.PIPE, text=True)
                    self.assertEqual(proc.returncode, 1, proc.stderr)
                    self.assertIn("cannot write to standard output: No space left on device", proc.stderr)
            proc = subprocess.run([support.CKPTFIX, "strip-prefix", os.path.join(src, "m000.pt"), "-o",
                                   os.path.join(self.work, "o.pt")], stdout=subprocess.PIPE, stderr=full, text=True)
            self.assertEqual(proc.returncode, 1, "a lost message is a failure")
        # --report FILE: the report, atomically; none where it cannot be written.
        report = os.path.join(self.work, "report.json")
        proc = support.run("check", "-r", src, "--report", report)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(report) as f:
            self.assertEqual(len(json.load(f)["inputs"]), 3)
        self.assertEqual(proc.stdout.count(": ok"), 3, "stdout keeps its text")
        proc = support.run("check", "-r", src, "--report", "/dev/full/report.json")
        self.assertEqual(proc.returncode, 1, proc.stderr)

    def test_a_closed_pipe_ends_the_run_as_tools_do(self):
        # More lines than a pipe holds (64 KiB), so the run cannot end before
        # the reader closes its end.
        src = self.make_batch(2000)
        proc = subprocess.Popen([support.CKPTFIX, "check", "-r", src], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        proc.wait(timeout=60)
        self.assertEqual(proc.returncode, -signal.SIGPIPE, err)
        self.assertEqual(err, b"", "a closed pipe ends the run without a word")


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
