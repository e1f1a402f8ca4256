#!/usr/bin/python3
"""ckptfix answers for the torch release it is told (--torch), judged by that release (issue 24).

fixtures/torch2.14/versions/ (fixtures/make_version_fixtures.py) holds one
file per place where torch releases differ in what the default torch.load
(weights_only=True) accepts: a float8_e8m0fnu tensor (2.7 on), a
float4_e2m1fn_x2 tensor (2.8 on), a bcomplex32 tensor (2.14), a ValueError
beside the weights (2.14), the dtype torch.uint4 as a value (2.7 on), and a
plain state dict (every release). Under a judge whose torch ckptfix models
(2.6 to 2.14), for each file:

  * the judge's own default load decides, and ckptfix must agree:
    `check --torch <judge>` exits 0 exactly when the judge loads the file,
    `inspect --torch <judge> --json` says the same; the manifest's release
    (what docs/format.md's table says) agrees with the judge too;
  * a rewrite for the judge (`convert --torch <judge>`) of a file holding a
    dtype the judge cannot load fails, naming the key, the dtype and the
    release, and writes nothing; of any other file it succeeds;
  * `weights-only --torch <judge> --drop-unknown` gives a file the judge's
    default load loads (a ValueError the judge's allowlist lacks becomes its
    message, "ValueError: ..."; one it has is kept).

Under torch 1.13, a release ckptfix models since issue 50 (`--torch 1.13`),
the judge is its default torch.load, weights_only=False: it loads a file
unless the file names what 1.13 does not have (these dtypes, torch.uint4).
check and inspect must agree with it; a rewrite for it succeeds exactly
when it loads the input, and its output loads there; weights-only for it
gives a file it loads. The casts' version differences (float8_e4m3fn
overflow; 1.13's float16 NaNs) are judged bit for bit by test_casts.py.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import torch  # noqa: E402

TORCH = support.torch_version()
MODELED = TORCH == (1, 13) or (2, 6) <= TORCH <= (2, 14)
WEIGHTS_ONLY_DEFAULT = TORCH >= (2, 6)
RELEASE = f"{TORCH[0]}.{TORCH[1]}"
SET = os.path.join(support.FIXTURES, "torch2.14", "versions")
DTYPE_FILES = {"e8m0.pt": ("scale", "float8_e8m0fnu"), "float4.pt": ("packed", "float4_e2m1fn_x2"),
               "bcomplex32.pt": ("z", "bcomplex32")}


def version(text):
    return tuple(int(x) for x in text.split("."))


def judge_loads(path):
    """(loads, error) of this judge's default torch.load (weights_only=True from 2.6, else False)."""
    try:
        if WEIGHTS_ONLY_DEFAULT:
            torch.load(path, weights_only=True)
        else:
            torch.load(path)  # torch 1.13's default: weights_only=False (ckptfix's own fixtures)
        return True, None
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"


