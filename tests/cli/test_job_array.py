#!/usr/bin/python3
"""Issue 65: docs/ci.md's fan-out recipes, retried as schedulers retry them.

The Slurm job array without Slurm (scripts/slurm-check.sh runs it on a real
single-node Slurm): each array task is the recipe's convert.sbatch line, run
by sh with SLURM_ARRAY_TASK_ID set; the task converting a large checkpoint
gets SIGTERM while it writes (what scancel and a time limit send); the whole
array is then run again, as a retry. The Kubernetes Indexed Job's arguments,
run as the recipe gives them: the first attempt is stopped (SIGTERM, and
SIGKILL, what a pod's deletion and a lost node do) and retried as is.

After each: every output is there and is what torch makes of its input (the
judge's torch.load), no temporary file is left, every report is valid JSON,
and the retry exits 0 leaving what the first attempt finished as it was.

  tests/cli/test_job_array.py [--ckptfix PATH]   (release_test.sh runs it with the release binary)
"""
import collections
import json
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
import torch  # noqa: E402

# docs/ci.md, "Slurm job array": convert.sbatch's command line.
SBATCH_LINE = ('f=$(sed -n "${SLURM_ARRAY_TASK_ID}p" files.txt)\n'
               '"$CKPTFIX" fix --auto-prefix --to cpu -o "converted/${f#checkpoints/}" "$f" --json '
               '> "reports/${SLURM_ARRAY_TASK_ID}.json"\n')
# docs/ci.md, "Kubernetes indexed Job": the container's args, the index put in.
K8S_ARGS = ["fix", "--to", "cpu", "-r", "data/part-{index}", "--out-dir", "out/part-{index}", "--json"]


def temporaries(root, of=""):
    """ckptfix's temporary files below `root` (of the output named `of`, if given)."""
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files
            if ".ckptfix-" in f and f.startswith("." + of)]


class JobArrayTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ckptfix-array-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def save(self, path, sd):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(sd, path)

    def small(self, seed):
        g = torch.Generator().manual_seed(seed)
        return collections.OrderedDict((f"module.layer{j}.weight", torch.randn(32, 32, generator=g)) for j in range(3))

    def big(self):  # 256 MiB: still being written when the signal comes
        return collections.OrderedDict((f"module.block{j}.weight", torch.full((16 << 20,), float(j))) for j in range(4))

    def assert_converted(self, source, output):
        want = collections.OrderedDict((k[len("module."):] if k.startswith("module.") else k, v)
                                       for k, v in torch.load(source).items())
        got = torch.load(output, weights_only=True)
        self.assertEqual(list(got), list(want), output)
        for k in want:
            self.assertTrue(torch.equal(got[k], want[k]), f"{output}: {k}")

    def stop_when_writing(self, proc, where, sig, of=""):
        """Sends `sig` to every process of `proc`'s session (as Slurm and Kubernetes signal a task's
        processes) once the temporary file of output `of` appears below `where`; waits until they are
        all gone. Whether the signal was sent (the process may have ended first)."""
        deadline = time.monotonic() + 60
        while not temporaries(where, of) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        signalled = proc.poll() is None
        if signalled:
            os.killpg(proc.pid, sig)
        proc.wait(timeout=120)
        while True:  # the shell may end before the ckptfix it started
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        return signalled

    def test_slurm_job_array_with_a_cancelled_task_retried(self):
        os.chdir(self.dir)
        sources = []
        for i in range(5):
            sources.append(f"checkpoints/{'a' if i % 2 else 'b'}/model{i}.pt")
            self.save(sources[-1], self.small(i))
        sources.append("checkpoints/big.pt")
        self.save(sources[-1], self.big())
        with open("files.txt", "w") as f:
            f.write("\n".join(sorted(sources)) + "\n")
        files = sorted(sources)
        os.makedirs("reports")
        env = dict(os.environ, CKPTFIX=support.CKPTFIX)
        script = os.path.join(self.dir, "convert.sbatch")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n" + SBATCH_LINE)

        def task(index):
            return subprocess.Popen(["sh", script], env=dict(env, SLURM_ARRAY_TASK_ID=str(index)),
                                    stderr=subprocess.DEVNULL, start_new_session=True)

        big_task = files.index("checkpoints/big.pt") + 1
        interrupted = 0
        for index in range(1, len(files) + 1):
            proc = task(index)
            if index == big_task:  # scancel: SIGTERM to the task's processes
                if self.stop_when_writing(proc, "converted", signal.SIGTERM, of="big.pt"):
                    doc = json.load(open(f"reports/{index}.json"))  # whole: ckptfix finished it
                    self.assertEqual(doc["inputs"][0]["status"], "interrupted")
                    self.assertFalse(os.path.exists("converted/big.pt"))
                    interrupted = 1
            else:
                self.assertEqual(proc.wait(timeout=120), 0)
        self.assertEqual(temporaries("converted"), [])
        # The retry: every task again, as the array is resubmitted.
        for index in range(1, len(files) + 1):
            self.assertEqual(task(index).wait(timeout=120), 0, f"task {index} of the retry")
        self.assertEqual(temporaries("converted"), [])
        statuses = []
        for index, source in enumerate(files, start=1):
            doc = json.load(open(f"reports/{index}.json"))
            statuses.append(doc["inputs"][0]["status"])
            self.assert_converted(source, "converted/" + source[len("checkpoints/"):])
        self.assertEqual(statuses.count("unchanged"), len(files) - interrupted, statuses)

    def test_kubernetes_indexed_job_retried(self):
        os.chdir(self.dir)
        for index in range(2):
            for i in range(3):
                self.save(f"data/part-{index}/m{i}.pt", self.small(10 * index + i))
            self.save(f"data/part-{index}/zbig.pt", self.big())
            # Saved on a GPU, as the files --to cpu is for (tagged so: this machine may have none).
            for name in os.listdir(f"data/part-{index}"):
                path = f"data/part-{index}/{name}"
                support.run("remap", "--to", "cuda:0", path, "-o", path + ".cuda.pt", check=0)
                os.replace(path + ".cuda.pt", path)
        for index, sig in ((0, signal.SIGTERM), (1, signal.SIGKILL)):
            args = [support.CKPTFIX] + [a.format(index=index) for a in K8S_ARGS]
            with self.subTest(signal=sig.name):
                report_path = os.path.join(self.dir, f"first-{index}.json")  # the pod's log
                with open(report_path, "w") as log:
                    first = subprocess.Popen(args, stdout=log, stderr=subprocess.DEVNULL, start_new_session=True)
                    self.stop_when_writing(first, f"out/part-{index}", sig, of="zbig.pt")
                with open(report_path) as log:
                    report = log.read()
                if sig == signal.SIGTERM and first.returncode == 143:
                    doc = json.loads(report)
                    self.assertEqual([i["status"] for i in doc["inputs"]][-1], "interrupted")
                    self.assertEqual(temporaries(f"out/part-{index}"), [])
                finished = len([f for f in os.listdir(f"out/part-{index}") if f.endswith(".pt")])
                retry = subprocess.run(args, capture_output=True, text=True, timeout=300)
                self.assertEqual(retry.returncode, 0, retry.stderr)
                doc = json.loads(retry.stdout)
                self.assertEqual(doc["summary"]["failed"] + doc["summary"]["interrupted"], 0)
                self.assertEqual(doc["summary"]["unchanged"], finished, "the retry redid finished outputs")
                self.assertEqual(doc["summary"]["ok"], 4 - finished)
                self.assertEqual(temporaries(f"out/part-{index}"), [], "a killed attempt's leftover stayed")
                for name in ("m0.pt", "m1.pt", "m2.pt", "zbig.pt"):
                    src = f"data/part-{index}/{name}"
                    got = torch.load(f"out/part-{index}/{name}", weights_only=True)
                    self.assertTrue(all(t.device.type == "cpu" for t in got.values()))
                    want = torch.load(src, map_location="cpu")
                    self.assertEqual(list(got), list(want))  # --to cpu alone: keys kept
                    self.assertTrue(all(torch.equal(got[k], want[k]) for k in want))


if __name__ == "__main__":
    cwd = os.getcwd()
    try:
        unittest.main(argv=support.parse_args())
    finally:
        os.chdir(cwd)
