#!/usr/bin/python3
"""Fitting a state dict to its model (issue 51), judged by this judge's torch.

Every case builds modules in the test, saves what real code saves (a
DataParallel's state dict, a Lightning checkpoint, a bare backbone, a
pre-weight_norm-API model, ...) with this torch, runs `ckptfix fix --like`
and asks torch itself: torch.load(OUT, weights_only=True) and then
model.load_state_dict(..., strict=True) must take it, every tensor equal
to the one it came from, the keys in the model's order. The refusals
(ambiguity, missing, unexpected, size mismatch) must write nothing and say
torch's own lines, and `check --like` must name exactly the keys torch's
RuntimeError names. Where the judge has torchvision, its real
architectures (DenseNet's legacy keys, a ResNet into a detection
backbone) are fitted too (scripts/models-check.sh runs that judge).
"""
import collections
import json
import os
import re
import shlex
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.join(support.REPO, "python"))
import ckptfix  # noqa: E402

try:
    import torchvision  # noqa: E402
except ImportError:
    torchvision = None

VERSION = support.torch_version()
# torch >= 2.1 saves meta tensors (_rebuild_meta_tensor_no_storage) and has the new weight_norm.
HAS_META_SAVE = VERSION >= (2, 1)
# check --like speaks as this judge's torch does (1.13 and 2.x differ on which keys are unexpected).
JUDGE_TORCH = ["--torch", "{}.{}".format(*VERSION)]
HAS_NEW_WEIGHT_NORM = hasattr(nn.utils, "parametrizations") and hasattr(nn.utils.parametrizations, "weight_norm")


class LayerScale(nn.Module):
    """A parameter named gamma that is no LayerNorm's (timm's LayerScale)."""

    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), 1e-5))


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.norm = nn.LayerNorm(channels)
        self.scale = LayerScale(channels)


class Net(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.features = nn.Sequential(Block(6), nn.ReLU(), Block(7))
        self.head = nn.Linear(7, classes)


class Classifier(nn.Module):
    """A Hugging Face-like model: its base model under `bert`, a head beside it."""

    def __init__(self):
        super().__init__()
        self.bert = Net()
        self.classifier = nn.Linear(5, 2)


class Detector(nn.Module):
    """detectron2's layout: a backbone under backbone.bottom_up, without its classifier."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.bottom_up = nn.Module()
        self.backbone.bottom_up.features = Net().features
        self.proposals = nn.Linear(7, 4)


class DenseLayer(nn.Module):
    """torchvision's _DenseLayer naming: norm1, relu1, conv1 (legacy files say norm.1)."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(4)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(4, 8, 1)
        self.norm2 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 4, 3)


class SequentialNorm(nn.Module):
    """The other direction: the model says norm.1, the file norm1."""

    def __init__(self):
        super().__init__()
        self.norm = nn.Sequential(nn.ReLU(), nn.BatchNorm2d(4))
        self.conv = nn.Conv2d(4, 4, 1)


class FrozenBatchNorm2d(nn.Module):
    """torchvision.ops.FrozenBatchNorm2d: a BatchNorm's buffers, no num_batches_tracked."""

    def __init__(self, n):
        super().__init__()
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.register_buffer(name, torch.rand(n))


class FrozenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.bn = FrozenBatchNorm2d(6)


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.bn = nn.BatchNorm2d(6)


def seeded(make):
    torch.manual_seed(len(make.__name__))
    model = make()
    # Running statistics other than their defaults, so that a swap would show.
    for name, b in model.named_buffers():
        if b.is_floating_point():
            b.copy_(torch.rand_like(b))
        elif name.endswith("num_batches_tracked"):
            b.fill_(7)
    return model


def torch_lines(model, state_dict, strict=True):
    """The lines torch's load_state_dict(strict) raises for `state_dict`, [] when it loads."""
    try:
        model.load_state_dict(state_dict, strict=strict)
    except RuntimeError as e:
        text = str(e)
        assert text.startswith("Error(s) in loading state_dict"), text
        return [line.strip() for line in text.split("\n\t")[1:]]
    return []


def without_way_out(line):
    """A refusal line of ckptfix without its way out: " (--allow-missing writes ...)"."""
    return line.split(" (--")[0].split(" (allow_missing")[0].split(" (drop_")[0].strip()


