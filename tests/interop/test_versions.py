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

Under torch 1.13 (no weights_only default, no such dtypes) there is nothing
to judge: the tests skip, saying so. The casts' version difference
(float8_e4m3fn overflow) is judged bit for bit by test_casts.py.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import torch  # noqa: E402

TORCH = support.torch_version()
MODELED = (2, 6) <= TORCH <= (2, 14)
RELEASE = f"{TORCH[0]}.{TORCH[1]}"
SET = os.path.join(support.FIXTURES, "torch2.14", "versions")
DTYPE_FILES = {"e8m0.pt": ("scale", "float8_e8m0fnu"), "float4.pt": ("packed", "float4_e2m1fn_x2"),
               "bcomplex32.pt": ("z", "bcomplex32")}


def version(text):
    return tuple(int(x) for x in text.split("."))


def judge_loads(path):
    """(loads, error) of this judge's default torch.load (weights_only=True)."""
    try:
        torch.load(path, weights_only=True)
        return True, None
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"


@unittest.skipUnless(MODELED, f"torch {torch.__version__} is not a release ckptfix models (2.6 to 2.14), "
                              "and has no weights_only default: nothing to judge")
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
                if entry["file"] in DTYPE_FILES and TORCH < version(entry["loads_from"]):
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
                    kept = torch.load(out, weights_only=True)["last_error"]
                    if TORCH >= (2, 14):
                        self.assertIsInstance(kept, ValueError)  # on this release's allowlist: kept
                    else:
                        self.assertEqual(kept, "ValueError: diverged at step 7")  # not on it: its message


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
