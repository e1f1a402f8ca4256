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
        proc = support.run("diff", "--strip-prefix", support.fixture("compiled_dataparallel.pt"),
                           support.fixture("plain_state_dict.pt"), check=0)
        self.assertIn("equal: 9 tensors compared exactly", proc.stdout)

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
