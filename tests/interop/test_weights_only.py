#!/usr/bin/python3
"""`ckptfix weights-only` judged by real torch (issue 14).

For every fixture of fixtures/torch2.*/weights_only/ (each refused by the
default torch.load of torch >= 2.6), `ckptfix weights-only IN -o OUT` must
write a file that
  (a) the DEFAULT torch.load of this judge loads: no weights_only argument,
      no allowlist added;
  (b) equals what the table of issue 14 gives when applied here, in Python,
      to torch.load(IN, weights_only=False) (`expected()` below): types, dict
      key order, `_metadata`, tensor dtype, shape and bytes;
  (c) for pickled modules, loads with load_state_dict(strict=True) into a
      fresh instance of the same architecture;
  (e) `ckptfix check` passes.
Both the human and the --json report must name every changed value (its key)
and what it was (the global). (d) A user class is refused (exit 1, the class
named, no output) and becomes None with --drop-unknown.

Each fixture is one test method, so what is not supported yet fails per row.
Under a judge whose torch has no weights_only default (< 2.6: the local
torch 1.13) there is nothing to judge, and every test is skipped. A judge
reads the weights-only sets written by its own or an older torch (sid: 2.6
and 2.14; trixie: 2.6).
"""
import argparse
import collections
import enum
import json
import math
import os
import pathlib
import re
import shutil
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# fixtures/wo_user_classes.py, for torch.load(IN, weights_only=False) of
# wo_user_class.pt and wo_enum.pt (and only for that: the outputs are loaded
# with the default torch.load, which imports nothing).
sys.path.insert(0, support.FIXTURES)

try:
    from omegaconf import DictConfig, ListConfig, OmegaConf
except ImportError:  # the local judge has no omegaconf; its tests are skipped anyway
    OmegaConf = None

TORCH = support.torch_version()
WEIGHTS_ONLY_DEFAULT = TORCH >= (2, 6)
SKIP_REASON = (f"torch {torch.__version__} does not default to torch.load(weights_only=True) "
               "(torch >= 2.6 does) and has no weights-only fixture set: nothing to judge")
# The weights-only sets this judge's torch can read (written by it or an older torch).
SETS = [os.path.join(folder, "weights_only") for folder, version in support.FIXTURE_SETS
        if (2, 6) <= version <= TORCH]


class UnknownValue(Exception):
    """A value outside issue 14's table: ckptfix must refuse it (or drop it with --drop-unknown)."""


