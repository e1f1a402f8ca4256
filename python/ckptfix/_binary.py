"""The ckptfix executable this package drives, and running it.

Everything the package does goes through the `ckptfix` binary installed
beside it (the wheel puts it in the environment's bin/): the package is
pure Python, compiled against neither Python nor torch, so one wheel serves
every CPython from 3.9 and every torch from 1.13 (docs/python.md, "How it
works").
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

from ._errors import CheckpointError, CheckpointIsADirectoryError, CheckpointNotFoundError

_ERROR_PREFIX = "ckptfix: error: "


def executable() -> str:
    """The path of the ckptfix binary this package runs.

    `CKPTFIX_BIN` when set; else the one installed with this package (beside
    the interpreter, in the environment's bin/); else `ckptfix` on PATH.
    Raises FileNotFoundError when there is none.
    """
    explicit = os.environ.get("CKPTFIX_BIN")
    if explicit:
        return explicit
    for directory in (os.path.dirname(sys.executable), os.path.join(sys.prefix, "bin")):
        candidate = os.path.join(directory, "ckptfix")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("ckptfix")
    if found:
        return found
    raise FileNotFoundError(
        "the ckptfix executable was not found: install the ckptfix wheel (it puts ckptfix beside this "
        "Python), put ckptfix on PATH, or set CKPTFIX_BIN")


def _first_error_line(stderr: str) -> Optional[str]:
    for line in stderr.splitlines():
        if line.startswith(_ERROR_PREFIX):
            return line[len(_ERROR_PREFIX):]
    return None


def check_input(path: str, *, recursive: bool = False) -> str:
    """`path` as given, if it names a checkpoint the commands can read: a
    file, a distributed checkpoint's directory, or with `recursive` any
    directory. Raises CheckpointNotFoundError (a FileNotFoundError) when it
    names nothing, CheckpointIsADirectoryError (an IsADirectoryError) for
    another directory."""
    if not os.path.exists(path):
        raise CheckpointNotFoundError(path)
    if os.path.isdir(path) and not recursive and not os.path.isfile(os.path.join(path, ".metadata")):
        raise CheckpointIsADirectoryError(
            path, "is a directory, not a checkpoint (nor a distributed checkpoint's, which holds .metadata); "
                  "recursive=True reads the checkpoints under it where the function takes it")
    return path


def run_json(args: Sequence[str], *, failed_inputs_are_errors: bool = True) -> Dict[str, Any]:
    """Runs `ckptfix ARGS` (which must print one JSON document) and returns
    the document. A run that fails (exit 1 or 2) raises CheckpointError with
    the CLI's error line; for a batch document, the first failed input's.
    With `failed_inputs_are_errors` False (check, whose failed inputs are
    the gate's verdict), a document with exit 1 is returned as it is."""
    # Messages then name this package's arguments (force=True), not flags (--force).
    env = dict(os.environ, CKPTFIX_OPTION_NAMES="python")
    proc = subprocess.run([executable(), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env)
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    doc: Optional[Dict[str, Any]] = None
    if stdout.strip():
        try:
            doc = json.loads(stdout)
        except ValueError:
            doc = None
    if doc is not None and (proc.returncode == 0 or (proc.returncode == 1 and not failed_inputs_are_errors)):
        return doc
    if proc.returncode not in (0, 1, 2):
        raise CheckpointError("ckptfix {} ended with exit status {}: {}".format(
            args[0] if args else "", proc.returncode, stderr.strip()[-2000:]), exit_code=proc.returncode)
    kind = None
    message = _first_error_line(stderr)
    if doc is not None:
        failed = [doc] if doc.get("status") == "failed" and doc.get("error") else []  # a one-input document (layout)
        failed += [e for e in doc.get("inputs", []) if e.get("status") == "failed" and e.get("error")]
        if failed:
            # With the lines that go with it (torch's own, for a state dict that does not fit a model).
            message = "\n".join([failed[0]["error"]] + list(failed[0].get("error_details") or []))
            kind = failed[0].get("error_kind")
    if message is None:
        message = stderr.strip() or "ckptfix {} failed (exit status {})".format(
            args[0] if args else "", proc.returncode)
    raise CheckpointError(message, exit_code=proc.returncode, kind=kind, report=doc)


def flag_list(flag: str, values: Optional[Sequence[str]]) -> List[str]:
    """[flag, v1, flag, v2, ...] for a repeatable option."""
    out: List[str] = []
    for v in values or ():
        out += [flag, str(v)]
    return out
