"""The package's exceptions: CheckpointError, and its two that are also the
OSErrors Python programs already catch for a path that is not a file."""
from __future__ import annotations

import errno
from typing import Any, Dict, Optional


class CheckpointError(Exception):
    """A checkpoint ckptfix cannot read, or will not write: damaged,
    unsupported, dangerous (a pickle that would run code), or an I/O error.

    str(error) is the ckptfix command line's one-line message, naming this
    package's arguments where it names an option (force=True, key), e.g.
    "'model.pt': archive/data.pkl+0x2: refusing to load: the pickle references
    the dangerous global 'posix.system', which would run code or touch files
    when loaded".
    """

    def __init__(self, message: str, *, exit_code: int = 1, kind: Optional[str] = None,
                 report: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        #: The exit status of the ckptfix command (1: the input failed, 2: usage).
        self.exit_code = exit_code
        #: The error's kind, as the command line's JSON reports name it: "io",
        #: "not-checkpoint", "unsupported", "corrupt", "unsafe",
        #: "invalid-argument", "conflict", "exists", "verification", "gpu",
        #: "limit" or "internal"; None only when ckptfix itself could not run.
        self.kind = kind
        #: The whole JSON report, when the command printed one.
        self.report = report


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A path that names nothing: a FileNotFoundError (errno ENOENT,
    `filename`) and a CheckpointError (kind "io")."""

    def __init__(self, path: str) -> None:
        FileNotFoundError.__init__(self, errno.ENOENT, "no such checkpoint", path)
        self.exit_code = 1
        self.kind = "io"
        self.report = None


class CheckpointIsADirectoryError(CheckpointError, IsADirectoryError):
    """A directory where a checkpoint file was expected (not a distributed
    checkpoint, whose directory holds `.metadata`): an IsADirectoryError
    (errno EISDIR) and a CheckpointError (kind "not-checkpoint")."""

    def __init__(self, path: str, message: str) -> None:
        IsADirectoryError.__init__(self, errno.EISDIR, message, path)
        self.exit_code = 1
        self.kind = "not-checkpoint"
        self.report = None
