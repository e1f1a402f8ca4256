#!/usr/bin/python3
"""Writer fidelity, judged by the torch running this script (1.13, 2.6, 2.14).

Inputs are made here, at test time, by this torch: one tensor of every
dtype it can save (quantized ones by quantize_per_tensor), views with
offsets and strides, tied weights, Parameters, a training checkpoint with
an optimizer state, the same in the legacy format, and files saved without
CRCs (torch >= 2.6) and with `storage_alignment = 4096` (torch >= 2.7).
Each goes through convert, strip-prefix, remap and cast, and every output
must:

* load with the default torch.load and, whenever the input does, with
  weights_only=True (the default since 2.6); with mmap=True (torch >= 2.1);
  and, where the file has `.format_version`, with mmap=True and
  `config.load.calculate_storage_offsets = True` (torch >= 2.7), and with
  TORCH_SERIALIZATION_DEBUG=1, under which torch checks its computed offsets
  against the real ones;
* hold the same objects: every tensor's dtype, shape, stride, storage
  offset, requires_grad, class and storage bytes, and the same storage
  sharing;
* have the records this torch writes (`.format_version`,
  `.storage_alignment`, storages in key order, `.data/serialization_id`);
* be byte for byte the input when `convert` changed nothing and torch >= 2
  wrote it (torch 1.x files gain only a `byteorder` record).

inspect must name the dtypes as torch does, verify must pass, and diff must
find what torch finds (values of float8 and complex32 included).
"""
import collections
import contextlib
import io
import json
import os
import struct
import sys
import tempfile
import unittest
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
HAS_MMAP = VERSION >= (2, 1)
# What `cast --dtype bf16` converts (docs/cli.md): the floating types that
# have a cast kernel; other float8/float4 types are left as they are.
CAST_SOURCES = ("float16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def serialization_config():
    """torch.utils.serialization.config where it has calculate_storage_offsets (torch >= 2.7), else None."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        return None
    return config if hasattr(config.load, "calculate_storage_offsets") else None


CONFIG = serialization_config()


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def every_dtype():
    """The dtypes this torch has, by name, without aliases."""
    return sorted({dtype_name(v) for v in vars(torch).values() if isinstance(v, torch.dtype)})


def make_tensor(name, generator, numel=6):
    """A tensor of dtype `name` with random bytes, or None if this torch cannot make and save one."""
    dtype = getattr(torch, name)
    try:
        if dtype in (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4):
            t = torch.quantize_per_tensor(torch.randn(numel, generator=generator), 0.125, 2, dtype)
        else:
            size = torch.empty(0, dtype=dtype).element_size()
            raw = torch.randint(0, 256, (numel * size,), dtype=torch.uint8, generator=generator)
            if dtype == torch.bool:
                raw = raw % 2
            t = raw.view(dtype)
        torch.save(t, io.BytesIO())
        return t
    except Exception:  # noqa: BLE001 - a dtype this torch cannot hold or save
        return None


def all_dtypes_checkpoint():
    """A 'module.'-prefixed state dict with one tensor of every dtype, views and tied weights."""
    g = torch.Generator().manual_seed(11)
    sd = collections.OrderedDict()
    for name in every_dtype():
        t = make_tensor(name, g)
        if t is not None:
            sd[f"module.{name}"] = t
    # Views of one storage (offsets, strides), for a classic and a torch 2.x-only dtype.
    for name in ["float32", "float8_e4m3fn", "uint16", "complex32"]:
        t = make_tensor(name, g, numel=24) if hasattr(torch, name) else None
        if t is None:
            continue
        base = t.reshape(4, 6)
        sd[f"module.{name}_base"] = base
        sd[f"module.{name}_slice"] = base[1:, ::2]
        sd[f"module.{name}_t"] = base.t()
    # Large enough (> 1 MiB) for the writer's kernel-copy path. It and a
    # small one start with a zip data descriptor's signature, which torch's
    # serialization id takes for a descriptor: convert must reproduce that too.
    big = torch.randn(300_000, generator=g)
    big.view(torch.int32)[:2] = torch.tensor([0x08074B50, 0x01020304], dtype=torch.int32)
    sd["module.big"] = big
    sd["module.descriptor_lookalike"] = torch.tensor([0x08074B50, 0x12345678, 7], dtype=torch.int32)
    sd["module.tied_a"] = sd["module.float32"]
    sd["module.tied_b"] = sd["module.float32"]
    sd["module.param"] = torch.nn.Parameter(torch.randn(3, 2, generator=g))
    sd["module.frozen"] = torch.nn.Parameter(torch.randn(2, generator=g), requires_grad=False)
    return sd


def training_checkpoint():
    """model/optimizer state of a DataParallel-wrapped model after one Adam step."""
    torch.manual_seed(3)
    model = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    return {"epoch": 3, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict(), "best": 0.25,
            "tags": ["a", "b"]}


def strip_module(key):
    return key[len("module."):] if isinstance(key, str) and key.startswith("module.") else key


# ---------------------------------------------------------------------------
# Loading and comparing, with this torch only
# ---------------------------------------------------------------------------

def untyped(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()


def storage_bytes(t):
    u = untyped(t)  # on cuda:0 where torch restores it there (a GPU machine)
    flat = torch.empty(0, dtype=torch.uint8, device=u.device).set_(u)
    return flat.cpu().numpy().tobytes()


def flatten(obj, path=()):
    """(path, leaf) for every tensor and plain value, in a stable order."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, path + (k,))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, path + (i,))
    else:
        yield path, obj


def describe(obj, rename=lambda k: k):
    """Everything torch.load returned that ckptfix must keep: per leaf its
    description, and which leaves share a storage (as groups of paths)."""
    leaves, groups = {}, collections.defaultdict(list)
    for path, leaf in flatten(obj):
        path = tuple(rename(p) for p in path)
        if isinstance(leaf, torch.Tensor):
            d = {"class": type(leaf).__name__, "dtype": dtype_name(leaf.dtype), "shape": tuple(leaf.shape),
                 "requires_grad": leaf.requires_grad}
            if leaf.is_quantized:
                d.update(scale=leaf.q_scale(), zero_point=leaf.q_zero_point(),
                         bytes=storage_bytes(leaf), stride=leaf.stride(), offset=leaf.storage_offset())
            else:
                d.update(stride=leaf.stride(), offset=leaf.storage_offset(), bytes=storage_bytes(leaf))
                groups[untyped(leaf)._cdata].append(path)
            leaves[path] = d
        else:
            leaves[path] = (type(leaf).__name__, repr(leaf))
    sharing = sorted(sorted(map(repr, g)) for g in groups.values())
    return leaves, sharing


def load(path, **kwargs):
    return torch.load(path, **kwargs)


@contextlib.contextmanager
def environment(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def loads_weights_only(path, **kwargs):
    try:
        torch.load(path, weights_only=True, **kwargs)
        return True
    except Exception:  # noqa: BLE001 - the finding is that it does not
        return False


def record_names(path):
    with zipfile.ZipFile(path) as z:
        return [n.split("/", 1)[1] for n in z.namelist()]


def read_record(path, name):
    """A stored record's bytes, without zipfile's CRC check (torch may write CRC 0)."""
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        info = next(i for i in z.infolist() if i.filename.split("/", 1)[1] == name)
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        f.seek(info.header_offset + 30 + name_len + extra_len)
        return f.read(info.file_size)


def is_zip(path):
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


# ---------------------------------------------------------------------------

class WriterFidelity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.inputs = {}

        def save(name, obj, **kwargs):
            path = os.path.join(cls.tmp.name, name)
            torch.save(obj, path, **kwargs)
            cls.inputs[name] = path

        save("all_dtypes.pt", all_dtypes_checkpoint())
        save("training.pt", training_checkpoint())
        save("legacy_all_dtypes.pt", all_dtypes_checkpoint(), _use_new_zipfile_serialization=False)
        # torch >= 2.1 writes the dtypes without a typed storage class into
        # legacy files it cannot load back ("type object 'UntypedStorage' has
        # no attribute 'dtype'"); ckptfix reads them, and its zip outputs must
        # hold what the same objects saved as a zip hold.
        cls.reference = {cls.inputs["legacy_all_dtypes.pt"]: cls.inputs["all_dtypes.pt"]}
        if CONFIG is not None:  # torch >= 2.7: config.save.storage_alignment
            with CONFIG.patch({"save.storage_alignment": 4096}):
                save("aligned_4096.pt", all_dtypes_checkpoint())
        if hasattr(torch.serialization, "set_crc32_options"):  # torch >= 2.6: CRC-32s are optional
            torch.serialization.set_crc32_options(False)
            try:
                save("no_crc.pt", all_dtypes_checkpoint())
            finally:
                torch.serialization.set_crc32_options(True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def output(self, name):
        return os.path.join(self.tmp.name, "out-" + name)

    def run_ckptfix(self, *args):
        return support.run(*args, "-q", "--force", check=0)

    # --- what every output must be -------------------------------------

    def check_output(self, source, out, rename=lambda k: k, cast=False, map_location=None):
        """`out` loads every way `source` does, and holds the same objects."""
        kwargs = {"map_location": map_location} if map_location else {}
        reference = self.reference.get(source, source)
        # Quantized tensors rebuild through a fresh quantizer: compare descriptions, not objects.
        expected = describe(load(reference, weights_only=False), rename)
        loads = {}
        if loads_weights_only(reference):
            loads["weights_only"] = lambda: load(out, weights_only=True, **kwargs)
        if VERSION < (2, 6) or "weights_only" in loads:  # the default is weights_only=True since 2.6
            loads["default"] = lambda: load(out, **kwargs)
        else:
            loads["weights_only=False"] = lambda: load(out, weights_only=False, **kwargs)
        if HAS_MMAP:
            loads["mmap"] = lambda: load(out, mmap=True, **kwargs)
        if CONFIG is not None and ".format_version" in record_names(out):
            def calculated():
                with CONFIG.patch({"load.calculate_storage_offsets": True}):
                    return load(out, mmap=True, **kwargs)

            def debug_asserts():
                with environment("TORCH_SERIALIZATION_DEBUG", "1"):
                    return load(out, **kwargs)
            loads["calculate_storage_offsets"] = calculated
            loads["TORCH_SERIALIZATION_DEBUG"] = debug_asserts
        for how, loader in loads.items():
            with self.subTest(load=how):
                leaves, sharing = describe(loader())
                want_leaves, want_sharing = expected
                self.assertEqual(sorted(map(repr, leaves)), sorted(map(repr, want_leaves)))
                casts = 0
                for path, want in want_leaves.items():
                    got = leaves[path]
                    if cast and isinstance(want, dict) and want["dtype"] in CAST_SOURCES \
                            and got["dtype"] == "bfloat16":
                        # Values are the cast's (judged by its own tests); the view must be the same.
                        for field in ("shape", "stride", "offset", "requires_grad", "class"):
                            self.assertEqual(got[field], want[field], f"{path} {field}")
                        casts += 1
                        continue
                    self.assertEqual(got, want, f"{path} differs after {os.path.basename(out)} ({how})")
                if cast:
                    self.assertGreater(casts, 0, "cast changed nothing")
                self.assertEqual(sharing, want_sharing, "storage sharing")
        self.check_records(source, out)
        support.run("verify", "-q", out, check=0)

    def check_records(self, source, out):
        """The records the torch that wrote `source` writes, in its order."""
        names = record_names(out)
        storages = [n for n in names if n.startswith("data/")]
        keys = [n[len("data/"):] for n in storages]
        self.assertEqual(sorted(keys, key=int), [str(i) for i in range(len(keys))])
        source_names = record_names(source) if is_zip(source) else []
        if ".format_version" in source_names:
            self.assertEqual(names, ["data.pkl", ".format_version", ".storage_alignment", "byteorder", *storages,
                                     "version", ".data/serialization_id"])
            self.assertEqual(keys, [str(i) for i in range(len(keys))], "storages in key order")
            self.assertEqual(read_record(out, ".format_version"), b"1")
            self.assertEqual(read_record(out, ".storage_alignment"), read_record(source, ".storage_alignment"))
        else:
            self.assertNotIn(".format_version", names)
            self.assertEqual(keys, sorted(keys), "storages in the string order of their keys, as torch <= 2.6")
            self.assertEqual(".data/serialization_id" in names, ".data/serialization_id" in source_names)
        with zipfile.ZipFile(out) as z:
            self.assertIsNone(z.testzip(), "every CRC must be right")

    # --- the commands ----------------------------------------------------

    def test_convert(self):
        for name, source in self.inputs.items():
            with self.subTest(input=name):
                out = self.output(name)
                self.run_ckptfix("convert", source, "-o", out)
                self.check_output(source, out)

    def test_legacy_files_torch_cannot_read_back(self):
        source = self.inputs["legacy_all_dtypes.pt"]
        if VERSION < (2, 1):  # torch 1.x has no dtypes without a typed storage class
            torch.load(source, weights_only=False)
            return
        # What torch 2.6 and 2.14 show: their own legacy files with such dtypes do not load.
        with self.assertRaises(AttributeError):
            torch.load(source, weights_only=False)
        out = self.output("legacy-repaired.pt")
        self.run_ckptfix("convert", source, "-o", out)
        self.check_output(source, out)

    def test_convert_reproduces_what_torch_wrote(self):
        for name, source in self.inputs.items():
            if not is_zip(source) or name == "no_crc.pt":
                continue
            with self.subTest(input=name):
                out = self.output(name)
                self.run_ckptfix("convert", source, "-o", out)
                if VERSION >= (2, 0):
                    with open(source, "rb") as a, open(out, "rb") as b:
                        self.assertTrue(a.read() == b.read(), f"convert changed the bytes torch {torch.__version__} wrote")
                else:  # torch 1.x wrote no byteorder record; ckptfix always does, and changes nothing else
                    self.assertEqual(record_names(out), [record_names(source)[0], "byteorder", *record_names(source)[1:]])
                    with zipfile.ZipFile(source) as a, zipfile.ZipFile(out) as b:
                        for n in a.namelist():
                            self.assertEqual(a.read(n), b.read(n), n)

    def test_convert_without_crcs_computes_them(self):
        if "no_crc.pt" not in self.inputs:
            self.skipTest(f"torch {torch.__version__} always computes CRC-32s")
        source, out = self.inputs["no_crc.pt"], self.output("no_crc.pt")
        with zipfile.ZipFile(source) as z:
            self.assertTrue(all(i.CRC == 0 for i in z.infolist() if i.file_size))
        self.run_ckptfix("convert", source, "-o", out)
        with zipfile.ZipFile(out) as z:
            self.assertIsNone(z.testzip())

    def test_strip_prefix(self):
        for name in ["all_dtypes.pt", "training.pt", "legacy_all_dtypes.pt", "aligned_4096.pt"]:
            if name not in self.inputs:
                continue
            with self.subTest(input=name):
                out = self.output("strip-" + name)
                self.run_ckptfix("strip-prefix", self.inputs[name], "-o", out)
                self.check_output(self.inputs[name], out, rename=strip_module)

    def test_remap(self):
        for name in ["all_dtypes.pt", "training.pt"]:
            with self.subTest(input=name):
                out = self.output("remap-" + name)
                self.run_ckptfix("remap", "--to", "cuda:0", self.inputs[name], "-o", out)
                self.check_output(self.inputs[name], out, map_location="cpu")
                seen = set()
                torch.load(out, map_location=lambda storage, location: seen.add(location) or storage, weights_only=False)
                self.assertEqual(seen, {"cuda:0"})

    def test_cast(self):
        for name in ["all_dtypes.pt", "training.pt"]:
            with self.subTest(input=name):
                out = self.output("cast-" + name)
                self.run_ckptfix("cast", "--dtype", "bf16", self.inputs[name], "-o", out)
                self.check_output(self.inputs[name], out, cast=True)

    def test_format_version_with_another_layout(self):
        """A torch 2.x file re-zipped by Python's zipfile keeps `.format_version`
        but loses torch's layout: torch >= 2.7 computing offsets misreads it,
        verify says so, and convert gives back a file torch reads right."""
        source = self.inputs["all_dtypes.pt"]
        if ".format_version" not in record_names(source):
            self.skipTest(f"torch {torch.__version__} writes no .format_version")
        rezipped = self.output("rezipped.pt")
        with zipfile.ZipFile(source) as a, zipfile.ZipFile(rezipped, "w", zipfile.ZIP_STORED) as b:
            for info in a.infolist():
                b.writestr(info.filename, a.read(info.filename))
        want = describe(load(source, weights_only=False))
        self.assertEqual(describe(load(rezipped, weights_only=False)), want, "offsets read from the headers")
        if CONFIG is not None:
            try:
                with CONFIG.patch({"load.calculate_storage_offsets": True}):
                    misread = describe(load(rezipped, mmap=True, weights_only=False)) != want
            except Exception:  # noqa: BLE001 - or torch fails outright
                misread = True
            self.assertTrue(misread, "torch computed the right offsets for a layout that is not miniz's")
        proc = support.run("verify", rezipped, check=1)
        self.assertIn("(`.format_version` with calculate_storage_offsets)", proc.stderr)
        out = self.output("rezipped-converted.pt")
        self.run_ckptfix("convert", rezipped, "-o", out)
        self.check_output(source, out)

    # --- reading: inspect, verify, diff ------------------------------------

    def test_inspect_names_dtypes_as_torch(self):
        source = self.inputs["all_dtypes.pt"]
        expected = {"/".join(map(str, p)): dtype_name(t.dtype)
                    for p, t in flatten(load(source, weights_only=False)) if isinstance(t, torch.Tensor)}
        doc = json.loads(support.run("inspect", "--json", source, check=0).stdout)
        got = {"/".join(map(str, t["path"])): t["dtype"] for t in doc["tensors"]}
        self.assertEqual(got, expected)
        support.run("verify", "-q", source, check=0)

    def test_diff_sees_what_torch_sees(self):
        values = [0.5, 1.0, 2.0, 4.0]
        a, b, expected = {}, {}, {}
        for name in ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                     "float16", "bfloat16", "complex32", "bcomplex32", "uint16", "uint64"]:
            if not hasattr(torch, name):
                continue
            dtype = getattr(torch, name)
            try:
                x = torch.tensor(values).to(dtype)
                y = x.clone()
                y[1] = 8
                torch.save(x, io.BytesIO())
            except Exception:  # noqa: BLE001 - this torch cannot compute in it
                continue
            a[name], b[name] = x, y
            wide = torch.complex128 if x.is_complex() else torch.float64
            expected[name] = (x.to(wide) - y.to(wide)).abs().max().item()
        path_a, path_b = self.output("diff-a.pt"), self.output("diff-b.pt")
        torch.save(a, path_a)
        torch.save(b, path_b)
        doc = json.loads(support.run("diff", "--json", path_a, path_b, check=1).stdout)
        got = {t["key"]: t for t in doc["tensors"]}
        self.assertEqual(set(got), set(expected))
        for name, diff in expected.items():
            with self.subTest(dtype=name):
                self.assertEqual(got[name]["mismatched"], 1)
                self.assertEqual(got[name]["max_abs_diff"], diff)
        same = json.loads(support.run("diff", "--json", path_a, path_a, check=0).stdout)
        self.assertTrue(same["equal"])


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
