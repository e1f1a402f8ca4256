#!/usr/bin/python3
"""Models pickled whole, torch.save(model), judged by real torch (issue 23).

The models of whole_models.py are built like the real architectures (BERT,
Whisper, ViT, ConvNeXt, Llama, T5): their pickles hold functions as values
(torch._C._nn.gelu, torch.nn.functional.relu and silu) and functools.partial
objects binding a layer's constructor. Unpickling calls none of them, so
ckptfix must treat them as data. For each model, saved here by this judge's
torch:

  * `inspect` and `inspect --json` show the file, naming the functions as
    functions held as values (kind "function"), and `check` reports them
    as outside torch's weights_only allowlist, not as gadgets;
  * `convert` round-trips it: torch.load(weights_only=False) of the output
    gives a module whose state_dict equals the original's, whose function
    attributes are the same functions and partials (func, args, keywords),
    and whose forward output is equal;
  * `weights-only` gives a state dict that the default torch.load loads
    (torch >= 2.6: weights_only=True), that load_state_dict(strict=True)
    accepts into a fresh model, and that gives an equal forward output.

Before issue 23 ckptfix refused every one of these files ("the pickle
references the dangerous global 'torch._C._nn.gelu'").
"""
import functools
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import support  # noqa: E402
import torch  # noqa: E402
import whole_models  # noqa: E402

TORCH = support.torch_version()
FUNCTIONS = {"torch._C._nn.gelu", "torch.nn.functional.relu", "torch.nn.functional.silu"}


def functions_held(model):
    """{module path.attribute: value} of every function or partial a module keeps in its __dict__."""
    out = {}
    for name, m in model.named_modules():
        for attr, value in vars(m).items():
            if callable(value) and not isinstance(value, (torch.nn.Module, type)):
                out[f"{name}.{attr}"] = value
    return out


def same_callable(a, b):
    if isinstance(a, functools.partial) or isinstance(b, functools.partial):
        return (type(a) is type(b) and same_callable(a.func, b.func) and a.args == b.args and
                a.keywords == b.keywords)
    return a is b


class WholeModelTest(support.ScratchDirTest):
    prefix = "ckptfix-whole-models-"

    def saved(self, name):
        model = whole_models.build(name)
        path = self.path(f"{name}.pt")
        torch.save(model, path)
        return model, path

    def forward(self, model, name):
        with torch.no_grad():
            return model(whole_models.build(name).example())

    def check_model(self, name):
        model, path = self.saved(name)
        before = support.sha256(path)
        held = functions_held(model)

        # inspect: shows the file; the functions are functions, not gadgets.
        text = support.run("inspect", path, check=0).stdout
        report = json.loads(support.run("inspect", "--json", path, check=0).stdout)
        kinds = {g["name"]: g["kind"] for g in report["inputs"][0]["globals"]}
        for function in FUNCTIONS & set(kinds):
            self.assertEqual(kinds[function], "function", f"{name}: {function}")
            self.assertIn(f"{function}  (a function held as a value, never called)", text)
        self.assertNotIn("gadget", set(kinds.values()), kinds)
        check = support.run("check", path, check=1)
        self.assertNotIn("gadget", check.stdout + check.stderr)

        # convert: the same module, functions and partials included.
        out = self.path(f"{name}.converted.pt")
        support.run("convert", path, "-o", out, check=0)
        back = torch.load(out, weights_only=False)
        self.assertIs(type(back), type(model))
        self.assertEqual(list(back.state_dict()), list(model.state_dict()))
        for key, t in model.state_dict().items():
            self.assertTrue(torch.equal(back.state_dict()[key], t), f"{name}: {key}")
        back_held = functions_held(back)
        self.assertEqual(set(back_held), set(held))
        for attr, value in held.items():
            self.assertTrue(same_callable(back_held[attr], value), f"{name}: {attr}: {back_held[attr]!r} vs {value!r}")
        self.assertTrue(torch.equal(self.forward(back.eval(), name), self.forward(model, name)))

        # weights-only: a state dict the default load takes, strict, same outputs.
        wo = self.path(f"{name}.weights.pt")
        support.run("weights-only", path, "-o", wo, check=0)
        state = torch.load(wo) if TORCH >= (2, 6) else torch.load(wo, weights_only=True)
        fresh = whole_models.MODELS[name]()
        fresh.load_state_dict(state, strict=True)
        self.assertTrue(torch.equal(self.forward(fresh.eval(), name), self.forward(model, name)))
        self.assertEqual(support.sha256(path), before, "the input changed")


def _add_tests():
    for name in whole_models.MODELS:
        setattr(WholeModelTest, f"test_{name}", lambda self, n=name: self.check_model(n))


_add_tests()

if __name__ == "__main__":
    unittest.main(argv=support.parse_args())
