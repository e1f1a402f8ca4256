"""The package's one exception."""
from __future__ import annotations

from typing import Any, Dict, Optional


class CheckpointError(Exception):
    """A checkpoint ckptfix cannot read, or will not write: damaged,
    unsupported, dangerous (a pickle that would run code), or an I/O error.

    str(error) is the ckptfix command line's one-line message, e.g.
    "'model.pt': archive/data.pkl+0x2: refusing to load: the pickle references
    the dangerous global 'posix.system', which would run code or touch files
    when loaded".
    """

    def __init__(self, message: str, *, exit_code: int = 1, kind: Optional[str] = None,
                 report: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        #: The exit status of the ckptfix command (1: the input failed, 2: usage).
        self.exit_code = exit_code
        #: The error's kind when the JSON report gave one ("corrupt", "unsafe", ...).
        self.kind = kind
        #: The whole JSON report, when the command printed one.
        self.report = report