def expected(obj, drop_unknown=False):
    """Issue 14's table applied to a value loaded with weights_only=False."""
    def conv(x):
        return expected(x, drop_unknown)

    if isinstance(obj, nn.Module):
        return obj.state_dict()  # an OrderedDict with _metadata; non-persistent buffers left out
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (argparse.Namespace, types.SimpleNamespace)):
        return {k: conv(v) for k, v in vars(obj).items()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biufc":
            raise UnknownValue(f"numpy array of dtype {obj.dtype}")
        return torch.from_numpy(obj)
    if isinstance(obj, np.dtype):
        return obj.name
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return conv(obj.value)
    if OmegaConf is not None and isinstance(obj, (DictConfig, ListConfig)):
        return OmegaConf.to_container(obj, resolve=False)
    if type(obj) is collections.OrderedDict:
        out = collections.OrderedDict((k, conv(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if type(obj) is dict:
        return {k: conv(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(conv(v) for v in obj)
    if obj is None or type(obj) in (bool, int, float, complex, str, bytes):
        return obj
    if drop_unknown:
        return None
    raise UnknownValue(f"{type(obj).__module__}.{type(obj).__qualname__}")


def tensor_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).tolist()


def strings_in(doc, skip=("path", "output")):
    """Every key and string value of a JSON document, except the top-level
    fields in `skip` (the input's and output's file names)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in skip:
                continue
            yield k
            yield from strings_in(v, ())
    elif isinstance(doc, list):
        for v in doc:
            yield from strings_in(v, ())
    elif isinstance(doc, str):
        yield doc


def wo_module_architecture():
    """The architecture of wo_module.pt (fixtures/make_weights_only_fixtures.py: small_model)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    model[4].register_buffer("scratch", torch.zeros(2), persistent=False)
    return model


def wo_ultralytics_architecture():
    """The architecture of wo_ultralytics.pt's model (make_weights_only_fixtures.py: ultralytics_model)."""
    return nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.SiLU()),
                         nn.Conv2d(4, 2, 1)).half()


@unittest.skipUnless(WEIGHTS_ONLY_DEFAULT, SKIP_REASON)
class WeightsOnlyTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ckptfix-wo-")
        if not SETS:
            self.fail(f"no weights-only fixture set for torch {torch.__version__} "
                      "(fixtures/make_weights_only_fixtures.py)")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers -----------------------------------------------------------

    def fixture(self, wo_set, name):
        path = support.fixture(os.path.join(wo_set, name))
        if not os.path.exists(path):
            self.fail(f"missing fixture {path} (fixtures/make_weights_only_fixtures.py)")
        return path

    def assert_same(self, actual, want, where="root"):
        """Deep equality: exact types, dict key order, _metadata, tensor dtype/shape/bytes."""
        self.assertIs(type(actual), type(want), f"{where}: {type(actual)} vs {type(want)}")
        if isinstance(want, torch.Tensor):
            self.assertEqual(actual.dtype, want.dtype, f"{where}: dtype")
            self.assertEqual(tuple(actual.shape), tuple(want.shape), f"{where}: shape")
            self.assertEqual(actual.requires_grad, want.requires_grad, f"{where}: requires_grad")
            self.assertEqual(tensor_bytes(actual), tensor_bytes(want), f"{where}: values")
        elif isinstance(want, dict):
            self.assertEqual(list(actual.keys()), list(want.keys()), f"{where}: keys")
            for k in want:
                self.assert_same(actual[k], want[k], f"{where}[{k!r}]")
            self.assertEqual(getattr(actual, "_metadata", None), getattr(want, "_metadata", None),
                             f"{where}: _metadata")
        elif isinstance(want, (list, tuple)):
            self.assertEqual(len(actual), len(want), f"{where}: length")
            for i, (a, w) in enumerate(zip(actual, want)):
                self.assert_same(a, w, f"{where}[{i}]")
        elif isinstance(want, float):
            self.assertTrue(actual == want or (math.isnan(actual) and math.isnan(want)), f"{where}: {actual!r} vs {want!r}")
            self.assertEqual(math.copysign(1, actual), math.copysign(1, want), f"{where}: sign")
        else:
            self.assertEqual(actual, want, where)

    def assert_reports(self, text, changed_keys, globals_, what):
        """`text` (a report) names every changed key and the global each came from."""
        tokens = set(re.findall(r"[A-Za-z0-9_]+", text))
        for key in changed_keys:
            self.assertIn(key, tokens, f"the {what} does not name the changed value {key!r}:\n{text}")
        for name in globals_:
            self.assertIn(name, text, f"the {what} does not say the value was a {name}:\n{text}")

    def weights_only(self, wo_set, name, changed_keys, globals_, *extra):
        """Runs weights-only (plain and --json), checks (a) and (e) and the reports;
        returns (output as the default torch.load loads it, the input as weights_only=False loads it)."""
        src = self.fixture(wo_set, name)
        before = support.sha256(src)
        with self.assertRaises(Exception, msg=f"{name}: the default torch.load accepts the input; "
                                               "the fixture tests nothing"):
            torch.load(src)
        outs = []
        for flavour in ("human", "json"):
            out = os.path.join(self.tmp, flavour, support.flat_name(os.path.join(wo_set, name)))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            args = ["weights-only", src, "-o", out, *extra] + (["--json"] if flavour == "json" else [])
            proc = support.run(*args, check=0)
            if flavour == "json":
                report = json.loads(proc.stdout)
                self.assertEqual(report["command"], "weights-only")
                self.assertEqual(len(report["inputs"]), 1)
                item = report["inputs"][0]
                self.assertEqual(item["status"], "ok", item)
                self.assert_reports("\n".join(strings_in(item)), changed_keys, globals_, "--json report")
            else:
                self.assert_reports(proc.stdout + proc.stderr, changed_keys, globals_, "report")
            check = support.run("check", out)
            self.assertEqual(check.returncode, 0, f"ckptfix check {out}:\n{check.stdout}{check.stderr}")
            outs.append(out)
        self.assertEqual(support.sha256(outs[0]), support.sha256(outs[1]), "--json changed the output file")
        self.assertEqual(support.sha256(src), before, "the input changed")
        loaded = torch.load(outs[0])  # the default load: weights_only=True, no allowlist
        # ... and the same with the file mapped instead of read (torch >= 2.1).
        self.assert_same(torch.load(outs[0], mmap=True), loaded, "mmap=True load")
        original = torch.load(src, weights_only=False)
        return loaded, original

    def convert_and_compare(self, name, changed_keys, globals_, more_checks):
        """weights_only() on `name` of every set, then (b) and more_checks(loaded, original)."""
        for wo_set in SETS:
            with self.subTest(set=wo_set):
                loaded, original = self.weights_only(wo_set, name, changed_keys, globals_)
                self.assert_same(loaded, expected(original))
                more_checks(loaded, original)

    # -- one test per fixture ----------------------------------------------

    def test_namespace_and_paths(self):
        def more_checks(loaded, _original):
            self.assertEqual(loaded["hyper_parameters"]["args"], {"lr": 0.1, "name": "run", "layers": [1, 2]})
            self.assertEqual(loaded["hyper_parameters"]["path"], "/data/train")
        self.convert_and_compare("wo_namespace.pt", ["args", "ns", "path", "pure"],
                                 ["argparse.Namespace", "types.SimpleNamespace", "PosixPath", "PurePosixPath"],
                                 more_checks)

    def test_numpy(self):
        def more_checks(loaded, _original):
            self.assertIs(loaded["flag"], True)
            self.assertEqual(loaded["dtype"], "float16")
            self.assertEqual(loaded["arr_f32"].dtype, torch.float32)
        keys = ["best_score", "step", "flag", "f32", "dtype", "arr_f32", "arr_i64", "arr_bool", "arr_u8"]
        self.convert_and_compare("wo_numpy.pt", keys, ["numpy._core.multiarray.scalar", "numpy.dtype",
                                                       "numpy._core.multiarray._reconstruct"], more_checks)

    def test_pickled_module(self):
        def more_checks(loaded, original):
            self.assertNotIn("4.scratch", loaded, "a non-persistent buffer is not in a state_dict")
            fresh = wo_module_architecture()
            fresh.load_state_dict(loaded, strict=True)
            x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
            self.assertTrue(torch.equal(fresh.eval()(x), original.eval()(x)))
        self.convert_and_compare("wo_module.pt", [], ["torch.nn.modules.container.Sequential"], more_checks)

    def test_ultralytics(self):
        def more_checks(loaded, _original):
            self.assertEqual(loaded["model"]["0.0.weight"].dtype, torch.float16)
            self.assertNotIn("stride", loaded["model"], "plain attributes are not in a state_dict")
            wo_ultralytics_architecture().load_state_dict(loaded["model"], strict=True)
        self.convert_and_compare("wo_ultralytics.pt", ["model"], ["torch.nn.modules.container.Sequential"],
                                 more_checks)

    @unittest.skipIf(OmegaConf is None, "this judge has no omegaconf")
    def test_omegaconf(self):
        def more_checks(loaded, _original):
            self.assertEqual(loaded["cfg"], {"model": {"dim": 8, "name": "x"}, "lrs": [0.1, 0.01]})
        self.convert_and_compare("wo_omegaconf.pt", ["cfg"], ["omegaconf.dictconfig.DictConfig"], more_checks)

    def test_enum(self):
        def more_checks(loaded, _original):
            self.assertEqual(loaded["mode"], "eval")
        self.convert_and_compare("wo_enum.pt", ["mode"], ["wo_user_classes.Mode"], more_checks)

    def test_user_class_refused(self):
        for wo_set in SETS:
            with self.subTest(set=wo_set):
                src = self.fixture(wo_set, "wo_user_class.pt")
                with self.assertRaises(UnknownValue):
                    expected(torch.load(src, weights_only=False))  # the judge's own table agrees
                out_dir = os.path.join(self.tmp, support.flat_name(wo_set))
                os.makedirs(out_dir)
                out = os.path.join(out_dir, "out.pt")
                proc = support.run("weights-only", src, "-o", out, check=1)
                self.assertIn("wo_user_classes.MyConfig", proc.stderr)
                self.assertRegex(proc.stderr, r"^ckptfix: error: ")
                self.assertEqual(os.listdir(out_dir), [], "no output, no temporary file")
                proc = support.run("weights-only", src, "-o", out, "--json", check=1)
                item = json.loads(proc.stdout)["inputs"][0]
                self.assertEqual(item["status"], "failed")
                self.assertIn("wo_user_classes.MyConfig", item["error"])
                self.assertEqual(os.listdir(out_dir), [], "no output, no temporary file")

    def test_user_class_drop_unknown(self):
        for wo_set in SETS:
            with self.subTest(set=wo_set):
                loaded, original = self.weights_only(wo_set, "wo_user_class.pt", ["cfg"],
                                                     ["wo_user_classes.MyConfig"], "--drop-unknown")
                self.assert_same(loaded, expected(original, drop_unknown=True))
                self.assertIsNone(loaded["cfg"])


if __name__ == "__main__":
    if not WEIGHTS_ONLY_DEFAULT:
        print(f"test_weights_only: SKIPPED: {SKIP_REASON}", file=sys.stderr)
    unittest.main(argv=support.parse_args())