@unittest.skipUnless(MODELED, f"torch {torch.__version__} is not a release ckptfix models (1.13, 2.6 to 2.14)")
class VersionTest(support.ScratchDirTest):
    prefix = "ckptfix-versions-"

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(SET, "manifest.json")) as f:
            cls.manifest = json.load(f)

    def test_check_and_inspect_agree_with_the_judge(self):
        for entry in self.manifest:
            path = os.path.join(SET, entry["file"])
            with self.subTest(file=entry["file"]):
                loads, error = judge_loads(path)
                if WEIGHTS_ONLY_DEFAULT:
                    self.assertEqual(loads, TORCH >= version(entry["loads_from"]),
                                     f"torch {torch.__version__} and docs/format.md disagree on {entry['file']} "
                                     f"(said: from {entry['loads_from']}): {error}")
                check = support.run("check", "--torch", RELEASE, path)
                self.assertEqual(check.returncode, 0 if loads else 1,
                                 f"check --torch {RELEASE}: {check.stdout}{check.stderr}\njudge: {error}")
                doc = json.loads(support.run("inspect", "--json", "--torch", RELEASE, path, check=0).stdout)
                verdict = doc["inputs"][0]["weights_only"]
                self.assertEqual((verdict["loads"], verdict["torch"]), (loads, RELEASE), verdict)
                # Every release at once: the ones that refuse are named, the others are not.
                every = support.run("check", "--torch", "2.6,2.7,2.8,2.9,2.10,2.11,2.12,2.13,2.14", path)
                self.assertEqual(every.returncode, 0 if entry["loads_from"] == "2.6" else 1, every.stdout)

    def test_rewrite_for_the_judge_refuses_dtypes_it_cannot_load(self):
        for entry in self.manifest:
            path = os.path.join(SET, entry["file"])
            with self.subTest(file=entry["file"]):
                out_dir = self.folder(entry["file"] + ".out")
                out = os.path.join(out_dir, "out.pt")
                proc = support.run("convert", "--torch", RELEASE, path, "-o", out)
                if not WEIGHTS_ONLY_DEFAULT:  # 1.13: a rewrite for it succeeds exactly when it loads the input
                    loads, error = judge_loads(path)
                    self.assertEqual(proc.returncode, 0 if loads else 1, f"{proc.stderr}\njudge: {error}")
                    if loads:
                        self.assertEqual(judge_loads(out), (True, None))
                    else:
                        self.assertIn(f"torch {RELEASE}", proc.stderr)
                        self.assertEqual(os.listdir(out_dir), [], "a refused rewrite wrote something")
                elif entry["file"] in DTYPE_FILES and TORCH < version(entry["loads_from"]):
                    key, dtype = DTYPE_FILES[entry["file"]]
                    self.assertEqual(proc.returncode, 1, proc.stderr)
                    self.assertIn(f"tensor '{key}' is {dtype}, which torch {RELEASE} cannot load", proc.stderr)
                    self.assertEqual(os.listdir(out_dir), [], "a refused rewrite wrote something")
                else:
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    loads, _ = judge_loads(path)
                    self.assertEqual(judge_loads(out)[0], loads, "the output loads where the input did")

    def test_weights_only_for_the_judge_loads_there(self):
        for entry in self.manifest:
            if entry["file"] in DTYPE_FILES and TORCH < version(entry["loads_from"]):
                continue  # a dtype the judge cannot load: refused (test above)
            path = os.path.join(SET, entry["file"])
            with self.subTest(file=entry["file"]):
                out = self.path(entry["file"] + ".wo.pt")
                support.run("weights-only", "--torch", RELEASE, "--drop-unknown", path, "-o", out, check=0)
                loads, error = judge_loads(out)
                self.assertTrue(loads, f"weights-only --torch {RELEASE}: the judge refuses the output: {error}")
                if entry["file"] == "exception.pt":
                    kept = torch.load(out, **({"weights_only": True} if WEIGHTS_ONLY_DEFAULT else {}))["last_error"]
                    if TORCH >= (2, 14):
                        self.assertIsInstance(kept, ValueError)  # on this release's allowlist: kept
                    else:
                        self.assertEqual(kept, "ValueError: diverged at step 7")  # not on it: its message


class Torch113Test(support.ScratchDirTest):
    """Issue 50: `weights-only` of a file holding np.random.get_state() wrote a uint32 tensor
    (_rebuild_tensor_v3), which torch 1.13 cannot load, and --torch 1.13 was refused. Written
    --torch 1.13, the uint32 array is an int64 tensor of the same values, which 1.13 (and every
    2.x, with weights_only=True) loads; a uint64 array, which no 1.13 type holds, is refused."""
    prefix = "ckptfix-torch113-"

    def test_weights_only_for_1_13_widens_unsigned_arrays(self):
        import numpy as np
        rng = np.random.RandomState(50)
        src = self.path("training.pt")
        torch.save({"model": torch.nn.Linear(3, 2).state_dict(), "rng": rng.get_state(),
                    "u16": np.arange(65530, 65536, dtype=np.uint16)}, src)
        out = self.path("for113.pt")
        proc = support.run("weights-only", "--torch", "1.13", src, "-o", out, check=0)
        self.assertIn("tensor int64 [624] (widened: torch 1.13 has no uint32)", proc.stderr)
        self.assertIn("tensor int32 [6] (widened: torch 1.13 has no uint16)", proc.stderr)
        loaded = torch.load(out, **({"weights_only": True} if WEIGHTS_ONLY_DEFAULT else {}))
        key = loaded["rng"][1]
        self.assertEqual(key.dtype, torch.int64)
        self.assertEqual(key.tolist(), [int(x) for x in rng.get_state()[1]])
        self.assertEqual(loaded["u16"].dtype, torch.int32)
        self.assertEqual(loaded["u16"].tolist(), list(range(65530, 65536)))
        # The same state set back into numpy gives the same numbers.
        state = list(loaded["rng"])
        state[1] = key.numpy().astype(np.uint32)
        again = np.random.RandomState()
        again.set_state(tuple(state))
        self.assertEqual(again.randint(0, 1 << 30, 5).tolist(), rng.randint(0, 1 << 30, 5).tolist())
        # uint64: no type of torch 1.13 holds every value.
        wide = self.path("u64.pt")
        torch.save({"w": torch.ones(2), "u64": np.arange(3, dtype=np.uint64)}, wide)
        proc = support.run("weights-only", "--torch", "1.13", wide, "-o", self.path("no.pt"), check=1)
        self.assertIn("tensor 'u64' is uint64, which torch 1.13 cannot load", proc.stderr)
        self.assertFalse(os.path.exists(self.path("no.pt")))


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
