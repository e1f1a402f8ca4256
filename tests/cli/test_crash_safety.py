#!/usr/bin/python3
"""SIGKILL at any moment of an --in-place run leaves the original file or the
complete new one, never a mix; the next run on the same output removes the
dead run's temporary file.

A ~300 MiB checkpoint is generated with torch so a run takes long enough to
be killed at many points (while writing, while verifying, around the rename).
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import support  # noqa: E402

GENERATE = """
import collections, sys, torch
torch.manual_seed(0)
sd = collections.OrderedDict((f'module.layer{i}.weight', torch.rand(8 << 20)) for i in range(9))
torch.save(sd, sys.argv[1])
"""


class CrashSafety(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ckptfix-crash-")
        cls.original = os.path.join(cls.dir, "original.pt")
        subprocess.run([sys.executable, "-c", GENERATE, cls.original], check=True)  # the judge's torch
        cls.reference = os.path.join(cls.dir, "reference.pt")
        support.run("strip-prefix", cls.original, "-o", cls.reference, check=0)
        cls.hashes = {support.sha256(cls.original): "original", support.sha256(cls.reference): "new"}
        # The kill points are spread over one --in-place run timed here (it syncs to disk, so it is
        # slower than the run above). The host's speed may change later: the test does not rely on
        # this time to reach the rename, it searches for it (see test_sigkill_at_any_moment).
        timed = os.path.join(cls.dir, "timed.pt")
        shutil.copy(cls.original, timed)
        start = time.monotonic()
        support.run("strip-prefix", "--in-place", timed, check=0)
        cls.duration = time.monotonic() - start
        os.unlink(timed)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def kill_after(self, delay):
        """Runs --in-place on a fresh copy of the original, SIGKILLs it after `delay` seconds,
        checks what is left, and returns "original" or "new" and whether the run had already
        finished by itself."""
        work = os.path.join(self.dir, "work.pt")
        shutil.copy(self.original, work)
        proc = subprocess.Popen([support.CKPTFIX, "strip-prefix", "--in-place", work],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        finished = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = self.hashes.get(support.sha256(work))
        self.assertIsNotNone(state, f"killed after {delay:.3f} s: work.pt is neither the original nor the new file")
        # A run that died mid-way leaves a temporary file named after it ...
        stale = glob.glob(os.path.join(self.dir, ".work.pt.ckptfix-*.tmp"))
        self.stale_seen += bool(stale)
        # ... which the next run on the same output removes.
        support.run("strip-prefix", "--in-place", work, check=0)
        self.assertEqual(self.hashes[support.sha256(work)], "new")
        self.assertEqual(glob.glob(os.path.join(self.dir, ".work.pt.ckptfix-*.tmp")), [],
                         f"stale temporary files {stale} were not cleaned up")
        return state, finished

    def test_sigkill_at_any_moment(self):
        self.stale_seen = 0
        outcomes = {}  # delay -> "original" or "new"
        # Kill points spread over the whole run, from start-up to past its end.
        delays = [0.0, 0.005, 0.02] + [self.duration * f for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
                                                                   1.2, 1.5, 2.0)]
        for delay in delays:
            with self.subTest(delay=round(delay, 3)):
                outcomes[delay], _ = self.kill_after(delay)
        # A loaded host (CI runs tests in parallel) can make every run above slower than the timed
        # one, so that no kill reached the rename. Wait longer until one does, or until a run ends
        # by itself: then its file must be the new one.
        delay = max(delays)
        while "new" not in outcomes.values():
            delay *= 2
            with self.subTest(delay=round(delay, 3)):
                outcomes[delay], finished = self.kill_after(delay)
            if finished:
                break
        self.assertIn("new", outcomes.values(), "a run that was never killed did not leave the new file")
        # Then close in on the rename from both sides: the kills nearest to it are the ones that matter.
        for _ in range(4):
            before = max((d for d, state in outcomes.items() if state == "original"), default=None)
            after = min(d for d, state in outcomes.items() if state == "new")
            if before is None or before > after:
                break
            delay = (before + after) / 2
            with self.subTest(delay=round(delay, 3)):
                outcomes[delay], _ = self.kill_after(delay)
        self.assertIn("original", outcomes.values())
        self.assertGreater(self.stale_seen, 0, "no kill left a temporary file, so cleanup was never exercised")


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
