#!/usr/bin/python3
"""A DeepSpeed ZeRO stage 2 checkpoint made by torch alone, for tests and
bench/zero_speed.py: the layout real DeepSpeed writes (fixtures/torch2.14/zero/,
docs/format.md "DeepSpeed ZeRO checkpoints"), at any size and rank count.

DeepSpeed's ZeroStageEnum is pickled by reference through a stand-in module
of the same name, the way this Python pickles an enum member: Python 3.11
writes getattr(ZeroStageEnum, 'gradients'), other versions ZeroStageEnum(2).
fp32 training: the model states hold the whole module; each rank's optimizer
file its partition of the flat master weights (the group padded to 2 × ranks
elements, the last rank's partition short by the padding, as DeepSpeed's
stage 2 saves it) and its Adam moments.

    python3 zero_synthetic.py OUT RANKS ELEMENTS   # OUT/latest, OUT/global_step1/...
"""
import collections
import enum
import os
import sys
import types


def stand_in_enum():
    module = sys.modules.get("deepspeed.runtime.zero.config")
    if module is not None:
        return module.ZeroStageEnum
    module = types.ModuleType("deepspeed.runtime.zero.config")

    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3

    ZeroStageEnum.__module__ = module.__name__
    ZeroStageEnum.__qualname__ = "ZeroStageEnum"
    module.ZeroStageEnum = ZeroStageEnum
    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.zero"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[module.__name__] = module
    return ZeroStageEnum


def make(out, ranks, elements, parameters=64):
    """Writes the checkpoint; returns (names, sizes, the flat fp32 weights)."""
    import torch
    zero_stage = stand_in_enum()
    g = torch.Generator().manual_seed(0)
    sizes = [max(1, elements // parameters + (i % 7) * 13 - 39) for i in range(parameters)]
    sizes[-1] += elements - sum(sizes)
    if sizes[-1] < 1:
        raise SystemExit(f"{elements} elements are too few for {parameters} parameters")
    names = [f"layers.{i}.weight" for i in range(parameters)]
    flat = torch.randn(elements, generator=g)
    align = 2 * ranks
    padded = (elements + align - 1) // align * align
    per_rank = padded // ranks
    tag = os.path.join(out, "global_step1")
    os.makedirs(tag)
    with open(os.path.join(out, "latest"), "w") as f:
        f.write("global_step1")
    module = collections.OrderedDict()
    at = 0
    for n, s in zip(names, sizes):
        module[n] = flat[at:at + s].clone()
        at += s
    torch.save({"module": module, "buffer_names": [], "optimizer": None,
                "param_shapes": [collections.OrderedDict((n, torch.Size([s])) for n, s in zip(names, sizes))],
                "frozen_param_shapes": None, "shared_params": {}, "frozen_param_fragments": None,
                "dp_world_size": ranks, "mp_world_size": 1, "ds_version": "0.16.5"},
               os.path.join(tag, "mp_rank_00_model_states.pt"))
    del module
    for r in range(ranks):
        part = flat[r * per_rank:min((r + 1) * per_rank, elements)].clone()
        state = {"step": torch.tensor(1.0), "exp_avg": torch.randn(part.numel(), generator=g),
                 "exp_avg_sq": torch.rand(part.numel(), generator=g)}
        torch.save({"optimizer_state_dict": {
            "zero_stage": zero_stage.gradients, "partition_count": [ranks],
            "group_paddings": [padded - elements if r == ranks - 1 else 0],
            "single_partition_of_fp32_groups": [part],
            "base_optimizer_state": {"state": {0: state}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
            "ds_version": "0.16.5"}, "ds_version": "0.16.5"},
            os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    return names, sizes, flat


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
