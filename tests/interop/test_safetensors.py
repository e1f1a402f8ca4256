#!/usr/bin/python3
"""safetensors in ckptfix (issue 15), judged only by real torch and safetensors.

Every expected file is made here, by the judge's own `safetensors.torch`:
  * .pt -> .safetensors (`convert`) must be byte for byte what
    `save_file` writes for the same tensors (contiguous clones), for every
    dtype this judge's safetensors knows, 0-element tensors, scalars and
    names that need JSON escapes; non-contiguous views written as their own
    contiguous bytes; tied weights written under every key (or, with
    `--drop-aliases`, as `save_model` drops them); a training checkpoint
    refused without `--key` and converted with it; `--metadata` as
    `safe_open(...).metadata()` reads it; dtypes safetensors has no name for
    (complex128, complex32, quantized, bits) refused: exit 1, key named, no
    output.
  * .safetensors -> .pt must load with the DEFAULT torch.load, as an
    OrderedDict in header order, equal (dtype, shape, bytes) to `load_file`.
  * .safetensors -> .safetensors (convert) gives back the same bytes.
  * the passes (cast, strip-prefix) read and write safetensors; the output's
    format follows --format, then the output's extension, then the input.
  * damaged files (made here from a good one): `verify` and `inspect` exit 1
    with one line naming the file; `convert` writes nothing.
  * `diff` across formats; `inspect` says "safetensors".
The committed files of fixtures/torch2.*/safetensors/ (written by the
safetensors of trixie and sid: fixtures/make_safetensors_fixtures.py) are
converted both ways by every judge that can read them, and so are the
state-dict fixtures of every torch set this judge's torch reads.

Judges: trixie has safetensors 0.4.5 (F64 F32 F16 BF16 I64 I32 I16 I8 U8
BOOL F8_E4M3 F8_E5M2), sid a newer one with every dtype of issue 15 (U16 U32
U64 C64 F8_E4M3FNUZ F8_E5M2FNUZ F8_E8M0 F4 too); a dtype the judge's
safetensors cannot write or read is not judged there (and under torch >= 2.14
every dtype of issue 15 must be judgeable, so sid's coverage cannot shrink
silently). The local judge (bookworm's torch 1.13) has no safetensors: every
test is skipped with that reason.
"""
import collections
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

try:
    import safetensors
    import safetensors.torch as st
    from safetensors import safe_open
except ImportError:
    safetensors = None

SKIP_REASON = (f"this judge (torch {torch.__version__}) has no safetensors package "
               "(Debian bookworm has none): nothing to judge")
TORCH = support.torch_version()

# issue 15's dtypes: torch name -> safetensors name.
ST_NAMES = collections.OrderedDict([
    ("bool", "BOOL"), ("uint8", "U8"), ("int8", "I8"), ("int16", "I16"), ("uint16", "U16"),
    ("int32", "I32"), ("uint32", "U32"), ("int64", "I64"), ("uint64", "U64"),
    ("float16", "F16"), ("bfloat16", "BF16"), ("float32", "F32"), ("float64", "F64"),
    ("complex64", "C64"), ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
    ("float8_e4m3fnuz", "F8_E4M3FNUZ"), ("float8_e5m2fnuz", "F8_E5M2FNUZ"),
    ("float8_e8m0fnu", "F8_E8M0"), ("float4_e2m1fn_x2", "F4"),
])
# Types torch has and safetensors has no name for: ckptfix must refuse them.
REFUSED = ["complex128", "complex32", "bits8", "bits16"]
# The floating types `cast` converts by default (docs/cli.md).
CAST_SOURCES = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]

NAMES_NEEDING_ESCAPES = ['quo"te', 'back\\slash', 'new\nline', 'ctl\x01\x1fchar', 'tab\there',
                         'del\x7f', 'slash/ok', 'caf\u00e9.w\u00fc', '\u6f22\u5b57', 'emoji\U0001f600',
                         'sp ace', '']


def tensor_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def random_tensor(dtype, shape, gen):
    """Random bit patterns of `dtype` (NaN payloads included), 0/1 for bool."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape, size), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def clones(sd):
    """What save_file is given: a contiguous copy of every tensor, none sharing memory."""
    return {k: v.detach().clone(memory_format=torch.contiguous_format) for k, v in sd.items()}


def read_header(path):
    """(header length, header as an OrderedDict in file order) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n], object_pairs_hook=collections.OrderedDict)


def write_raw(path, header_bytes, buffer, n=None, pad=True):
    """A safetensors file from a header text and a buffer, padded with spaces like save_file."""
    if pad and n is None:
        header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes) if n is None else n))
        f.write(header_bytes)
        f.write(buffer)


def supported_dtypes():
    """The torch dtypes of ST_NAMES this judge's torch has and its safetensors both writes
    and reads back (save_file, load_file)."""
    out = []
    tmp = tempfile.mkdtemp(prefix="ckptfix-st-probe-")
    try:
        for name, st_name in ST_NAMES.items():
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            path = os.path.join(tmp, name + ".safetensors")
            t = random_tensor(dtype, (2, 2), torch.Generator().manual_seed(0))
            try:
                st.save_file({"t": t}, path)
                back = st.load_file(path)["t"]
            except Exception:  # noqa: BLE001 - any refusal means "not judgeable here"
                continue
            if back.dtype == dtype and tensor_bytes(back) == tensor_bytes(t) and \
                    read_header(path)[1]["t"]["dtype"] == st_name:
                out.append(dtype)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


SUPPORTED = supported_dtypes() if safetensors is not None else []


