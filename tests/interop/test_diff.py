#!/usr/bin/python3
"""`ckptfix diff` judged against torch's own comparison.

For pairs of checkpoints, torch loads both and decides per tensor with
torch.allclose(a.double(), b.double(), rtol, atol, equal_nan=True) (exact
when both tolerances are 0) and computes the largest absolute difference;
ckptfix's JSON verdicts, key sets, dtypes, shapes and maxima must agree.
"""
import collections
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import torch  # noqa: E402
import torch_compare  # noqa: E402
from test_convert import torch_tensor_positions  # noqa: E402


def key_of(path, strip=None):
    parts = []
    for p in path:
        if isinstance(p, str) and strip and p.startswith(strip):
            p = p[len(strip):]
        parts.append(str(p))
    return "/".join(parts)


def torch_verdicts(a_path, b_path, rtol=0.0, atol=0.0, strip=None):
    a, _ = torch_compare.load_with_locations(a_path)
    b, _ = torch_compare.load_with_locations(b_path)
    ta = collections.OrderedDict((key_of(p, strip), t) for p, t in torch_tensor_positions(a))
    tb = collections.OrderedDict((key_of(p, strip), t) for p, t in torch_tensor_positions(b))
    verdicts = {}
    for key in ta.keys() & tb.keys():
        x, y = ta[key].detach(), tb[key].detach()
        if x.shape != y.shape:
            verdicts[key] = ("shape", None)
            continue
        if x.is_complex() or y.is_complex():
            x, y = x.to(torch.complex128), y.to(torch.complex128)
        else:
            x, y = x.double(), y.double()
        close = bool(torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
        both = ~(torch.isnan(x) | torch.isnan(y))
        d = (x - y).abs()[both]
        d = d[torch.isfinite(d)] if d.numel() else d
        verdicts[key] = (close, float(d.max()) if d.numel() else 0.0)
    return list(ta.keys() - tb.keys()), list(tb.keys() - ta.keys()), verdicts, ta, tb


class DiffJudgedByTorch(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def check(self, a, b, *flags, rtol=0.0, atol=0.0, strip=None, ignore_dtype=False):
        proc = support.run("diff", "--json", *flags, a, b)
        self.assertIn(proc.returncode, (0, 1), proc.stderr)
        doc = json.loads(proc.stdout)
        only_a, only_b, verdicts, ta, tb = torch_verdicts(a, b, rtol, atol, strip)
        self.assertEqual(sorted(doc["only_in_a"]), sorted(only_a))
        self.assertEqual(sorted(doc["only_in_b"]), sorted(only_b))
        self.assertEqual(sorted(t["key"] for t in doc["tensors"]), sorted(verdicts))
        all_equal = not only_a and not only_b
        for t in doc["tensors"]:
            close, max_abs = verdicts[t["key"]]
            dtypes = [str(ta[t["key"]].dtype).replace("torch.", ""), str(tb[t["key"]].dtype).replace("torch.", "")]
            self.assertEqual(t["dtype"], dtypes, t["key"])
            if close == "shape":
                self.assertFalse(t["equal"])
                all_equal = False
                continue
            self.assertEqual(t["mismatched"] == 0, close, t["key"])
            if math.isfinite(max_abs):
                self.assertAlmostEqual(t["max_abs_diff"], max_abs, delta=1e-12 + 1e-9 * abs(max_abs), msg=t["key"])
            same = close and (ignore_dtype or dtypes[0] == dtypes[1])
            all_equal &= same
        self.assertEqual(doc["equal"], all_equal)
        self.assertEqual(proc.returncode, 0 if all_equal else 1)
        return doc

    def test_identical_and_converted_files_are_equal(self):
        for name in ["training.pt", "all_dtypes.pt", "views_tied.pt", "legacy_views.pt"]:
            with self.subTest(fixture=name):
                out = os.path.join(self.tmp, name)
                support.run("convert", support.fixture(name), "-o", out, check=0)
                self.assertTrue(self.check(support.fixture(name), out)["equal"])  # NaNs equal NaNs

    def test_cast_differs_exactly_but_not_within_tolerance(self):
        out = os.path.join(self.tmp, "bf16.pt")
        support.run("cast", "--dtype", "bf16", support.fixture("training.pt"), "-o", out, check=0)
        self.assertFalse(self.check(support.fixture("training.pt"), out)["equal"])
        doc = self.check(support.fixture("training.pt"), out, "--rtol", "1e-2", "--ignore-dtype", rtol=1e-2,
                         ignore_dtype=True)
        self.assertTrue(doc["equal"])
        doc = self.check(support.fixture("training.pt"), out, "--atol", "1e-4", "--ignore-dtype", atol=1e-4,
                         ignore_dtype=True)

    def test_one_changed_element(self):
        sd = torch.load(support.fixture("plain_state_dict.pt"))
        sd["fc.weight"][1, 2] += 0.25
        changed = os.path.join(self.tmp, "changed.pt")
        torch.save(sd, changed)
        doc = self.check(support.fixture("plain_state_dict.pt"), changed)
        differing = [t["key"] for t in doc["tensors"] if not t["equal"]]
        self.assertEqual(differing, ["fc.weight"])
        self.check(support.fixture("plain_state_dict.pt"), changed, "--atol", "0.3", atol=0.3)

    def test_prefix_insensitive_matching(self):
        self.assertFalse(self.check(support.fixture("dataparallel.pt"), support.fixture("plain_state_dict.pt"))["equal"])
        doc = self.check(support.fixture("dataparallel.pt"), support.fixture("plain_state_dict.pt"),
                         "--strip-prefix=module.", strip="module.")
        self.assertTrue(doc["equal"])
        # --strip-prefix alone is 'module.', as in fix (issue 50); --auto-prefix strips any wrapper chain.
        proc = support.run("diff", "--auto-prefix", support.fixture("compiled_dataparallel.pt"),
                           support.fixture("plain_state_dict.pt"), check=0)
        self.assertIn("equal: 9 tensors compared exactly", proc.stdout)
        support.run("diff", "--strip-prefix", support.fixture("dataparallel.pt"),
                    support.fixture("plain_state_dict.pt"), check=0)
        support.run("diff", "--strip-prefix", support.fixture("compiled_dataparallel.pt"),
                    support.fixture("plain_state_dict.pt"), check=1)
        support.run("diff", "--strip-prefix=_orig_mod.", "--strip-prefix", support.fixture("compiled_dataparallel.pt"),
                    support.fixture("plain_state_dict.pt"), check=0)

    def test_bytes_compared_first_then_values_where_they_differ(self):
        """Issue 50: tensors of one dtype are compared by their bytes, then element by element only where
        the bytes differ. Bytes that differ with equal values (-0.0 and 0.0, NaNs of other payloads) are
        equal; a change past the first MiB of a tensor, or in its last element, is found; torch judges."""
        n = 3 << 18  # 3 MiB of float32: several chunks
        base = {"big": torch.linspace(-1, 1, n), "ints": torch.arange(n, dtype=torch.int64),
                "half": torch.linspace(-4, 4, 5000).half(), "zeros": torch.zeros(100),
                "nans": torch.full((100,), float("nan"))}
        a = os.path.join(self.tmp, "a.pt")
        torch.save(base, a)
        cases = {
            "same-values-other-bytes": lambda sd: (sd["zeros"].neg_(),
                                                   sd["nans"].view(torch.int32).__ior__(0x00400001)),
            "second-mib": lambda sd: sd["big"].__setitem__((1 << 18) + 7, 5.0),
            "last-element": lambda sd: (sd["big"].__setitem__(n - 1, -7.0), sd["ints"].__setitem__(n - 1, -1)),
            "half-and-int": lambda sd: (sd["half"].__setitem__(4999, 0.0), sd["ints"].__setitem__(0, 2**62)),
        }
        for name, change in cases.items():
            with self.subTest(case=name):
                sd = {k: v.clone() for k, v in base.items()}
                change(sd)
                os.makedirs(os.path.join(self.tmp, name))
                b = os.path.join(self.tmp, name, "a.pt")
                torch.save(sd, b)
                doc = self.check(a, b)
                self.assertEqual(doc["equal"], name == "same-values-other-bytes")
                self.check(a, b, "--atol", "3", atol=3.0)

    def test_key_compares_only_the_dicts_named(self):
        """Issue 50: diff --key PATH compares the dicts at that path in both files, as fix's --key chooses."""
        a, b = support.fixture("training_dp_cuda.pt"), support.fixture("training.pt")
        proc = support.run("diff", "--json", "--auto-prefix", "--ignore-device", "--key", "state_dict", a, b)
        doc = json.loads(proc.stdout)
        _, _, verdicts, _, _ = torch_verdicts(a, b, strip="module.")
        expected = {k: v for k, v in verdicts.items() if k.startswith("state_dict/")}
        self.assertEqual(sorted(t["key"] for t in doc["tensors"]), sorted(expected))
        self.assertEqual(doc["only_in_a"] + doc["only_in_b"], [])
        for t in doc["tensors"]:
            self.assertEqual(t["mismatched"] == 0, expected[t["key"]][0], t["key"])
        self.assertEqual(proc.returncode, 0 if doc["equal"] else 1)
        support.run("diff", "--key", "no/such/dict", a, b, check=2)

    def test_device_and_shape_differences(self):
        out = os.path.join(self.tmp, "cpu.pt")
        support.run("remap", "--to", "cpu", support.fixture("cuda0.pt"), "-o", out, check=0)
        proc = support.run("diff", "--json", support.fixture("cuda0.pt"), out, check=1)
        self.assertTrue(all(t["device"] == ["cuda:0", "cpu"] for t in json.loads(proc.stdout)["tensors"]))
        support.run("diff", "--ignore-device", support.fixture("cuda0.pt"), out, check=0)
        sd = torch.load(support.fixture("plain_state_dict.pt"))
        sd["fc.bias"] = torch.zeros(4)
        reshaped = os.path.join(self.tmp, "reshaped.pt")
        torch.save(sd, reshaped)
        self.check(support.fixture("plain_state_dict.pt"), reshaped)

    def test_trouble_is_exit_2(self):
        support.run("diff", support.fixture("plain_state_dict.pt"), support.fixture("empty.pt"), check=2)
        support.run("diff", support.fixture("plain_state_dict.pt"), support.fixture("plain_state_dict.pt"), "--atol",
                    "-1", check=2)


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
