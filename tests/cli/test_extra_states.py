#!/usr/bin/python3
"""Issue 66, items 1-5: pickles inside module extra states, judged by this
interpreter's torch.

tests/attacks/extra_states.py makes, with real torch, Transformer Engine's
two forms (a uint8 tensor of a pickle; an io.BytesIO of a torch.save), a
ModelOpt-like one, uint8 extra states that are no pickle, and a hostile
variant of each (os.system, builtins.exec, a _load_from_bytes stream whose
pickle calls os.system). For each:

  * control (hostile ones): torch.load then the model's set_extra_state
    (pickle.loads of the bytes, or torch.load of the BytesIO), as Transformer
    Engine and ModelOpt do it, touches the canary;
  * ckptfix: inspect lists the nested pickle with its globals and tensors;
    check exits 1 naming the key and the call; strip-prefix, cast, convert
    (torch, safetensors, DCP) and weights-only refuse (exit 1, nothing
    written); weights-only --drop-unknown replaces it with None; ckptfix.load
    refuses it; the canary is never touched by ckptfix;
  * benign ones: every rewrite carries the extra state byte for byte, judged
    by torch.load (and safetensors) of each output, and its set_extra_state
    reads it back.
"""
import glob
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "attacks"))
import support  # noqa: E402
import torch  # noqa: E402
import extra_states  # noqa: E402

CANARY = "ckptfix-pwned-extra-state"
BENIGN = {"te_new.pt": "layer._extra_state", "te_old.pt": "layer._extra_state",
          "modelopt.pt": "q._extra_state", "no_pickle.pt": "layer._extra_state"}
HOSTILE = {"te_new_system.pt": ("layer._extra_state", "posix.system"),
           "te_new_exec.pt": ("layer._extra_state", "builtins.exec"),
           "te_old_system.pt": ("layer._extra_state", "posix.system"),
           "modelopt_exec.pt": ("q._extra_state", "builtins.exec"),
           "te_new_load_from_bytes.pt": ("layer._extra_state", "posix.system")}

# What a model's load_state_dict does with the extra state (Transformer
# Engine's set_extra_state: a tensor is pickle.loads'd, a BytesIO torch.load'ed).
SET_EXTRA_STATE = """
import io, pickle, sys, torch
sys.path.insert(0, sys.argv[2])
import extra_states  # the recipe classes under their module name
sd = torch.load(sys.argv[1], weights_only=False)
state = [v for k, v in sd.items() if k.endswith('_extra_state')][0]
if isinstance(state, io.BytesIO):
    state.seek(0)
    value = torch.load(state, weights_only=False)
elif state is None:
    value = None
else:
    value = pickle.loads(state.numpy().tobytes()) if state.numel() else None
print(type(value).__name__)
"""


class ExtraStateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ckptfix-extra-")
        cls.files = os.path.join(cls.dir, "files")
        subprocess.run([sys.executable, extra_states.__file__, cls.files, CANARY], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(dir=self.dir)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def ckptfix(self, *args):
        return subprocess.run([support.CKPTFIX, *args], cwd=self.work, capture_output=True, text=True)

    def set_extra_state(self, path):
        """The model's side: torch.load then set_extra_state, in a fresh process in self.work."""
        return subprocess.run([sys.executable, "-c", SET_EXTRA_STATE, path, os.path.dirname(extra_states.__file__)],
                              cwd=self.work, capture_output=True, text=True)

    def canary(self):
        return os.path.exists(os.path.join(self.work, CANARY))

    def test_a_hostile_extra_state_runs_in_torch_and_is_refused_by_ckptfix(self):
        for name, (key, call) in HOSTILE.items():
            path = os.path.join(self.files, name)
            with self.subTest(file=name):
                # Control: torch's weights_only passes the file, and the model runs the payload.
                if support.torch_version() >= (2, 6) and name != "te_old_system.pt":
                    torch.load(path, weights_only=True)  # no error: weights_only never looks inside
                self.set_extra_state(path)
                self.assertTrue(self.canary(), f"{name}: torch did not run the payload (the control failed)")
                os.unlink(os.path.join(self.work, CANARY))
                # inspect shows it; check refuses it, naming the key and the call.
                proc = self.ckptfix("inspect", "--json", path)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                nested = json.loads(proc.stdout)["inputs"][0]["nested_pickles"]
                self.assertTrue(any(n["refused"] for n in nested), nested)
                proc = self.ckptfix("check", path)
                self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
                self.assertIn(f"'module.{key}", proc.stdout)
                self.assertIn(call, proc.stdout)
                # Every rewrite refuses: exit 1, nothing written.
                for args in (["strip-prefix", path, "-o", "out.pt"], ["cast", "--dtype", "bf16", path, "-o", "out.pt"],
                             ["convert", path, "-o", "out.safetensors"], ["convert", path, "-o", "out.pt"],
                             ["convert", path, "--format", "dcp", "-o", "out_dcp"], ["weights-only", path, "-o", "out.pt"]):
                    proc = self.ckptfix(*args)
                    self.assertEqual(proc.returncode, 1, f"{args}: {proc.stderr}")
                    self.assertIn(key, proc.stderr, args)
                    self.assertEqual(os.listdir(self.work), [], f"{args} wrote something")
                # --drop-unknown makes it None, and the output loads with nothing run.
                proc = self.ckptfix("weights-only", "--drop-unknown", path, "-o", "out.pt")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                out = torch.load(os.path.join(self.work, "out.pt"), weights_only=support.torch_version() >= (2, 6))
                self.assertIsNone(out["module." + key])
                self.assertEqual(self.set_extra_state(os.path.join(self.work, "out.pt")).stdout.strip(), "NoneType")
                os.unlink(os.path.join(self.work, "out.pt"))
                # ckptfix.load refuses to hand it to the model.
                proc = subprocess.run([sys.executable, "-c", "import sys, ckptfix; ckptfix.load(sys.argv[1])", path],
                                      cwd=self.work, capture_output=True, text=True,
                                      env=dict(os.environ, PYTHONPATH=os.path.join(support.REPO, "python")))
                self.assertNotEqual(proc.returncode, 0, proc.stderr)
                self.assertIn("CheckpointError", proc.stderr)
                self.assertFalse(self.canary(), f"{name}: ckptfix ran the payload")

    def test_benign_extra_states_are_read_and_carried_byte_for_byte(self):
        try:
            from safetensors.torch import load_file  # noqa: PLC0415
        except ImportError:  # the local judge (bookworm) has no safetensors package
            load_file = None
        for name, key in BENIGN.items():
            path = os.path.join(self.files, name)
            self.work = tempfile.mkdtemp(dir=self.dir)  # each file's outputs apart
            original = torch.load(path, weights_only=False)["module." + key]
            with self.subTest(file=name):
                proc = self.ckptfix("inspect", "--json", path)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                nested = json.loads(proc.stdout)["inputs"][0]["nested_pickles"]
                self.assertTrue(nested, "the extra state is listed")
                self.assertFalse([n for n in nested if n["refused"]], nested)
                if name == "te_new.pt":
                    outer = nested[0]
                    self.assertEqual(outer["form"], "pickle")
                    names = {g["name"] for g in outer["globals"]}
                    self.assertIn("transformer_engine.common.recipe.DelayedScaling", names)
                    self.assertEqual(len(outer["tensors"]), 4, outer)
                if name == "te_old.pt":
                    self.assertEqual(nested[0]["form"], "torch zip")
                    self.assertEqual(len(nested[0]["tensors"]), 4, nested[0])
                if name == "no_pickle.pt":
                    self.assertTrue(all(n["form"] == "not a pickle" for n in nested), nested)
                proc = self.ckptfix("check", path)
                # torch's weights_only refuses an io.BytesIO: check says so, and only that.
                if name == "te_old.pt":
                    self.assertEqual(proc.returncode, 1, proc.stdout)
                    self.assertIn("_io.BytesIO", proc.stdout)
                else:
                    self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                outputs = {"strip.pt": ["strip-prefix", path, "-o", "strip.pt"],
                           "cast.pt": ["cast", "--dtype", "bf16", path, "-o", "cast.pt"],
                           "convert.pt": ["convert", path, "-o", "convert.pt"]}
                if name != "te_old.pt" and load_file is not None:  # a BytesIO is no tensor: safetensors cannot hold it
                    outputs["out.safetensors"] = ["convert", path, "-o", "out.safetensors"]
                for out, args in outputs.items():
                    proc = self.ckptfix(*args)
                    self.assertEqual(proc.returncode, 0, f"{args}: {proc.stderr}")
                    target = os.path.join(self.work, out)
                    if out.endswith(".safetensors"):
                        carried = load_file(target)["module." + key]
                    else:
                        sd = torch.load(target, weights_only=False)
                        carried = sd.get("module." + key, sd.get(key))
                    self.assert_same_state(original, carried, f"{name} {out}")
                    if not out.endswith(".safetensors") and name != "no_pickle.pt":  # (no pickle: no model reads it)
                        self.assertEqual(self.set_extra_state(target).returncode, 0, f"{name} {out}")
                # The weights-only repair: a uint8 extra state is allowed as it is; a BytesIO is refused,
                # and with --drop-unknown becomes None.
                proc = self.ckptfix("weights-only", path, "-o", "wo.pt")
                if name == "te_old.pt":
                    self.assertEqual(proc.returncode, 1, proc.stderr)
                    self.assertIn("_io.BytesIO", proc.stderr)
                else:
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                # ckptfix.load gives what torch.load gives.
                proc = subprocess.run(
                    [sys.executable, "-c", "import sys, io, ckptfix, torch; v = ckptfix.load(sys.argv[1])[sys.argv[2]]; "
                     "print(type(v).__name__, (v.getvalue() if isinstance(v, io.BytesIO) else v.numpy().tobytes()).hex())",
                     path, "module." + key], cwd=self.work, capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=os.path.join(support.REPO, "python")))
                self.assertEqual(proc.returncode, 0, proc.stderr)
                kind, data = proc.stdout.split()
                self.assertEqual(kind, type(original).__name__)
                self.assertEqual(bytes.fromhex(data), self.state_bytes(original))
        self.assertFalse(self.canary())

    def test_dcp_carries_every_extra_state_and_back(self):
        for name, key in BENIGN.items():
            path = os.path.join(self.files, name)
            with self.subTest(file=name):
                dcp, back = os.path.join(self.work, name + ".dcp"), os.path.join(self.work, name + ".back.pt")
                proc = self.ckptfix("convert", path, "--format", "dcp", "-o", dcp)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                proc = self.ckptfix("convert", dcp, "-o", back)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                original = torch.load(path, weights_only=False)["module." + key]
                self.assert_same_state(original, torch.load(back, weights_only=False).get("module." + key), name)

    @staticmethod
    def state_bytes(v):
        return v.getvalue() if isinstance(v, io.BytesIO) else v.numpy().tobytes()

    def assert_same_state(self, original, carried, what):
        self.assertIsNotNone(carried, what)
        self.assertEqual(type(carried).__name__, type(original).__name__, what)
        if isinstance(original, torch.Tensor):
            self.assertEqual(carried.dtype, torch.uint8, what)
        self.assertEqual(self.state_bytes(carried), self.state_bytes(original), what)


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
