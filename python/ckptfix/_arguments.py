"""Arguments the functions take in both spellings: the CLI's ("bf16", a
reference file) and torch's (torch.bfloat16, an nn.Module), so that code
moving between `ckptfix fix` and `ckptfix.fix`/`ckptfix.load` says the same
thing either way (issue 67). A value of the wrong type is a TypeError naming
the argument."""
from __future__ import annotations

import os
from typing import Any, List

# The CLI's short names (src/dtype.cc, parse_dtype) and their torch names.
SHORT_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
                "fp8_e4m3": "float8_e4m3fn", "fp8_e4m3fn": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
                "half": "float16", "float": "float32", "double": "float64"}


def dtype_name(value: Any, argument: str) -> str:
    """torch's name of a dtype given as a torch.dtype, its name ("bfloat16",
    "torch.bfloat16") or the CLI's ("bf16")."""
    if isinstance(value, str):
        name = value[len("torch."):] if value.startswith("torch.") else value
        return SHORT_DTYPES.get(name, name)
    if type(value).__name__ == "dtype" and type(value).__module__ == "torch":
        return str(value)[len("torch."):]
    raise TypeError("{} takes a torch.dtype or its name ('bf16', 'bfloat16'), not {}".format(
        argument, type(value).__name__))


def like_flags(like: Any, stage: str) -> List[str]:
    """A model reference as the CLI's --like takes it: a path as it is; an
    nn.Module or a mapping of tensors written as the JSON reference into
    `stage` (a directory the caller removes), and named in messages by its
    class ("the model" for a mapping), never by that file."""
    if isinstance(like, (str, os.PathLike)):
        return ["--like", os.fspath(like)]
    from ._load import write_reference  # noqa: PLC0415 (torch is imported only when a module is given)
    import torch  # noqa: PLC0415
    path = os.path.join(stage, "like.json")
    write_reference(like, torch, path)
    name = type(like).__name__ if isinstance(like, torch.nn.Module) else "the model"
    return ["--like", path, "--like-name", name]
