#!/usr/bin/python3
"""One file or a shard set into a torch.distributed.checkpoint directory
(issue 53, part 2: `convert IN -o DIR --format dcp`), judged by real torch.

The judges are torch's own DCP functions, under every judge whose torch has
them (trixie's 2.6, sid's 2.14; bookworm's 1.13 has no DCP, so each test says
so and skips):
  * `dcp_to_torch_save(DIR, back.pt)`, loaded with the default torch.load, is
    the same object as `dcp_to_torch_save` of the directory torch's own
    `dcp.save` writes from the same dict (container types, key order,
    tensors' dtype, shape, strides and bytes, Python values and their types):
    nested model/optimizer/step dicts and every kind of leaf DCP flattens
    (test_dcp.py's variety_state: dtypes, views, scalars, int keys, lists,
    tuples holding tensors, empty containers);
  * both directories' .metadata, read with torch's FileSystemReader: the same
    state_dict_metadata keys in the same order, the same planner_data paths,
    each tensor's dtype and size;
  * `dcp.load(model.state_dict(), checkpoint_id=DIR)` fills a fresh model
    (BatchNorm with its int64 counter, a bf16 buffer, a tied weight) with the
    saved values, then load_state_dict(strict=True) accepts them;
  * from .safetensors (written by the judge's safetensors where it has it, else
    by ckptfix), from a Hugging Face shard set, from a legacy torch file, from
    a DeepSpeed ZeRO directory (fixtures/torch2.14/zero, against DeepSpeed's
    own live weights), from files saved on cuda:3, mixed devices and as a
    legacy file on cuda, of every dtype torch 1.13 has, and with
    `cast --dtype bf16` on the way; and through the Python package,
    ckptfix.convert(src, dst, format="dcp").
Refused in one line, nothing written (no directory left): a root that is not
a dict, two keys that flatten to one (torch: "duplicated flatten key"), a
dict that holds itself (named as the input's), an existing checkpoint
without --force (replaced with it), --max-shard-size. `ckptfix verify`
takes every directory written.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import test_dcp  # noqa: E402  (its state dicts and comparison, not its tests)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

dcp = test_dcp.dcp
if dcp is not None:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

try:
    import safetensors.torch as st
except ImportError:
    st = None

NO_DCP = test_dcp.NO_DCP


class TiedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.body = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight  # tied: one storage under two keys
        self.register_buffer("scale", torch.linspace(0, 1, 3).bfloat16())


def trained_model(seed):
    torch.manual_seed(seed)
    model = TiedModel()
    model.train()
    model.body(torch.randn(6, 4))  # moves running stats and num_batches_tracked
    return model


@unittest.skipIf(dcp is None, NO_DCP)
class DcpWriteTest(support.ScratchDirTest):
    maxDiff = None
    prefix = "ckptfix-dcpw-"
    assert_same_object = test_dcp.DcpTest.assert_same_object

    def to_dcp(self, src, name, *extra, command="convert"):
        out = self.path("out", name)
        support.run(command, src, "-o", out, "--format", "dcp", *extra, check=0)
        self.assertEqual(sorted(os.listdir(out)), [".metadata", "__0_0.distcp"])
        support.run("verify", out, check=0)  # and ckptfix's own reader takes it
        return out

    def back(self, ckpt_dir, name):
        out = self.path("back", name + ".pt")
        dcp_to_torch_save(ckpt_dir, out)
        return torch.load(out)  # the default: weights_only=True from torch 2.6

    def torch_dcp(self, state, name):
        ckpt = self.folder("torch", name)
        dcp.save(state, checkpoint_id=ckpt)  # one process, no process group
        return ckpt

    def assert_same_metadata(self, ours, theirs):
        a = FileSystemReader(ours).read_metadata()
        b = FileSystemReader(theirs).read_metadata()
        self.assertEqual(list(a.state_dict_metadata), list(b.state_dict_metadata), "keys or their order")
        self.assertEqual(a.planner_data, b.planner_data)
        for fqn, md in b.state_dict_metadata.items():
            self.assertIs(type(a.state_dict_metadata[fqn]), type(md), fqn)
            if hasattr(md, "size"):
                self.assertEqual(a.state_dict_metadata[fqn].size, md.size, fqn)
                self.assertEqual(a.state_dict_metadata[fqn].properties.dtype, md.properties.dtype, fqn)

    def judge_against_torch(self, state, name):
        src = self.path(name + ".pt")
        torch.save(state, src)
        ours = self.to_dcp(src, name)
        theirs = self.torch_dcp(state, name)
        self.assert_same_object(self.back(ours, name), self.back(theirs, name + "-torch"), name)
        self.assert_same_metadata(ours, theirs)
        return ours

    # -- what dcp.save writes, from the same dicts ------------------------------

    def test_model_optimizer_step(self):
        self.judge_against_torch(test_dcp.single_state(), "single")

    def test_every_kind_of_leaf(self):
        self.judge_against_torch(test_dcp.variety_state(), "variety")

    def test_dcp_load_fills_a_model(self):
        model = trained_model(53)
        src = self.path("model.pt")
        torch.save(model.state_dict(), src)
        ckpt = self.to_dcp(src, "model")
        fresh = trained_model(54)
        state = fresh.state_dict()
        dcp.load(state, checkpoint_id=ckpt)
        fresh.load_state_dict(state, strict=True)
        for key, value in model.state_dict().items():
            got = fresh.state_dict()[key]
            self.assertEqual(got.dtype, value.dtype, key)
            self.assertTrue(torch.equal(got, value), key)
        self.assertEqual(fresh.state_dict()["body.1.num_batches_tracked"].item(), 1)

    # -- other inputs -----------------------------------------------------------

    def test_from_safetensors_shard_set_and_legacy_file(self):
        model = trained_model(55)
        sd = {k: v.clone() for k, v in model.state_dict().items() if k != "head.weight"}  # safetensors: no aliases
        src = self.path("model.pt")
        torch.save(sd, src)
        legacy = self.path("legacy.pt")
        torch.save(sd, legacy, _use_new_zipfile_serialization=False)
        safet = self.path("model.safetensors")
        if st is not None:
            st.save_file(sd, safet)
        else:
            support.run("convert", src, "-o", safet, check=0)
        shards = self.path("shards", "model.safetensors")
        support.run("convert", src, "-o", shards, "--max-shard-size", "200", check=0)
        expected = self.back(self.torch_dcp(sd, "plain"), "plain")
        for name, path in [("legacy", legacy), ("safetensors", safet),
                           ("shards", self.path("shards", "model.safetensors.index.json"))]:
            with self.subTest(input=name):
                got = self.back(self.to_dcp(path, name), name)
                if name == "legacy":
                    self.assert_same_object(got, expected, name)
                else:  # a safetensors file holds its tensors in sorted key order
                    self.assertEqual(sorted(got), sorted(expected))
                    for k in expected:
                        self.assert_same_object(got[k], expected[k], f"{name}[{k}]")

    def test_saved_on_gpus_and_every_dtype(self):
        # Files torch 1.13 saved on cuda:3, on cuda/mps devices mixed, as a
        # legacy file on cuda, and every dtype it has: the chunks are written
        # on the CPU, as torch writes them, so the judge needs no GPU.
        for name in ["cuda3.pt", "legacy_cuda.pt", "mixed_devices.pt", "all_dtypes.pt"]:
            with self.subTest(fixture=name):
                src = support.fixture(name)
                expected = torch.load(src, map_location="cpu", weights_only=False)
                got = self.back(self.to_dcp(src, name[:-3]), name[:-3])
                self.assertEqual(list(got), list(expected))
                for k, v in expected.items():
                    self.assertEqual(got[k].dtype, v.dtype, k)
                    self.assertTrue(test_dcp.tensor_bytes(got[k]) == test_dcp.tensor_bytes(v), k)

    def test_from_zero_directory(self):
        zero = support.fixture("torch2.14/zero")
        with open(os.path.join(zero, "manifest.json")) as f:
            model = next(e for e in json.load(f) if e["case"] == "stage2_bf16")["model"]
        got = self.back(self.to_dcp(os.path.join(zero, "stage2_bf16"), "zero"), "zero")
        live = torch.load(os.path.join(zero, "stage2_bf16.expected", "live.pt"))
        self.assertEqual(sorted(got), sorted(model["state_dict_keys"]))
        for key in model["trainable"]:  # the fp32 master weights, bit for bit
            self.assertEqual(got[key].dtype, torch.float32, key)
            self.assertTrue(torch.equal(got[key], live[key].float()), key)
        for key in model["frozen"] + [k for k in model["buffer_dtypes_at_init"] if k in live]:
            self.assertEqual(got[key].dtype, live[key].dtype, key)
            self.assertTrue(torch.equal(got[key], live[key]), key)

    def test_cast_on_the_way(self):
        model = trained_model(56)
        src = self.path("model.pt")
        torch.save(model.state_dict(), src)
        out = self.path("out", "bf16")
        support.run("cast", src, "--dtype", "bf16", "-o", out, "--format", "dcp", check=0)
        got = self.back(out, "bf16")
        for k, v in model.state_dict().items():
            want = v.bfloat16() if v.is_floating_point() else v
            self.assertEqual(got[k].dtype, want.dtype, k)
            self.assertTrue(torch.equal(got[k], want), k)

    def test_python_api(self):
        sys.path.insert(0, os.path.join(support.REPO, "python"))
        import ckptfix
        os.environ["CKPTFIX_BIN"] = support.CKPTFIX  # the binary the package runs
        state = test_dcp.single_state()
        src = self.path("python.pt")
        torch.save(state, src)
        out = self.path("out", "python")
        report = ckptfix.convert(src, out, format="dcp")
        self.assertEqual(report["inputs"][0]["format"], "dcp")
        self.assert_same_object(self.back(out, "python"), self.back(self.torch_dcp(state, "python"), "python-torch"),
                                "python")

    # -- refusals ---------------------------------------------------------------

    def refuse(self, args, words, code=1):
        """One line, exit 1 (the input) or 2 (the command line: usage)."""
        proc = support.run(*args, check=code)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("ckptfix: error:", lines[0])
        self.assertIn(words, lines[0])

    def test_refusals_write_nothing(self):
        tensor = self.path("tensor.pt")
        torch.save(torch.ones(3), tensor)
        out = self.path("out", "x")
        self.refuse(["convert", tensor, "-o", out, "--format", "dcp"], "holds a dict", code=2)
        self.assertFalse(os.path.exists(out))
        clash = self.path("clash.pt")
        torch.save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, clash)
        self.refuse(["convert", clash, "-o", out, "--format", "dcp"], "key 'a.b'")
        self.assertFalse(os.path.exists(out))
        cycle = self.path("cycle.pt")
        holds_itself = {"w": torch.ones(1)}
        holds_itself["self"] = holds_itself  # dcp.save would recurse until Python's stack ran out
        torch.save(holds_itself, cycle)
        self.refuse(["convert", cycle, "-o", out, "--format", "dcp"], "cycle.pt': key 'self': the value here holds itself")
        self.assertFalse(os.path.exists(out))
        src = self.path("sd.pt")
        torch.save({"w": torch.ones(2)}, src)
        self.refuse(["convert", src, "-o", out, "--format", "dcp", "--max-shard-size", "1MB"], "--max-shard-size", code=2)
        self.assertFalse(os.path.exists(out))
        # An existing checkpoint: the same run again leaves it (a rerun, issue 65); made from the
        # input before it changed, it is refused (exit 1: that input's problem), then replaced with --force.
        self.to_dcp(src, "x")
        before = test_dcp.dir_state(out)
        again = support.run("convert", src, "-o", out, "--format", "dcp", "--json", check=0)
        self.assertEqual(json.loads(again.stdout)["inputs"][0]["rerun"], "done")
        self.assertEqual(test_dcp.dir_state(out), before)
        torch.save({"w": torch.zeros(2)}, src)
        self.refuse(["convert", src, "-o", out, "--format", "dcp"], "exists", code=1)
        self.assertEqual(test_dcp.dir_state(out), before)
        support.run("convert", src, "-o", out, "--format", "dcp", "--force", check=0)
        self.assertTrue(torch.equal(self.back(out, "forced")["w"], torch.zeros(2)))


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
