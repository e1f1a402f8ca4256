"""ckptfix for Python programs: load a checkpoint's state dict as tensors
without unpickling anything, and inspect, check, convert, repair and
salvage checkpoints.

    import ckptfix
    sd = ckptfix.load("ckpt.pt", key="state_dict", strip_prefix="module.")
    model.load_state_dict(sd)

The work is done by the ckptfix executable installed with this package
(the same binary as the command line): nothing here imports or calls what
a pickle names. See docs/python.md for every function and its torch.load
equivalent.
"""
from ._binary import executable
from ._commands import check, convert, fix, inspect, salvage, weights_only
from ._errors import CheckpointError, CheckpointIsADirectoryError, CheckpointNotFoundError
from ._load import load


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "unknown"
    try:
        return version("ckptfix")
    except PackageNotFoundError:  # run from a checkout
        return "unknown"


__version__ = _version()

__all__ = ["CheckpointError", "CheckpointIsADirectoryError", "CheckpointNotFoundError", "check", "convert", "executable", "fix", "inspect", "load", "salvage",
           "weights_only", "__version__"]