class FitTest(support.ScratchDirTest):
    prefix = "ckptfix-fit-"

    def save(self, name, obj):
        path = self.path(name)
        torch.save(obj, path)
        return path

    def reference(self, model, form="checkpoint"):
        """A reference of `model` in one of the forms --like reads."""
        if form == "checkpoint":
            return self.save("ref.pt", model.state_dict())
        if form == "meta":
            return self.save("ref-meta.pt", model.to("meta").state_dict())
        if form == "json":
            path = self.path("ref.json")
            with open(path, "w") as f:
                json.dump({k: {"shape": list(v.shape), "dtype": str(v.dtype)[6:]} for k, v in model.state_dict().items()},
                          f)
            return path
        raise ValueError(form)

    def fix(self, source, reference, *extra, check=0):
        out = self.path("out.pt")
        if os.path.exists(out):
            os.remove(out)
        proc = support.run("fix", "--like", reference, source, "-o", out, "--json", *extra, check=check)
        return out, proc

    def assert_fits(self, out, model, expected, strict=True):
        """torch.load(out) is `expected` (key -> tensor, in the model's order), and the model takes it."""
        loaded = torch.load(out, weights_only=True)
        self.assertIsInstance(loaded, collections.OrderedDict)
        self.assertEqual(list(loaded), list(expected))
        for k, v in expected.items():
            self.assertEqual(loaded[k].dtype, v.dtype, k)
            self.assertEqual(loaded[k].shape, v.shape, k)
            self.assertTrue(torch.equal(loaded[k], v), k)
        result = model.load_state_dict(loaded, strict=strict)
        if strict:
            self.assertEqual((result.missing_keys, result.unexpected_keys), ([], []))
        return loaded

    def renamed(self, state_dict, rename):
        return collections.OrderedDict((rename(k), v) for k, v in state_dict.items())

    # --- wrapper segments ---------------------------------------------------

    def test_data_parallel_prefix_is_removed_and_metadata_follows(self):
        model = seeded(Net)
        source = self.save("dp.pt", nn.DataParallel(model).state_dict())
        out, proc = self.fix(source, self.reference(seeded(Net)))
        loaded = self.assert_fits(out, seeded(Net), model.state_dict())
        # _metadata renamed with the keys: the model's own modules, each with its saved version.
        self.assertEqual(dict(loaded._metadata), dict(model.state_dict()._metadata))
        if VERSION >= (2, 0):  # 1.13's consume_prefix_in_state_dict_if_present leaves _metadata as it was
            expected = nn.DataParallel(model).state_dict()
            nn.modules.utils.consume_prefix_in_state_dict_if_present(expected, "module.")
            self.assertEqual(dict(loaded._metadata), dict(expected._metadata))
        moved = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]["moved"]
        self.assertEqual(len(moved), len(model.state_dict()))
        self.assertEqual(moved[0], {"from": "module.features.0.conv.weight", "to": "features.0.conv.weight",
                                    "rule": "wrapper segment 'module.'"})

    def test_wrapper_chains_and_segments_inside_keys(self):
        model = seeded(Net)
        sd = model.state_dict()
        cases = {
            "compile of DDP": lambda k: "_orig_mod.module." + k,
            "FSDP and activation checkpointing inside keys": lambda k: k.replace(
                "features.0.", "features.0._fsdp_wrapped_module._checkpoint_wrapped_module.").replace(
                "head.", "_fsdp_wrapped_module.head."),
            "early FSDP's flat-parameter wrapper": lambda k: "_fsdp_wrapped_module._fpw_module." + k,
        }
        for name, rename in cases.items():
            with self.subTest(name):
                source = self.save("wrapped.pt", self.renamed(sd, rename))
                out, _ = self.fix(source, self.reference(seeded(Net)))
                self.assert_fits(out, seeded(Net), sd)

    def test_one_submodule_wrapped_in_data_parallel(self):
        model = seeded(Net)
        sd = model.state_dict()
        wrapped = seeded(Net)
        wrapped.load_state_dict(sd)
        wrapped.features = nn.DataParallel(wrapped.features)
        source = self.save("part.pt", wrapped.state_dict())
        self.assertIn("features.module.0.conv.weight", torch.load(source))
        out, _ = self.fix(source, self.reference(seeded(Net)))
        self.assert_fits(out, seeded(Net), sd)

    def test_the_model_wrapped_and_the_file_bare(self):
        """The other direction: a DataParallel model, a plain file (one prefix added)."""
        model = seeded(Net)
        target = nn.DataParallel(seeded(Net))
        source = self.save("plain.pt", model.state_dict())
        out, _ = self.fix(source, self.reference(target))
        self.assert_fits(out, target, self.renamed(model.state_dict(), lambda k: "module." + k))

    # --- prefixes -----------------------------------------------------------

    def test_lightning_checkpoint(self):
        model = seeded(Net)
        sd = model.state_dict()
        ckpt = {"epoch": 3, "global_step": 30, "state_dict": self.renamed(sd, lambda k: "model." + k),
                "optimizer_states": [torch.optim.SGD(model.parameters(), lr=0.1).state_dict()],
                "hyper_parameters": {"lr": 0.1}}
        source = self.save("lightning.ckpt", ckpt)
        out, proc = self.fix(source, self.reference(seeded(Net)))
        self.assert_fits(out, seeded(Net), sd)
        fit = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]
        self.assertEqual(fit["state_dict"], ["state_dict"])
        self.assertEqual({m["rule"] for m in fit["moved"]}, {"prefix 'model.' removed"})

    def test_base_model_prefix_both_ways(self):
        backbone = seeded(Net)
        sd = backbone.state_dict()
        with self.subTest("file has bert., the model is the base model"):
            source = self.save("hf.pt", self.renamed(sd, lambda k: "bert." + k))
            out, _ = self.fix(source, self.reference(seeded(Net)))
            self.assert_fits(out, seeded(Net), sd)
        with self.subTest("file is the base model, the model has bert. and a head"):
            source = self.save("base.pt", sd)
            target = seeded(Classifier)
            ref = self.reference(target)
            _, proc = self.fix(source, ref, check=1)
            lines = [without_way_out(l[len("ckptfix:   "):]) for l in proc.stderr.splitlines() if l.startswith("ckptfix:   ")]
            expected = self.renamed(sd, lambda k: "bert." + k)
            self.assertEqual(lines, torch_lines(seeded(Classifier), expected))
            out, _ = self.fix(source, ref, "--allow-missing")
            loaded = self.assert_fits(out, target, expected, strict=False)
            self.assertEqual(torch_lines(seeded(Classifier), loaded),
                             ['Missing key(s) in state_dict: "classifier.weight", "classifier.bias".'])

    def test_bare_backbone_into_backbone_bottom_up(self):
        backbone = seeded(Net)
        source = self.save("backbone.pt", backbone.state_dict())
        target = seeded(Detector)
        out, proc = self.fix(source, self.reference(target), "--allow-missing", "--drop-unexpected")
        expected = collections.OrderedDict(("backbone.bottom_up." + k, v) for k, v in backbone.state_dict().items()
                                           if k.startswith("features."))
        loaded = self.assert_fits(out, target, expected, strict=False)
        self.assertEqual(torch_lines(seeded(Detector), loaded),
                         ['Missing key(s) in state_dict: "proposals.weight", "proposals.bias".'])
        fit = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]
        self.assertEqual([d["from"] for d in fit["dropped"]], ["head.weight", "head.bias"])
        self.assertEqual(fit["missing"], ["proposals.weight", "proposals.bias"])

    def test_one_prefix_replaced_by_another(self):
        model = seeded(Net)
        sd = model.state_dict()
        source = self.save("renamed.pt", self.renamed(sd, lambda k: "model.encoder." + k))
        target = nn.Module()
        target.backbone = seeded(Net)
        out, _ = self.fix(source, self.reference(target))
        self.assert_fits(out, target, self.renamed(sd, lambda k: "backbone." + k))

    # --- known renames ------------------------------------------------------

    def test_layernorm_gamma_beta_but_not_a_layer_scale_gamma(self):
        model = seeded(Net)
        sd = model.state_dict()
        old = self.renamed(sd, lambda k: k.replace("norm.weight", "norm.gamma").replace("norm.bias", "norm.beta"))
        self.assertIn("features.0.scale.gamma", old)
        source = self.save("tf.pt", old)
        out, proc = self.fix(source, self.reference(seeded(Net)))
        self.assert_fits(out, seeded(Net), sd)
        moved = {m["from"]: m for m in json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]["moved"]}
        self.assertEqual(set(moved), {"features.0.norm.gamma", "features.0.norm.beta", "features.2.norm.gamma",
                                      "features.2.norm.beta"})
        self.assertEqual(moved["features.0.norm.gamma"]["rule"], "gamma -> weight (a norm's)")

    def test_rules_that_never_guess(self):
        # Issue 67, item 3: a FiLM layer's 2-d gamma is no norm's weight (once renamed into a Linear
        # as "gamma -> weight (LayerNorm)"); a head renamed to classifier fits by the same prefix
        # rule as a backbone renamed to encoder; one key in common is no prefix.
        class Film(nn.Module):
            def __init__(self):
                super().__init__()
                self.film = nn.Linear(8, 8)

        source = self.save("film.pt", {"film.gamma": torch.ones(8, 8), "film.beta": torch.zeros(8, 8)})
        lines, _ = self.refused(source, self.reference(seeded(Film)))
        self.assertEqual([without_way_out(l) for l in lines], torch_lines(seeded(Film), torch.load(source)))

        class Classifier2(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
                self.classifier = nn.Linear(4, 3)

        model = seeded(Classifier2)
        for old, new in (("head.", "classifier."), ("backbone.", "encoder.")):
            with self.subTest(old=old):
                sd = self.renamed(model.state_dict(), lambda k: old + k[len(new):] if k.startswith(new) else k)
                out, proc = self.fix(self.save(old + "pt", sd), self.reference(seeded(Classifier2)))
                self.assert_fits(out, seeded(Classifier2), model.state_dict())
                rules = {m["rule"] for m in json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]["moved"]}
                self.assertEqual(rules, {f"prefix '{old}' -> '{new}'"})
        # Under a stripped prefix every key must fit, or the prefix is refused naming the one that does not.
        sd = self.renamed(model.state_dict(), lambda k: "model." + k)
        sd["model.aux.weight"] = torch.zeros(2)
        lines, _ = self.refused(self.save("aux.pt", sd), self.reference(seeded(Classifier2)), "--drop-unexpected")
        self.assertIn("'model.aux.weight' under it would be 'aux.weight', which the model has not", lines[0])
        out, _ = self.fix(self.path("aux.pt"), self.reference(seeded(Classifier2)), "--drop", "model.aux.*")
        self.assert_fits(out, seeded(Classifier2), model.state_dict())

    def test_weight_norm_old_and_new_names(self):
        torch.manual_seed(1)
        old_model = nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 3)), nn.ReLU())
        old = old_model.state_dict()
        self.assertEqual(list(old), ["0.bias", "0.weight_g", "0.weight_v"])
        new_names = {"0.weight_g": "0.parametrizations.weight.original0",
                     "0.weight_v": "0.parametrizations.weight.original1"}
        new = self.renamed(old, lambda k: new_names.get(k, k))
        with self.subTest("new -> old"):
            source = self.save("new.pt", new)
            out, _ = self.fix(source, self.reference(old_model))
            self.assert_fits(out, old_model, old)
        if not HAS_NEW_WEIGHT_NORM:
            self.skipTest(f"torch {torch.__version__} has no parametrizations.weight_norm: old -> new is judged by newer torch")
        with self.subTest("old -> new"):
            new_model = nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), nn.ReLU())
            self.assertEqual(sorted(new_model.state_dict()), sorted(new))
            source = self.save("old.pt", old)
            out, _ = self.fix(source, self.reference(new_model))
            expected = collections.OrderedDict((k, new[k]) for k in new_model.state_dict())
            loaded = self.assert_fits(out, new_model, expected)
            self.assertTrue(torch.equal(new_model(torch.ones(2, 4)), old_model(torch.ones(2, 4))))
            del loaded

    def test_digit_segment_joined_and_split(self):
        with self.subTest("legacy norm.1 -> norm1 (torchvision's DenseNet)"):
            model = seeded(DenseLayer)
            sd = model.state_dict()
            legacy = self.renamed(sd, lambda k: k.replace("norm1", "norm.1").replace("conv1", "conv.1")
                                  .replace("norm2", "norm.2").replace("conv2", "conv.2"))
            source = self.save("legacy.pt", legacy)
            out, _ = self.fix(source, self.reference(seeded(DenseLayer)))
            self.assert_fits(out, seeded(DenseLayer), sd)
        with self.subTest("norm1 -> norm.1"):
            model = seeded(SequentialNorm)
            sd = model.state_dict()
            joined = self.renamed(sd, lambda k: k.replace("norm.1", "norm1"))
            source = self.save("joined.pt", joined)
            out, _ = self.fix(source, self.reference(seeded(SequentialNorm)))
            self.assert_fits(out, seeded(SequentialNorm), sd)

    def test_num_batches_tracked_made_and_dropped(self):
        with self.subTest("made, as torch makes it for an old BatchNorm"):
            model = seeded(Net)
            sd = model.state_dict()
            old = collections.OrderedDict((k, v) for k, v in sd.items() if not k.endswith("num_batches_tracked"))
            source = self.save("old-bn.pt", old)
            out, proc = self.fix(source, self.reference(seeded(Net)))
            expected = collections.OrderedDict(
                (k, torch.tensor(0, dtype=torch.long) if k.endswith("num_batches_tracked") else v) for k, v in sd.items())
            self.assert_fits(out, seeded(Net), expected)
            added = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]["added"]
            self.assertEqual([a["to"] for a in added], ["features.0.bn.num_batches_tracked", "features.2.bn.num_batches_tracked"])
        with self.subTest("dropped where the model has none (FrozenBatchNorm2d)"):
            bn = seeded(BatchNormNet)
            source = self.save("bn.pt", bn.state_dict())
            frozen = seeded(FrozenNet)
            out, proc = self.fix(source, self.reference(frozen))
            expected = collections.OrderedDict((k, v) for k, v in bn.state_dict().items()
                                               if not k.endswith("num_batches_tracked"))
            expected = collections.OrderedDict((k, expected[k]) for k in frozen.state_dict())
            self.assert_fits(out, frozen, expected)

    # --- what no rule can know ----------------------------------------------

    def test_rename_and_drop(self):
        model = seeded(Net)
        sd = model.state_dict()
        source_sd = self.renamed(sd, lambda k: k.replace("features.", "encoder.layer."))
        source_sd["aux_head.weight"] = torch.ones(3, 3)
        source = self.save("renamed.pt", source_sd)
        _, proc = self.fix(source, self.reference(seeded(Net)), check=1)
        out, proc = self.fix(source, self.reference(seeded(Net)), "--rename", r"^encoder\.layer\.(\d+)\.=features.\1.",
                             "--drop", "aux_*")
        self.assert_fits(out, seeded(Net), sd)
        fit = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]
        self.assertEqual(fit["dropped"], [{"from": "aux_head.weight", "rule": "--drop 'aux_*'"}])
        self.assertEqual(fit["moved"][0]["rule"], r"--rename '^encoder\.layer\.(\d+)\.'")

    def test_no_silent_empty_and_a_large_loss_said_first(self):
        # Issue 67, item 2: q/k/v where the model has query/key/value (same shapes): allowing
        # everything once wrote an empty state dict, exit 0, that load_state_dict(strict=False) took
        # as nothing. Now refused, saying why; --rename keeps every weight.
        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.query, self.key, self.value = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

        model = seeded(Attention)
        sd = self.renamed(model.state_dict(), lambda k: k[0] + k[k.index("."):])  # query.weight -> q.weight
        source = self.save("qkv.pt", sd)
        reference = self.reference(seeded(Attention))
        # Three modules of one signature: which prefix change is meant is a guess, refused.
        _, proc = self.refused(source, reference, "--allow-missing", "--drop-unexpected")
        self.assertIn("as well by one prefix change as by another (prefix 'k.' -> 'key.'", proc.stderr)
        self.assertIn("--rename", proc.stderr)
        # Tensors that pair with nothing of the model: keeping none is refused, with the advice.
        nothing = self.save("nothing.pt", {"a.weight": torch.zeros(3, 3), "b.weight": torch.zeros(5),
                                           "c.weight": torch.zeros(2)})
        _, proc = self.refused(nothing, reference, "--allow-missing", "--drop-unexpected")
        self.assertIn("would keep none of its 3 tensors", proc.stderr)
        out, _ = self.fix(source, reference, "--rename", r"^q\.=query.", "--rename", r"^k\.=key.",
                          "--rename", r"^v\.=value.")
        self.assert_fits(out, seeded(Attention), model.state_dict())
        # Keeping fewer than it leaves out is said first, and counted in the JSON.
        class One(nn.Module):
            def __init__(self):
                super().__init__()
                self.query = nn.Linear(4, 4)

        out, proc = self.fix(self.save("qkv2.pt", model.state_dict()), self.save("one.pt", seeded(One).state_dict()),
                             "--drop-unexpected")
        fit = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]
        self.assertEqual((fit["kept"], fit["left_out"]), (2, 4))
        self.assertIn("the fit keeps 2 of the file's 6 tensors and leaves out 4", proc.stderr)

    def test_check_advises_renames_that_keep_the_weights(self):
        # Issue 67, item 1: q/k/v for query/key/value, head for classifier, layers.0 for layer0 (same
        # shapes): check --like once advised --allow-missing --drop-unexpected, which kept nothing. Its
        # advice now maps them, says what it keeps, and following it loads strictly in torch.
        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.query, self.key, self.value = nn.Linear(4, 4), nn.Linear(4, 6), nn.Linear(4, 8)
                self.classifier = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
                self.layer0 = nn.Linear(8, 3)

        def old_names(k):
            for new, old in (("query.", "q."), ("key.", "k."), ("value.", "v."), ("classifier.", "head."),
                             ("layer0.", "layers.0.")):
                if k.startswith(new):
                    return old + k[len(new):]
            return k

        model = seeded(Attention)
        source = self.save("old.pt", self.renamed(model.state_dict(), old_names))
        ref = self.reference(seeded(Attention))
        proc = support.run("check", "--like", ref, source, "--json", check=1)
        fix = json.loads(proc.stdout)["inputs"][0]["load_state_dict"]["fix"]
        self.assertEqual((fix["keeps"], fix["tensors"]), (12, 12), fix)
        self.assertFalse(fix["allow_missing"] or fix["drop_unexpected"], fix)
        self.assertIn([r"^q\.", "query."], fix["renames"])  # one rule a module (head -> classifier: the prefix rule)
        self.assertIn([r"^layers\.0\.", "layer0."], fix["renames"])
        hint = [l for l in support.run("check", "--like", ref, source, check=1).stderr.splitlines() if "hint" in l][0]
        self.assertNotIn("--allow-missing", hint)
        command = re.search(r"'(ckptfix fix .*)' makes it load", hint).group(1)
        args = shlex.split(command.replace("OUT", self.path("advised.pt")))[1:]
        support.run(*args, check=0)
        self.assert_fits(self.path("advised.pt"), seeded(Attention), model.state_dict())

    # --- refusals: nothing written ------------------------------------------

    def refused(self, source, reference, *extra):
        before = support.sha256(source)
        out = self.path("refused.pt")
        proc = support.run("fix", "--like", reference, source, "-o", out, *extra, check=1)
        self.assertFalse(os.path.exists(out), "a refusal wrote its output")
        self.assertEqual(support.sha256(source), before)
        self.assertEqual(os.listdir(os.path.dirname(out)).count("refused.pt"), 0)
        return [l[len("ckptfix:   "):] for l in proc.stderr.splitlines() if l.startswith("ckptfix:   ")], proc

    def test_a_bad_input_or_reference_is_named_whichever_is_read_first(self):
        # fix --like opens the input while it reads the reference: each
        # error is still the one the file has, the reference's first.
        model = seeded(Net)
        good = self.save("dp.pt", nn.DataParallel(model).state_dict())
        reference = self.reference(seeded(Net))
        cut = self.path("cut.pt")
        with open(good, "rb") as f:
            data = f.read()
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        out = self.path("out.pt")
        for name, source, ref, named in [("bad input", cut, reference, cut), ("bad reference", good, cut, cut),
                                         ("both bad", cut, self.path("absent.pt"), self.path("absent.pt"))]:
            with self.subTest(name):
                proc = support.run("fix", "--like", ref, source, "-o", out, check=1)
                errors = [line for line in proc.stderr.splitlines() if line.startswith("ckptfix: error")]
                self.assertEqual(len(errors), 1, proc.stderr)
                self.assertIn(named, errors[0])
                self.assertFalse(os.path.exists(out))
        with self.subTest("several inputs, each read as usual"):
            proc = support.run("fix", "--like", reference, good, cut, "--out-dir", self.path("outs"), check=1)
            self.assertTrue(os.path.exists(os.path.join(self.path("outs"), "dp.pt")))
            self.assertFalse(os.path.exists(os.path.join(self.path("outs"), "cut.pt")))
            self.assertIn(cut, proc.stderr)

    def test_ambiguity_is_refused_naming_every_candidate(self):
        target = nn.Module()
        target.a = nn.Sequential(collections.OrderedDict(x=nn.Linear(4, 4)))
        target.b = nn.Sequential(collections.OrderedDict(x=nn.Linear(4, 4)))
        source = self.save("one.pt", nn.Sequential(collections.OrderedDict(x=nn.Linear(4, 4))).state_dict())
        lines, proc = self.refused(source, self.reference(target))
        self.assertIn("prefix 'a.' added", proc.stderr)
        self.assertIn("prefix 'b.' added", proc.stderr)
        with self.subTest("renames are one-to-one"):
            source = self.save("two.pt", collections.OrderedDict([("x.weight", torch.ones(4, 4)),
                                                                  ("y.weight", torch.ones(4, 4))]))
            lines, proc = self.refused(source, self.reference(target), "--rename", "^[xy]=a.x")
            self.assertIn("'x.weight' and 'y.weight' both 'a.x.weight'", proc.stderr)

    def test_missing_unexpected_and_mismatch_in_torchs_words(self):
        model = seeded(Net)
        sd = model.state_dict()
        cases = {
            "missing": lambda d: d.pop("head.bias"),
            "unexpected": lambda d: d.__setitem__("extra.weight", torch.ones(2)),
            "size mismatch": lambda d: d.__setitem__("head.weight", torch.ones(9, 7)),
            "all three": lambda d: (d.pop("features.0.norm.bias"), d.__setitem__("head.weight", torch.ones(9, 7)),
                                    d.__setitem__("zzz", torch.ones(1)), d.__setitem__("features.9.w", torch.ones(1))),
        }
        for name, damage in cases.items():
            with self.subTest(name):
                bad = collections.OrderedDict(sd)
                damage(bad)
                source = self.save("bad.pt", bad)
                lines, _ = self.refused(source, self.reference(seeded(Net)))
                self.assertEqual([without_way_out(l) for l in lines], torch_lines(seeded(Net), bad))
                # ... and check --like says exactly what torch says, then the fix.
                proc = support.run("check", "--like", self.reference(seeded(Net)), source, "--json", *JUDGE_TORCH, check=1)
                doc = json.loads(proc.stdout)["inputs"][0]
                self.assertEqual(doc["load_state_dict"]["lines"], torch_lines(seeded(Net), bad))
                self.assertIn("ckptfix fix --like", proc.stderr)

    # --- check --like -------------------------------------------------------

    def test_check_names_exactly_torchs_keys(self):
        model = seeded(Net)
        sd = model.state_dict()
        ref = self.reference(seeded(Net))
        files = {
            "loads": sd,
            "data parallel": nn.DataParallel(model).state_dict(),
            "missing num_batches_tracked (version 2 in _metadata)": collections.OrderedDict(
                (k, v) for k, v in sd.items() if not k.endswith("num_batches_tracked")),
            "a key below a parameter (1.13 passes it by, 2.x does not)": collections.OrderedDict(
                list(sd.items()) + [("head.weight.x", torch.ones(1))]),
            "a key naming a module (1.13 passes it by, 2.x does not)": collections.OrderedDict(
                list(sd.items()) + [("head", torch.ones(1))]),
            "an extra state of a module without one (unexpected)": collections.OrderedDict(
                list(sd.items()) + [("head._extra_state", torch.ones(1))]),
            "a 1-element tensor for a 0-dim one": collections.OrderedDict(
                (k, v.reshape(1) if v.dim() == 0 else v) for k, v in sd.items()),
            "keys in another order, and unexpected ones at several depths": collections.OrderedDict(
                [("features.2.conv.zz", torch.ones(1)), ("zz", torch.ones(1))] + list(reversed(list(sd.items()))) +
                [("features.0.bn.zz", torch.ones(1)), ("head.zz", torch.ones(1))]),
        }
        no_metadata = dict(sd)  # a plain dict: no _metadata, so BatchNorm makes num_batches_tracked
        for k in [k for k in no_metadata if k.endswith("num_batches_tracked")]:
            del no_metadata[k]
        files["missing num_batches_tracked, no _metadata"] = no_metadata
        for name, state_dict in files.items():
            with self.subTest(name):
                source = self.save("check.pt", state_dict)
                expected = torch_lines(seeded(Net), torch.load(source))
                proc = support.run("check", "--like", ref, source, "--json", *JUDGE_TORCH, check=1 if expected else 0)
                doc = json.loads(proc.stdout)["inputs"][0]
                self.assertEqual(doc["load_state_dict"]["lines"], expected)
                self.assertEqual(doc["load_state_dict"]["loads"], not expected)
                text = support.run("check", "--like", ref, source, *JUDGE_TORCH, check=1 if expected else 0).stdout
                for line in expected:
                    self.assertIn(line, text)

    def test_check_unexpected_keys_under_a_module_without_state(self):
        """features.1 is a ReLU: no key names it, so only the set of keys can be torch's."""
        sd = collections.OrderedDict(seeded(Net).state_dict())
        sd["features.1.stray"] = torch.ones(1)
        sd["head.stray"] = torch.ones(1)
        source = self.save("stray.pt", sd)
        proc = support.run("check", "--like", self.reference(seeded(Net)), source, "--json", *JUDGE_TORCH, check=1)
        ours = json.loads(proc.stdout)["inputs"][0]["load_state_dict"]["lines"]
        theirs = torch_lines(seeded(Net), torch.load(source))
        self.assertEqual(len(ours), len(theirs))
        self.assertEqual(sorted(ours[0].split(": ", 1)[1].rstrip(".").split(", ")),
                         sorted(theirs[0].split(": ", 1)[1].rstrip(".").split(", ")))

    # --- the forms of the reference -----------------------------------------

    def test_every_reference_form(self):
        model = seeded(Net)
        source = self.save("dp.pt", nn.DataParallel(model).state_dict())
        forms = ["checkpoint", "json"] + (["meta"] if HAS_META_SAVE else [])
        for form in forms:
            with self.subTest(form):
                out, _ = self.fix(source, self.reference(seeded(Net), form))
                self.assert_fits(out, seeded(Net), model.state_dict())
        with self.subTest("--like-key: the reference inside a training checkpoint"):
            ref = self.save("ref.ckpt", {"epoch": 1, "state_dict": seeded(Net).state_dict()})
            out, _ = self.fix(source, ref, "--like-key", "state_dict")
            self.assert_fits(out, seeded(Net), model.state_dict())
        if HAS_META_SAVE:
            with self.subTest("inspect counts a meta state dict's tensors"):
                doc = json.loads(support.run("inspect", "--json", self.reference(seeded(Net), "meta"), check=0).stdout)
                self.assertEqual(len(doc["tensors"]), len(model.state_dict()))

    def test_hostile_keys_end_in_bounded_time(self):
        """Keys that once hung the fit (found in review): a key starting with '.' and a module's
        _metadata renamed beside a dropped key; a key of 20,000 wrapper segments."""
        ref = self.path("ref.json")
        with open(ref, "w") as f:
            json.dump({"ln.weight": {"shape": [2]}, "fc.weight": {"shape": [3]}}, f)
        sd = collections.OrderedDict([(".ln.gamma", torch.ones(2)), ("fc.weight", torch.ones(3)),
                                      ("zz", torch.ones(1))])
        sd._metadata = collections.OrderedDict([("", {"version": 1}), (".ln", {"version": 1}), (".", {"version": 1})])
        source = self.save("dots.pt", sd)
        out = self.path("dots.out.pt")
        began = time.monotonic()
        support.run("fix", "--like", ref, source, "-o", out, "--drop-unexpected", "--allow-missing", "-f", check=0)
        self.assertLess(time.monotonic() - began, 20)
        deep = collections.OrderedDict([("module." * 20000 + "fc.weight", torch.ones(3)), ("ln.weight", torch.ones(2))])
        deep._metadata = collections.OrderedDict([("module." * 19999 + "module", {"version": 1})])
        source = self.save("deep.pt", deep)
        began = time.monotonic()
        support.run("fix", "--like", ref, source, "-o", out, "-f", check=0)
        self.assertLess(time.monotonic() - began, 20)
        loaded = torch.load(out)
        self.assertEqual(list(loaded), ["ln.weight", "fc.weight"])

    def test_several_state_dicts_that_fit_alike_are_refused(self):
        model = seeded(Net)
        sd = model.state_dict()
        ema = collections.OrderedDict((k, v + 1 if v.is_floating_point() else v) for k, v in sd.items())
        source = self.save("timm.pth", {"state_dict": sd, "state_dict_ema": ema, "epoch": 4})
        lines, proc = self.refused(source, self.reference(seeded(Net)))
        self.assertIn("'state_dict', 'state_dict_ema'", proc.stderr)
        out, _ = self.fix(source, self.reference(seeded(Net)), "--key", "state_dict_ema")
        self.assert_fits(out, seeded(Net), ema)

    def test_dtype_like_casts_to_the_models_types(self):
        model = seeded(Net)
        sd = model.state_dict()
        source = self.save("fp32.pt", nn.DataParallel(model).state_dict())
        target = seeded(Net).to(torch.bfloat16)
        out, proc = self.fix(source, self.reference(target), "--dtype", "like")
        expected = collections.OrderedDict((k, v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in sd.items())
        self.assert_fits(out, target, expected)
        self.assertEqual(json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]["tensors_cast"],
                         sum(v.is_floating_point() for v in sd.values()))

    def test_a_file_that_fits_is_left_alone(self):
        source = self.save("fits.pt", seeded(Net).state_dict())
        before = support.sha256(source)
        proc = support.run("fix", "--like", self.reference(seeded(Net)), source, "--in-place", check=0)
        self.assertIn("fits", proc.stderr)
        self.assertEqual(support.sha256(source), before)

    # --- Python -------------------------------------------------------------

    def test_python_load_like(self):
        model = seeded(Net)
        source = self.save("dp.pt", nn.DataParallel(model).state_dict())
        with self.subTest("an nn.Module"):
            target = seeded(Net)
            sd = ckptfix.load(source, like=target)
            self.assertEqual(list(sd), list(target.state_dict()))
            target.load_state_dict(sd)
            for k, v in model.state_dict().items():
                self.assertTrue(torch.equal(target.state_dict()[k], v), k)
        with self.subTest("a mapping of tensors"):
            mapping = {k: torch.empty(v.shape, dtype=v.dtype) for k, v in model.state_dict().items()}
            self.assertEqual(list(ckptfix.load(source, like=mapping)), list(mapping))
        with self.subTest("a refusal raises torch's lines"):
            bad = collections.OrderedDict(model.state_dict())
            bad["head.weight"] = torch.ones(9, 7)
            del bad["head.bias"]
            path = self.save("bad.pt", bad)
            with self.assertRaises(ckptfix.CheckpointError) as raised:
                ckptfix.load(path, like=seeded(Net))
            message = str(raised.exception).split("\n")
            self.assertIn("'Net'", message[0])
            self.assertEqual([without_way_out(l) for l in message[1:]], torch_lines(seeded(Net), bad))
            self.assertIn("allow_missing=True", str(raised.exception))
            sd = ckptfix.load(path, like=seeded(Net), allow_missing=True, drop_mismatched=True)
            self.assertEqual(torch_lines(seeded(Net), sd),
                             ['Missing key(s) in state_dict: "head.weight", "head.bias".'])

    # --- torchvision's real architectures (where the judge has torchvision) --

    @unittest.skipIf(torchvision is None, "this judge has no torchvision (scripts/models-check.sh runs the one that has)")
    def test_torchvision_densenet_legacy_keys(self):
        import re
        torch.manual_seed(0)
        model = torchvision.models.densenet121()
        sd = model.state_dict()
        # The keys as torchvision's pre-0.3 checkpoints have them, which its
        # _load_state_dict rewrites with this very pattern.
        legacy_pattern = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))((?:[12])\.(?:weight|bias|running_mean|running_var))$")
        legacy = self.renamed(sd, lambda k: legacy_pattern.sub(r"\1.\2", k))
        self.assertIn("features.denseblock1.denselayer1.norm.1.weight", legacy)
        source = self.save("densenet-legacy.pth", legacy)
        out, _ = self.fix(source, self.reference(torchvision.models.densenet121(), "meta" if HAS_META_SAVE else "checkpoint"))
        self.assert_fits(out, torchvision.models.densenet121(), sd)

    @unittest.skipIf(torchvision is None, "this judge has no torchvision (scripts/models-check.sh runs the one that has)")
    def test_torchvision_resnet_into_a_detection_backbone(self):
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
        torch.manual_seed(0)
        resnet = torchvision.models.resnet18()
        source = self.save("resnet18-dp.pth", nn.DataParallel(resnet).state_dict())
        target = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)
        out, proc = self.fix(source, self.reference(target), "--allow-missing", "--drop-unexpected")
        loaded = torch.load(out, weights_only=True)
        result = target.load_state_dict(loaded, strict=False)
        self.assertEqual(result.unexpected_keys, [])
        self.assertTrue(all(k.startswith("fpn.") for k in result.missing_keys), result.missing_keys)
        for k, v in resnet.state_dict().items():
            if k.startswith("fc.") or k.endswith("num_batches_tracked"):
                continue
            self.assertTrue(torch.equal(target.state_dict()["body." + k], v), k)
        fit = json.loads(proc.stdout)["inputs"][0]["changes"]["fit"]
        rules = {d["rule"] for d in fit["dropped"]}
        self.assertIn("num_batches_tracked, which the model has not", rules)


if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