def committed_fixtures():
    """Entries of fixtures/torch2.*/safetensors/manifest.json of the sets written by this
    judge's torch or an older one; "file" is relative to fixtures/."""
    entries = []
    for folder, version in support.FIXTURE_SETS:
        path = os.path.join(support.FIXTURES, folder, "safetensors", "manifest.json")
        if version > TORCH or not os.path.exists(path):
            continue
        with open(path) as f:
            for e in json.load(f):
                entries.append(dict(e, file=os.path.join(folder, "safetensors", e["file"])))
    return entries


def dtype_name(dtype):
    return str(dtype).split(".")[-1]


@unittest.skipIf(safetensors is None, SKIP_REASON)
class SafetensorsTest(support.ScratchDirTest):
    maxDiff = None
    prefix = "ckptfix-st-"

    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(15)

    # -- helpers -----------------------------------------------------------

    def save_pt(self, obj, name):
        p = self.path(name)
        torch.save(obj, p)
        return p

    def save_st(self, tensors, name, metadata=None):
        p = self.path(name)
        st.save_file(tensors, p, metadata=metadata)
        return p

    def assert_same_bytes(self, actual_path, expected_path, what):
        with open(actual_path, "rb") as f:
            actual = f.read()
        with open(expected_path, "rb") as f:
            expected = f.read()
        if actual == expected:
            return
        try:
            got = read_header(actual_path)
        except Exception as e:  # noqa: BLE001
            got = f"(unreadable header: {e})"
        self.fail(f"{what}: {actual_path} ({len(actual)} B) differs from safetensors' "
                  f"{expected_path} ({len(expected)} B)\nexpected header: {read_header(expected_path)}\n"
                  f"actual header:   {got}")

    def assert_tensors_equal(self, actual, expected, where, check_order=False):
        """Same keys, and per key the same dtype, shape and bytes."""
        if check_order:
            self.assertEqual(list(actual.keys()), list(expected.keys()), f"{where}: key order")
        else:
            self.assertEqual(sorted(actual.keys()), sorted(expected.keys()), f"{where}: keys")
        for k in expected:
            a, e = actual[k], expected[k]
            self.assertEqual(a.dtype, e.dtype, f"{where}[{k!r}]: dtype")
            self.assertEqual(tuple(a.shape), tuple(e.shape), f"{where}[{k!r}]: shape")
            self.assertTrue(tensor_bytes(a) == tensor_bytes(e), f"{where}[{k!r}]: values differ")

    def convert_to_st_and_compare(self, pt, tensors, name, *extra, metadata=None):
        """`ckptfix convert pt -o OUT.safetensors`, byte-compared with save_file(clones(tensors))."""
        out = self.path("out", name + ".safetensors")
        support.run("convert", pt, "-o", out, *extra, check=0)
        want = self.save_st(clones(tensors), os.path.join("want", name + ".safetensors"), metadata)
        self.assert_same_bytes(out, want, f"convert {os.path.basename(pt)} -o {name}.safetensors")
        return out

    def convert_to_pt_and_compare(self, src, name):
        """`ckptfix convert src.safetensors -o OUT.pt`: the default torch.load gives an
        OrderedDict in header order equal to load_file(src)."""
        out = self.path("out", name + ".pt")
        support.run("convert", src, "-o", out, check=0)
        loaded = torch.load(out)  # the default: weights_only=True on torch >= 2.6
        self.assertIs(type(loaded), collections.OrderedDict, f"{name}.pt: root type")
        header_keys = [k for k in read_header(src)[1] if k != "__metadata__"]
        self.assertEqual(list(loaded.keys()), header_keys, f"{name}.pt: keys not in header order")
        self.assert_tensors_equal(loaded, st.load_file(src), f"{name}.pt")
        for k, v in loaded.items():
            self.assertTrue(v.is_contiguous(), f"{name}.pt[{k!r}]: not contiguous")
        if TORCH >= (2, 1):  # torch.load(mmap=True) reads the same (torch 2.1 added it)
            self.assert_tensors_equal(torch.load(out, mmap=True), loaded, f"{name}.pt with mmap=True", check_order=True)
        return out

    def assert_refused(self, proc, out_dir, *must_name, codes=(1,)):
        self.assertIn(proc.returncode, codes, f"exit {proc.returncode}\nstderr: {proc.stderr}")
        self.assertRegex(proc.stderr, r"^ckptfix: error: ", proc.stderr)
        for word in must_name:
            self.assertIn(word, proc.stderr, f"the error does not name {word!r}")
        self.assertEqual(os.listdir(out_dir), [], "no output, no temporary file")

    def state_dict_every_dtype(self, dtypes):
        """Per dtype: a 3x5 matrix, a scalar (not for float4, which packs two values
        a byte and so has no scalar in safetensors) and a 0-element tensor; in an
        insertion order that is not the sorted one."""
        sd = collections.OrderedDict()
        for dtype in reversed(dtypes):
            n = dtype_name(dtype)
            sd[f"{n}.matrix"] = random_tensor(dtype, (3, 5), self.gen)
            if dtype != getattr(torch, "float4_e2m1fn_x2", None):
                sd[f"{n}.scalar"] = random_tensor(dtype, (), self.gen)
            sd[f"{n}.empty"] = random_tensor(dtype, (0, 4), self.gen)
        return sd

    # -- a. .pt -> .safetensors, every dtype, byte-identical to save_file ---

    def test_judge_coverage(self):
        names = [dtype_name(d) for d in SUPPORTED]
        print(f"\njudged dtypes (safetensors {safetensors.__version__}): {' '.join(names)}", file=sys.stderr)
        for base in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                     "float32", "float64", "float8_e4m3fn", "float8_e5m2"]:
            self.assertIn(base, names, "every judge with safetensors judges issue 15's base types")
        if TORCH >= (2, 14):
            self.assertEqual(names, [n for n in ST_NAMES], "the newest judge judges every dtype of issue 15")

    def test_pt_to_safetensors_each_dtype(self):
        for dtype in SUPPORTED:
            with self.subTest(dtype=dtype_name(dtype)):
                sd = self.state_dict_every_dtype([dtype])
                pt = self.save_pt(sd, f"{dtype_name(dtype)}.pt")
                out = self.convert_to_st_and_compare(pt, sd, dtype_name(dtype))
                self.assert_tensors_equal(st.load_file(out), sd, dtype_name(dtype))

    def test_pt_to_safetensors_all_dtypes_in_one_file(self):
        sd = self.state_dict_every_dtype(SUPPORTED)
        pt = self.save_pt(sd, "all.pt")
        self.convert_to_st_and_compare(pt, sd, "all")

    def test_float4_shape_doubles(self):
        f4 = getattr(torch, "float4_e2m1fn_x2", None)
        if f4 not in SUPPORTED:
            self.skipTest(f"safetensors {safetensors.__version__} / torch {torch.__version__} has no F4")
        sd = {"w": random_tensor(f4, (3, 5), self.gen), "e": random_tensor(f4, (2, 0), self.gen)}
        out = self.convert_to_st_and_compare(self.save_pt(sd, "f4.pt"), sd, "f4")
        header = read_header(out)[1]
        self.assertEqual(header["w"]["dtype"], "F4")
        self.assertEqual(header["w"]["shape"], [3, 10], "F4 records two values a byte")
        self.assertEqual(header["w"]["data_offsets"][1] - header["w"]["data_offsets"][0], 15)
        self.assertEqual(header["e"]["shape"], [2, 0])

    def test_names_needing_json_escapes(self):
        sd = collections.OrderedDict((name, random_tensor(torch.float32, (2,), self.gen))
                                     for name in NAMES_NEEDING_ESCAPES)
        pt = self.save_pt(sd, "names.pt")
        out = self.convert_to_st_and_compare(pt, sd, "names")
        self.assert_tensors_equal(st.load_file(out), sd, "names")

    def test_fixture_state_dicts(self):
        """Every CPU state-dict fixture of every torch set this judge reads (zip and legacy,
        big-endian, deflated, views, tied weights) against save_file of what torch loads."""
        judged = 0
        for entry in support.manifest("valid"):
            if entry.get("load_error") or entry.get("weights_only_error") or entry["locations"] != ["cpu"]:
                continue
            src = support.fixture(entry["file"])
            obj = torch.load(src, weights_only=False)
            if not (isinstance(obj, dict) and obj and
                    all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())):
                continue
            name = support.flat_name(entry["file"])
            judged += 1
            with self.subTest(fixture=entry["file"]):
                unsupported = [k for k, v in obj.items() if v.dtype not in SUPPORTED]
                out = self.path("out", name, name + ".safetensors")
                proc = support.run("convert", src, "-o", out)
                if unsupported:
                    # A dtype this judge cannot write: refused if issue 15 has no name for it.
                    refused = [k for k, v in obj.items() if dtype_name(v.dtype) not in ST_NAMES or v.is_quantized]
                    if refused:
                        self.assert_refused(proc, os.path.dirname(out), codes=(1,))
                        self.assertTrue(any(repr(k)[1:-1] in proc.stderr for k in refused),
                                        f"the error names none of {refused}: {proc.stderr}")
                    continue
                self.assertEqual(proc.returncode, 0, proc.stderr)
                want = self.save_st(clones(obj), os.path.join("want", name + ".safetensors"))
                self.assert_same_bytes(out, want, f"convert {entry['file']}")
        self.assertGreater(judged, 5, "too few fixtures judged: the manifest filter is wrong")

    # -- b. .safetensors -> .pt ---------------------------------------------

    def test_safetensors_to_pt_each_dtype(self):
        for dtype in SUPPORTED:
            for metadata in (None, {"format": "pt"}):
                with self.subTest(dtype=dtype_name(dtype), metadata=metadata):
                    sd = self.state_dict_every_dtype([dtype])
                    tag = f"{dtype_name(dtype)}-{'meta' if metadata else 'plain'}"
                    src = self.save_st(sd, f"{tag}.safetensors", metadata)
                    self.convert_to_pt_and_compare(src, tag)

    def test_safetensors_to_pt_all_dtypes_and_names(self):
        sd = self.state_dict_every_dtype(SUPPORTED)
        sd.update((name, random_tensor(torch.float16, (1, 2), self.gen)) for name in NAMES_NEEDING_ESCAPES)
        src = self.save_st(sd, "all.safetensors", {"format": "pt", "note": "q\"u\\o\nte \u00e9"})
        self.convert_to_pt_and_compare(src, "all")

    def test_committed_safetensors_fixtures(self):
        """fixtures/torch2.*/safetensors/*.safetensors (written by trixie's and sid's
        safetensors) -> .pt and -> .safetensors, where this judge knows every dtype."""
        judged = 0
        for entry in committed_fixtures():
            if not entry["file"].endswith(".safetensors"):
                continue
            src = support.fixture(entry["file"])
            if any(getattr(torch, n, None) not in SUPPORTED for n in entry["dtypes"]):
                continue
            judged += 1
            with self.subTest(fixture=entry["file"]):
                name = support.flat_name(entry["file"])
                self.convert_to_pt_and_compare(src, name)
                out = self.path("rt", name)
                support.run("convert", src, "-o", out, check=0)
                self.assert_same_bytes(out, src, f"convert {entry['file']} -o .safetensors")
        self.assertGreater(judged, 0, "no committed safetensors fixture judged "
                                      "(fixtures/make_safetensors_fixtures.py)")

    def test_committed_training_fixture(self):
        """fixtures/torch2.*/safetensors/st_training.pt: refused without --key; with
        --key model, save_file of the model's tensors."""
        judged = 0
        for entry in committed_fixtures():
            if entry["file"].endswith(".pt"):
                src = support.fixture(entry["file"])
                judged += 1
                with self.subTest(fixture=entry["file"]):
                    obj = torch.load(src)
                    out_dir = os.path.dirname(self.path("refused", support.flat_name(entry["file"]), "x"))
                    proc = support.run("convert", src, "-o", os.path.join(out_dir, "out.safetensors"))
                    self.assert_refused(proc, out_dir, "model", codes=(1, 2))
                    self.convert_to_st_and_compare(src, obj["model"], support.flat_name(entry["file"]),
                                                   "--key", "model")
        self.assertGreater(judged, 0, "no committed training fixture (fixtures/make_safetensors_fixtures.py)")


    # -- c. .safetensors -> .safetensors ------------------------------------

    def test_safetensors_round_trip(self):
        sd = self.state_dict_every_dtype(SUPPORTED)
        for metadata in (None, {"format": "pt"}):
            with self.subTest(metadata=metadata):
                tag = "meta" if metadata else "plain"
                src = self.save_st(sd, f"{tag}.safetensors", metadata)
                out = self.path("out", f"{tag}.safetensors")
                support.run("convert", src, "-o", out, check=0)
                self.assert_same_bytes(out, src, f"convert {tag}.safetensors -o out.safetensors")

    def test_safetensors_round_trip_many_metadata_keys(self):
        """Several metadata keys: safetensors writes them in HashMap order, so only
        what they say is compared."""
        sd = {"a": random_tensor(torch.float32, (4,), self.gen), "b": random_tensor(torch.int64, (2, 2), self.gen)}
        metadata = {"format": "pt", "z": "1", "a": "", "\u00e9": "x\ny"}
        src = self.save_st(sd, "src.safetensors", metadata)
        out = self.path("out", "out.safetensors")
        support.run("convert", src, "-o", out, check=0)
        with safe_open(out, framework="pt") as f:
            self.assertEqual(f.metadata(), metadata)
        self.assert_tensors_equal(st.load_file(out), sd, "out")

    # -- d. tied weights ----------------------------------------------------

    class TiedModel(nn.Module):
        """proj.weight is emb.weight (as a language model's head and embedding);
        'emb.weight' sorts first, 'proj.weight' comes first in the state dict."""

        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3, 5)
            self.emb = nn.Embedding(5, 3)
            self.proj.weight = self.emb.weight
            self.norm = nn.LayerNorm(3)

    def tied_model(self):
        torch.manual_seed(15)
        return self.TiedModel()

    def test_tied_weights_keep_every_key(self):
        model = self.tied_model()
        sd = model.state_dict()
        self.assertEqual(sd["proj.weight"].data_ptr(), sd["emb.weight"].data_ptr())
        pt = self.save_pt(sd, "tied.pt")
        out = self.convert_to_st_and_compare(pt, sd, "tied")
        self.assert_tensors_equal(st.load_file(out), sd, "tied")

    def test_tied_weights_drop_aliases(self):
        model = self.tied_model()
        pt = self.save_pt(model.state_dict(), "tied.pt")
        out = self.path("out", "tied.safetensors")
        support.run("convert", pt, "-o", out, "--drop-aliases", check=0)
        # save_model keeps the sorted-first name and records the dropped one in the metadata.
        want = self.path("want", "tied.safetensors")
        st.save_model(model, want)
        self.assert_same_bytes(out, want, "convert --drop-aliases")
        with safe_open(out, framework="pt") as f:
            self.assertEqual(f.metadata(), {"proj.weight": "emb.weight"})
            self.assertNotIn("proj.weight", list(f.keys()))
        fresh = self.TiedModel()
        nn.init.zeros_(fresh.emb.weight)
        st.load_model(fresh, out)  # strict
        self.assertEqual(fresh.proj.weight.data_ptr(), fresh.emb.weight.data_ptr(), "tie lost")
        self.assertTrue(torch.equal(fresh.proj.weight, model.emb.weight))
        self.assertTrue(torch.equal(fresh.proj.bias, model.proj.bias))

    def test_drop_aliases_keeps_other_views(self):
        """--drop-aliases drops only keys that are the same view: a slice of a tied
        weight, or a transposed one, is a tensor of its own."""
        base = random_tensor(torch.float32, (4, 3), self.gen)
        sd = collections.OrderedDict([("z.weight", base), ("a.weight", base), ("m.weight", base),
                                      ("rows", base[1:3]), ("t", base.t()), ("other", base.clone())])
        pt = self.save_pt(sd, "views.pt")
        out = self.path("out", "views.safetensors")
        support.run("convert", pt, "-o", out, "--drop-aliases", check=0)
        with safe_open(out, framework="pt") as f:
            self.assertEqual(f.metadata(), {"m.weight": "a.weight", "z.weight": "a.weight"})
        kept = {k: v for k, v in sd.items() if k not in ("m.weight", "z.weight")}
        self.assert_tensors_equal(st.load_file(out), {k: v.contiguous() for k, v in kept.items()}, "views")

    # -- e. views -----------------------------------------------------------

    def test_views_written_contiguous(self):
        base = random_tensor(torch.float32, (4, 6), self.gen)
        big = random_tensor(torch.bfloat16, (2, 3, 4), self.gen)
        sd = collections.OrderedDict([
            ("slice", base[1:3]),              # contiguous, storage offset 6
            ("transposed", base.t()),          # non-contiguous
            ("column", base[:, 2]),            # stride 6
            ("permuted", big.permute(2, 0, 1)),
            ("expanded", torch.arange(3.0).expand(2, 3)),  # stride 0
            ("element", base[3, 5]),           # a scalar view at the storage's end
            ("empty_view", base[2:2]),
        ])
        pt = self.save_pt(sd, "views.pt")
        out = self.convert_to_st_and_compare(pt, sd, "views")
        self.assert_tensors_equal(st.load_file(out), {k: v.contiguous() for k, v in sd.items()}, "views")

    def test_large_tensors_copied_by_the_kernel(self):
        # From 1 MiB, unchanged stored bytes go by copy_file_range (with the
        # hash taken from the input for the verification): the same bytes.
        base = random_tensor(torch.float32, (3, 1 << 19), self.gen)
        sd = collections.OrderedDict([
            ("whole", random_tensor(torch.float32, (1 << 19,), self.gen)),
            ("row", base[1]),                       # 2 MiB at a storage offset
            ("half", random_tensor(torch.float16, (1 << 20,), self.gen)),
        ])
        pt = self.save_pt(sd, "large.pt")
        out = self.convert_to_st_and_compare(pt, sd, "large")
        self.assert_tensors_equal(st.load_file(out), {k: v.contiguous() for k, v in sd.items()}, "large")

    # -- f. training checkpoints ---------------------------------------------

    def training_checkpoint(self):
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        sd = model.state_dict()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(2, 3, generator=self.gen)).sum().backward()
        opt.step()
        return sd, {"model": sd, "optimizer": opt.state_dict(), "epoch": 3}

    def test_training_checkpoint_needs_key(self):
        sd, ckpt = self.training_checkpoint()
        pt = self.save_pt(ckpt, "train.pt")
        out_dir = os.path.dirname(self.path("refused", "x"))
        proc = support.run("convert", pt, "-o", os.path.join(out_dir, "train.safetensors"))
        self.assert_refused(proc, out_dir, "model", codes=(1, 2))
        self.convert_to_st_and_compare(pt, sd, "train", "--key", "model")

    def test_nested_key_path(self):
        sd, _ = self.training_checkpoint()
        pt = self.save_pt({"ckpt": {"state_dict": sd, "step": 7}, "name": "run"}, "nested.pt")
        self.convert_to_st_and_compare(pt, sd, "nested", "--key", "ckpt/state_dict")
        out_dir = os.path.dirname(self.path("refused", "x"))
        proc = support.run("convert", pt, "-o", os.path.join(out_dir, "x.safetensors"), "--key", "ckpt/nothing")
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(os.listdir(out_dir), [])

    # -- g. --metadata --------------------------------------------------------

    def test_metadata(self):
        sd = {"w": random_tensor(torch.float32, (2, 3), self.gen), "i": random_tensor(torch.int32, (4,), self.gen)}
        pt = self.save_pt(sd, "m.pt")
        out = self.path("out", "two.safetensors")
        support.run("convert", pt, "-o", out, "--metadata", "format=pt", "--metadata", "a=b", check=0)
        with safe_open(out, framework="pt") as f:
            self.assertEqual(f.metadata(), {"format": "pt", "a": "b"})
        self.assert_tensors_equal(st.load_file(out), sd, "two")
        # One key: a single way to write it, so the bytes are save_file's.
        self.convert_to_st_and_compare(pt, sd, "one", "--metadata", "format=pt", metadata={"format": "pt"})
        # A value holding '=' keeps everything after the first one.
        out = self.path("out", "eq.safetensors")
        support.run("convert", pt, "-o", out, "--metadata", "k=a=b", check=0)
        with safe_open(out, framework="pt") as f:
            self.assertEqual(f.metadata(), {"k": "a=b"})

    # -- h. refused dtypes ------------------------------------------------------

    def test_refused_dtypes(self):
        for name in REFUSED + ["qint8"]:
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            with self.subTest(dtype=name):
                if name == "qint8":
                    bad = torch.quantize_per_tensor(torch.randn(4, generator=self.gen), 0.1, 0, torch.qint8)
                else:
                    bad = random_tensor(dtype, (2, 2), self.gen)
                sd = collections.OrderedDict([("good", torch.ones(2)), (f"bad_{name}", bad)])
                pt = self.save_pt(sd, f"{name}.pt")
                out_dir = os.path.dirname(self.path(f"refused_{name}", "x"))
                proc = support.run("convert", pt, "-o", os.path.join(out_dir, "out.safetensors"))
                self.assert_refused(proc, out_dir, f"bad_{name}")

    # -- j. passes on safetensors ----------------------------------------------

    def test_cast_safetensors(self):
        sd = collections.OrderedDict()
        for name in CAST_SOURCES:
            dtype = getattr(torch, name)
            if dtype not in SUPPORTED:
                continue
            # finite values (no NaN payloads to argue about); beyond float16's range
            # and below its normals where the source type has such values
            values = torch.randn(4, 5, generator=self.gen) * 3
            if not name.startswith("float8"):
                values[0, :3] = torch.tensor([1e6, -7e4, 6e-8])
            sd[f"{name}.w"] = values.to(dtype)
        sd["ints"] = torch.arange(6, dtype=torch.int64)
        sd["mask"] = torch.tensor([True, False])
        src = self.save_st(sd, "cast_in.safetensors")
        out = self.path("out", "cast.safetensors")
        support.run("cast", "--dtype", "fp16", src, "-o", out, check=0)
        want_sd = {k: (v.to(torch.float16) if dtype_name(v.dtype) in CAST_SOURCES else v) for k, v in sd.items()}
        want = self.save_st(want_sd, "want/cast.safetensors")
        self.assert_same_bytes(out, want, "cast --dtype fp16 in.safetensors -o out.safetensors")

    def test_strip_prefix_in_place(self):
        sd = collections.OrderedDict([("module.conv.weight", random_tensor(torch.float32, (2, 3), self.gen)),
                                      ("module.conv.bias", random_tensor(torch.float32, (2,), self.gen)),
                                      ("module.bn.num_batches_tracked", torch.tensor(5))])
        src = self.save_st(sd, "ddp.safetensors")
        support.run("strip-prefix", "--in-place", src, check=0)
        stripped = {k[len("module."):]: v for k, v in sd.items()}
        self.assert_tensors_equal(st.load_file(src), stripped, "strip-prefix --in-place")
        want = self.save_st(stripped, "want/plain.safetensors")
        self.assert_same_bytes(src, want, "strip-prefix --in-place ddp.safetensors")
        self.assertEqual([n for n in os.listdir(self.tmp) if n.startswith(".")], [], "temporary file left")

    def test_pass_keeps_metadata(self):
        """Hugging Face files carry {"format": "pt"} (transformers checks it); a pass keeps it."""
        sd = {"module.w": random_tensor(torch.float32, (3,), self.gen)}
        src = self.save_st(sd, "hf.safetensors", {"format": "pt"})
        out = self.path("out", "hf.safetensors")
        support.run("strip-prefix", src, "-o", out, check=0)
        want = self.save_st({"w": sd["module.w"]}, "want/hf.safetensors", {"format": "pt"})
        self.assert_same_bytes(out, want, "strip-prefix hf.safetensors (metadata kept)")

    def test_output_format_choice(self):
        sd = collections.OrderedDict([("module.a", random_tensor(torch.float32, (2, 2), self.gen)),
                                      ("module.b", random_tensor(torch.int64, (3,), self.gen))])
        stripped = collections.OrderedDict((k[len("module."):], v) for k, v in sd.items())
        src_st = self.save_st(sd, "in.safetensors")
        src_pt = self.save_pt(sd, "in.pt")
        cases = [  # (input, output name, extra args, expected format)
            (src_st, "o1.pt", [], "pt"),
            (src_st, "o2.pth", [], "pt"),
            (src_st, "o3.bin", [], "pt"),
            (src_st, "o4.ckpt", [], "pt"),
            (src_st, "o5", [], "safetensors"),  # no extension: the input's format
            (src_st, "o6.safetensors", ["--format", "pt"], "pt"),
            (src_pt, "o7.safetensors", [], "safetensors"),
            (src_pt, "o8.bin", ["--format", "safetensors"], "safetensors"),
            (src_pt, "o9", [], "pt"),
            (src_pt, "o10.weights", ["--format", "safetensors"], "safetensors"),  # --format says which
            (src_st, "o11.pth.tar", [], "pt"),
        ]
        # An extension ckptfix does not write, without --format: a usage error (issue 50), nothing written.
        for src in (src_st, src_pt):
            out = self.path("fmt", "refused.weights")
            proc = support.run("strip-prefix", src, "-o", out, check=2)
            self.assertIn("not '.weights'; give --format pt or --format safetensors", proc.stderr)
            self.assertFalse(os.path.exists(out))
        for src, name, extra, fmt in cases:
            with self.subTest(input=os.path.basename(src), output=name, extra=extra):
                out = self.path("fmt", name)
                support.run("strip-prefix", src, "-o", out, *extra, check=0)
                if fmt == "safetensors":
                    want = self.save_st(clones(stripped), os.path.join("want", name + ".safetensors"))
                    self.assert_same_bytes(out, want, f"strip-prefix -> {name} {extra}")
                else:
                    with open(out, "rb") as f:
                        self.assertEqual(f.read(2), b"PK", f"{name}: not a torch zip file")
                    with open(out, "rb") as f:  # a file object: torch >= 2.14 loads *.safetensors paths with load_file
                        loaded = torch.load(f)
                    self.assert_tensors_equal(loaded, stripped, name, check_order=src == src_pt)

    # -- k. damaged files ---------------------------------------------------------

    def damaged_files(self):
        """(name, path, safetensors_refuses) for every damage made from one good file."""
        a = random_tensor(torch.float32, (2, 3), self.gen)   # 24 bytes
        b = random_tensor(torch.int16, (4,), self.gen)        # 8 bytes
        good = self.save_st({"a": a, "b": b}, "good.safetensors")
        with open(good, "rb") as f:
            data = f.read()
        n, header = read_header(good)
        buf = data[8 + n:]

        def hdr(h):
            return json.dumps(h, separators=(",", ":")).encode()

        def variant(**changes):
            h = json.loads(json.dumps(header))
            for key, value in changes.items():
                h.setdefault(key, {}).update(value)
            return h

        out = []

        def make(name, content):
            p = self.path("damaged", name + ".safetensors")
            with open(p, "wb") as f:
                f.write(content)
            out.append((name, p))

        def make_raw(name, header_bytes, buffer, n=None):
            p = self.path("damaged", name + ".safetensors")
            write_raw(p, header_bytes, buffer, n)
            out.append((name, p))

        make("truncated", data[:-3])
        make("truncated_header", data[:8 + n // 2])
        make_raw("header_len_beyond_file", hdr(header), buf, n=len(data))
        make_raw("header_len_huge", hdr(header), buf, n=2 ** 63 + 5)
        make_raw("header_over_100MB", hdr(header), buf, n=150_000_000)
        make_raw("non_json", b'{"a": {"dtype": "F32", oops}' + b" " * 4, buf)
        make_raw("header_not_utf8", b'{"\xff\xfe":{"dtype":"U8","shape":[32],"data_offsets":[0,32]}}', buf)
        make_raw("trailing_json", b'{}[]', buf)
        make_raw("overlap", hdr(variant(b={"data_offsets": [16, 24], "shape": [4]})), buf[:24])
        make_raw("hole", hdr(variant(b={"data_offsets": [28, 36]})), buf + b"\0\0\0\0")
        make_raw("beyond_buffer", hdr(variant(b={"data_offsets": [24, 40], "shape": [8]})), buf)
        make_raw("trailing_bytes", hdr(header), buf + b"\0" * 8)
        make_raw("dtype_shape_mismatch", hdr(variant(a={"shape": [2, 2]})), buf)
        make_raw("reversed_offsets", hdr(variant(a={"data_offsets": [24, 0]})), buf)
        make_raw("unknown_dtype", hdr(variant(a={"dtype": "F7"})), buf)
        make_raw("negative_dim", hdr(variant(a={"shape": [-2, -3]})), buf)
        make_raw("fractional_dim", hdr(variant(a={"shape": [2, 3.0]})), buf)
        make_raw("shape_overflow", hdr(variant(a={"shape": [2 ** 62, 2 ** 62, 4]})), buf)
        make_raw("missing_offsets", hdr({"a": {"dtype": "F32", "shape": [2, 3]}, "b": header["b"]}), buf)
        make_raw("nonstring_metadata", hdr(dict(header, __metadata__={"format": "pt", "n": 1})), buf)
        make_raw("metadata_not_object", hdr(dict(header, __metadata__=["format"])), buf)
        text = hdr(header).decode()
        dup = text[:-1] + ',"a":' + json.dumps(header["a"], separators=(",", ":")) + "}"
        make_raw("duplicate_key", dup.encode(), buf)
        make_raw("duplicate_metadata_key",
                 hdr(dict(header, __metadata__={"k": "1"})).replace(b'{"k":"1"}', b'{"k":"1","k":"2"}'), buf)
        entry_a = '"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}'
        entry_b = hdr({"b": header["b"]}).decode()[1:-1]
        make_raw("lone_surrogate_escape", ('{"\\ud800":' + entry_a[4:] + "," + entry_b + "}").encode(), buf)
        make_raw("duplicate_key_via_escape", ("{" + entry_a + ',"\\u0061":' + entry_a[4:] + "," + entry_b + "}").encode(), buf)
        make_raw("deep_nesting", ('{"__metadata__":' + "[" * 100000 + "]" * 100000 + "," + entry_a + "," + entry_b + "}").encode(), buf)
        make_raw("leading_zero_number", hdr(header).replace(b'"data_offsets":[0,24]', b'"data_offsets":[0,024]'), buf)
        make_raw("nul_padding", hdr(header) + b"\0" * 3, buf)
        make_raw("shape_null", hdr(variant(a={"shape": None})), buf)
        make_raw("three_offsets", hdr(variant(a={"data_offsets": [0, 24, 24]})), buf)
        make_raw("dtype_lowercase", hdr(variant(a={"dtype": "f32"})), buf)
        make_raw("f4_odd_last_dim", b'{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}', b"\0" * 8)
        make_raw("f4_scalar", b'{"a":{"dtype":"F4","shape":[],"data_offsets":[0,1]}}', b"\0" * 8)
        # a sparse file really 150 MB long behind a header claiming all of it
        p = self.path("damaged", "sparse_huge_header.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", 150_000_000) + b"{")
            f.truncate(8 + 150_000_000 + 32)
        out.append(("sparse_huge_header", p))
        return out

    # Damage the judge's own safetensors accepts; ckptfix is stricter on purpose (issue 15).
    SAFETENSORS_ACCEPTS = {"duplicate_key", "duplicate_metadata_key", "duplicate_key_via_escape"}

    def test_damaged_files(self):
        for name, path in self.damaged_files():
            with self.subTest(damage=name):
                try:
                    st.load_file(path)
                    with safe_open(path, framework="pt") as f:
                        f.metadata()
                    refused_by_safetensors = False
                except Exception:  # noqa: BLE001
                    refused_by_safetensors = True
                if name not in self.SAFETENSORS_ACCEPTS:
                    self.assertTrue(refused_by_safetensors, f"{name}: safetensors {safetensors.__version__} "
                                                            "loads it: the damage tests nothing")
                before = support.sha256(path)
                for command in ("verify", "inspect"):
                    proc = support.run(command, path)
                    self.assertEqual(proc.returncode, 1, f"{command} {name}: exit {proc.returncode}\n"
                                                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
                    lines = proc.stderr.strip("\n").split("\n")
                    errors = [line for line in lines if line.startswith("ckptfix: error: ")]
                    self.assertEqual(len(errors), 1, f"{command} {name}: one error line expected:\n{proc.stderr}")
                    self.assertIn(path, errors[0], f"{command} {name}: the error does not name the file")
                out_dir = os.path.dirname(self.path("conv", name, "x"))
                proc = support.run("convert", path, "-o", os.path.join(out_dir, "out.pt"))
                self.assert_refused(proc, out_dir, path)
                proc = support.run("convert", path, "-o", os.path.join(out_dir, "out.safetensors"))
                self.assert_refused(proc, out_dir, path)
                self.assertEqual(support.sha256(path), before, "the input changed")

    def test_unusual_valid_headers(self):
        """Headers other writers make, which safetensors reads: entries not in offset order,
        no padding, other JSON whitespace, escapes (\\u0061, \\/, a surrogate pair), an unknown
        field, __metadata__ between the tensors, only metadata. verify accepts them; -> .pt is
        load_file in header order; -> .safetensors is what save_file writes for load_file's tensors."""
        a = '"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}'
        b = '"b":{"dtype":"I16","shape":[4],"data_offsets":[24,32]}'
        buf = bytes(range(24)) + bytes(range(100, 108))
        headers = {
            "unsorted": ("{" + b + "," + a + "}", True),
            "no_padding": ("{" + a + "," + b + "}", False),
            "whitespace": ('{\n\t' + a + ' ,\r\n ' + b + '}\t\n\r ', False),
            "escapes": ('{"\\u0061\\/x":' + a[4:] + ',"\\ud83d\\ude00":' + b[4:] + "}", True),
            "unknown_field": ('{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"x":1},' + b + "}", True),
            "metadata_between": ("{" + a + ',"__metadata__":{"format":"pt"},' + b + "}", True),
            "only_metadata": ('{"__metadata__":{"format":"pt"}}', True),
        }
        for name, (text, pad) in headers.items():
            with self.subTest(header=name):
                src = self.path("unusual", name + ".safetensors")
                write_raw(src, text.encode(), b"" if name == "only_metadata" else buf, pad=pad)
                tensors = st.load_file(src)  # the judge's safetensors reads it
                with safe_open(src, framework="pt") as f:
                    metadata = f.metadata()
                proc = support.run("verify", src)
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.convert_to_pt_and_compare(src, name)
                if not tensors:
                    continue  # no state dict to write as safetensors (issue 15 leaves empty files open)
                out = self.path("out", name + ".safetensors")
                support.run("convert", src, "-o", out, check=0)
                want = self.save_st(tensors, os.path.join("want", name + ".safetensors"), metadata)
                self.assert_same_bytes(out, want, f"convert {name}.safetensors -o out.safetensors")

    def test_keys_safetensors_cannot_hold(self):
        """A state dict key safetensors cannot hold: '__metadata__' (the header's own entry)
        and a key that is not UTF-8 (a lone surrogate, which pickle writes as is). Refused:
        exit 1, the error names the input, nothing written."""
        for tag, key in (("metadata_key", "__metadata__"), ("surrogate_key", "bad\ud800")):
            with self.subTest(key=tag):
                pt = self.save_pt(collections.OrderedDict([(key, torch.ones(2)), ("x", torch.zeros(1))]),
                                  f"{tag}.pt")
                out_dir = os.path.dirname(self.path(f"refused_{tag}", "x"))
                proc = support.run("convert", pt, "-o", os.path.join(out_dir, "out.safetensors"))
                self.assert_refused(proc, out_dir, f"'{pt}'")

    def test_verify_good_files(self):
        sd = self.state_dict_every_dtype(SUPPORTED)
        for metadata in (None, {"format": "pt"}):
            src = self.save_st(sd, f"good-{bool(metadata)}.safetensors", metadata)
            proc = support.run("verify", src)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        empty = self.save_st({}, "empty.safetensors")
        proc = support.run("verify", empty)
        self.assertEqual(proc.returncode, 0, f"save_file({{}}) is a valid file: {proc.stdout}{proc.stderr}")

    # -- l. inspect and diff ---------------------------------------------------------

    def test_inspect_json(self):
        sd = collections.OrderedDict([("w", random_tensor(torch.bfloat16, (2, 3), self.gen)),
                                      ("i", random_tensor(torch.int64, (), self.gen)),
                                      ("e", random_tensor(torch.float32, (0, 2), self.gen))])
        src = self.save_st(sd, "i.safetensors", {"format": "pt"})
        proc = support.run("inspect", src, check=0)
        self.assertIn("safetensors", proc.stdout)
        doc = json.loads(support.run("inspect", "--json", src, check=0).stdout)
        item = doc["inputs"][0]
        self.assertEqual(item["status"], "ok")
        self.assertEqual(item["format"], "safetensors")
        got = {t["path"][-1]: (t["dtype"], t["shape"]) for t in doc["tensors"]}
        self.assertEqual(got, {k: (dtype_name(v.dtype), list(v.shape)) for k, v in sd.items()})

    def test_diff_across_formats(self):
        sd = collections.OrderedDict([("conv.weight", random_tensor(torch.float32, (2, 3), self.gen)),
                                      ("conv.bias", torch.randn(2, generator=self.gen)),
                                      ("steps", torch.tensor(4))])
        pt = self.save_pt(sd, "a.pt")
        same = self.save_st(clones(sd), "a.safetensors")
        proc = support.run("diff", pt, same)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        proc = support.run("diff", same, pt)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        changed = clones(sd)
        changed["conv.bias"][1] += 1
        other = self.save_st(changed, "b.safetensors")
        proc = support.run("diff", pt, other)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("conv.bias", proc.stdout)
        doc = json.loads(support.run("diff", "--json", pt, other).stdout)
        self.assertFalse(doc["equal"])
        self.assertEqual([t["key"] for t in doc["tensors"] if not t["equal"]], ["conv.bias"])
        # a safetensors file against a safetensors file
        self.assertEqual(support.run("diff", same, other).returncode, 1)
        self.assertEqual(support.run("diff", same, same).returncode, 0)


if __name__ == "__main__":
    if safetensors is None:
        print(f"test_safetensors: SKIPPED: {SKIP_REASON}", file=sys.stderr)
    unittest.main(argv=support.parse_args())
