#!/usr/bin/python3
"""Issue 66, items 000 and 0: what CPython makes of a pickle is what ckptfix
reads, and calls hidden in callables ckptfix knows as data are calls.

tests/attacks/pickle_differentials.py writes the files. Judged by this
interpreter's torch (and so its CPython):

  * values: torch.load of the input, and of `ckptfix convert`'s output, give
    the same value, or ckptfix refuses the input (exit 1); where CPython
    itself refuses the input, so does ckptfix;
  * calls: `control_*` files run the canary under torch.load(weights_only=
    False) (the shape is real; `hashed_key` has no control: no class of the
    standard library runs a command from its __hash__); every file is refused
    by check and by every rewrite, names the global it calls, writes nothing,
    and never touches the canary.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "attacks"))
import pickle_differentials as pd  # noqa: E402
import support  # noqa: E402
import torch  # noqa: E402

CANARY = "ckptfix-pwned-pickle"

LOAD = """
import pickle, sys, torch
try:
    value = torch.load(sys.argv[1], weights_only=False)
    print(pickle.dumps(value, protocol=0).decode('latin-1') if not hasattr(value, 'items') else
          repr(sorted((repr(k), repr(v)) for k, v in value.items())))
except Exception as e:
    print('refused:', type(e).__name__)
"""

CALLS = ["ordereddict_keys", "dict_keys", "namespace_keys", "reconstructor_keys", "nested_ordereddict",
         "setstate_attribute", "hashed_key"]
REWRITES = [["convert", "-o", "out.pt"], ["strip-prefix", "--auto", "-o", "out.pt"],
            ["remap", "--to", "cpu", "-o", "out.pt"], ["fix", "--to", "cpu", "-o", "out.pt"],
            ["weights-only", "-o", "out.pt"]]


class PickleDifferentialTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ckptfix-pickle-")
        cls.files = os.path.join(cls.dir, "files")
        subprocess.run([sys.executable, pd.__file__, cls.files, CANARY], check=True)

    def torch_load(self, path):
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run([sys.executable, "-c", LOAD, path], cwd=cwd, capture_output=True, text=True,
                                  timeout=120)
            return proc.stdout.strip(), os.path.exists(os.path.join(cwd, CANARY))

    def test_values_read_as_cpython_reads_them(self):
        for name in pd.VALUES:
            with self.subTest(file=name):
                src = os.path.join(self.files, name)
                want, _ = self.torch_load(src)
                with tempfile.TemporaryDirectory() as cwd:
                    proc = support.run("convert", src, "-o", "out.pt", cwd=cwd)
                    if name in pd.REFUSED_BY_CPYTHON:
                        self.assertTrue(want.startswith("refused:"), f"CPython loads {name}: {want}")
                    if name in pd.REFUSED_BY_CPYTHON or name in pd.REFUSED_AS_AMBIGUOUS:
                        self.assertEqual(proc.returncode, 1, proc.stderr)
                        self.assertRegex(proc.stderr, r"^ckptfix: error: '.*': ")
                        self.assertEqual(os.listdir(cwd), [])
                        continue
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    got, _ = self.torch_load(os.path.join(cwd, "out.pt"))
                    self.assertEqual(got, want, f"{name}: torch.load of the output differs from the input's")

    def test_calls_hidden_in_known_callables_are_calls(self):
        for case in CALLS:
            with self.subTest(file=case):
                if case != "hashed_key":
                    _, ran = self.torch_load(os.path.join(self.files, "control_" + case + ".pt"))
                    if case == "setstate_attribute" and not ran and not hasattr(torch._utils,
                                                                                "_rebuild_parameter_with_state"):
                        pass  # an older torch has no such rebuild
                    else:
                        self.assertTrue(ran, f"torch {torch.__version__}: control_{case} did not run its payload")
                for prefix in ("control_", ""):
                    src = os.path.join(self.files, prefix + case + ".pt")
                    with tempfile.TemporaryDirectory() as cwd:
                        check = support.run("check", src, cwd=cwd)
                        self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
                        if prefix == "":
                            self.assertIn("ckptfix_test_payload.run", check.stdout + check.stderr)
                        for command in REWRITES:
                            proc = support.run(command[0], src, *command[1:], cwd=cwd)
                            self.assertEqual(proc.returncode, 1, f"{command[0]}: {proc.stdout}{proc.stderr}")
                            # weights-only refuses it as data it has no rule for; the others name the call.
                            if prefix == "" and command[0] != "weights-only":
                                self.assertIn("ckptfix_test_payload.run", proc.stderr, command[0])
                        self.assertEqual(os.listdir(cwd), [], "a refused file left something behind, or ran")


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
