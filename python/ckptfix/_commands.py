"""ckptfix's commands as functions: each runs the binary with --json and
returns its JSON report as a dict (the same document the command prints;
docs/cli.md describes every field)."""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ._arguments import dtype_name, like_flags
from ._binary import check_input, flag_list, run_json

Path = Union[str, "os.PathLike[str]"]
Report = Dict[str, Any]


def _paths(paths: Union[Path, Sequence[Path]], *, recursive: bool = False) -> list:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return [check_input(os.fspath(p), recursive=recursive) for p in paths]


def _src(path: Path) -> str:
    return check_input(os.fspath(path))


def _write_flags(dst: Path, *, force: bool, verify: bool, allow_globals: Sequence[str],
                 torch: Optional[str], threads: Optional[int]) -> list:
    args = ["-o", os.fspath(dst), "--json"]
    if threads is not None:
        args += ["--threads", str(int(threads))]
    if force:
        args.append("--force")
    if not verify:
        args.append("--no-verify")
    if torch:
        args += ["--torch", str(torch)]
    return args + flag_list("--allow-global", allow_globals)


def inspect(path: Path, *, torch: Optional[str] = None, stats: bool = False) -> Report:
    """`ckptfix inspect --json`: format, tensors, state dicts, globals (with
    what loading does with each), and whether each torch release's default
    torch.load would load the file. Reads no tensor byte unless `stats`."""
    args = ["inspect", "--json", _src(path)]
    if torch:
        args += ["--torch", str(torch)]
    if stats:
        args.append("--stats")
    return run_json(args)


def check(paths: Union[Path, Sequence[Path]], *, recursive: bool = False, glob: Sequence[str] = (),
          torch: Optional[Union[str, Sequence[str]]] = None, allow_globals: Sequence[str] = (),
          device: Optional[str] = None, no_prefix: Sequence[str] = (), dtypes: Optional[Sequence[str]] = None,
          crc: bool = True, finite: bool = False, key: Sequence[str] = (), like: Any = None,
          like_key: Optional[str] = None) -> Report:
    """`ckptfix check --json`: the CI gate's rules. Returns the report; an
    input with violations, or one that does not open, has status "failed"
    and its `violations` (that is the gate failing, not an error).
    `recursive`: every checkpoint under directories given (a directory
    with none fails); `glob`: the file names it takes (default *.pt, *.pth,
    *.bin, *.ckpt). `crc`: read every record's CRC-32 (the default).
    `like`: the model (an nn.Module, a mapping of tensors, or a reference
    file: a checkpoint, a meta-device state dict or a JSON file) whose
    load_state_dict(strict=True) must accept the state dict as it is; the
    report's `load_state_dict` says what torch would say. `dtypes` take
    torch.dtype values or names ("bf16", "bfloat16").
    Raises CheckpointError when the command itself cannot run (a usage
    error), FileNotFoundError for a path that names nothing."""
    args = ["check", "--json", *_paths(paths, recursive=recursive)]
    if recursive:
        args.append("--recursive")
    args += flag_list("--glob", glob)
    if torch:
        args += ["--torch", torch if isinstance(torch, str) else ",".join(torch)]
    if device:
        args += ["--device", device]
    if dtypes:
        args += ["--dtype", ",".join(dtype_name(d, "dtypes") for d in dtypes)]
    if not crc:
        args.append("--no-crc")
    if finite:
        args.append("--finite")
    args += flag_list("--allow-global", allow_globals) + flag_list("--no-prefix", no_prefix) + flag_list("--key", key)
    if like_key:
        args += ["--like-key", like_key]
    with tempfile.TemporaryDirectory(prefix="ckptfix-check-") as stage:
        if like is not None:
            args += like_flags(like, stage)
        return run_json(args, failed_inputs_are_errors=False)


def fix(src: Path, dst: Path, *, strip_prefix: Union[None, bool, str] = None, auto_prefix: bool = False,
        add_prefix: Optional[str] = None, to: Optional[str] = None, map: Optional[Mapping[str, str]] = None,
        dtype: Any = None, cast_from: Sequence[Any] = (), keep: Sequence[str] = (),
        key: Sequence[str] = (), weights_only: bool = False, drop_unknown: bool = False,
        allow_globals: Sequence[str] = (), torch: Optional[str] = None, force: bool = False,
        verify: bool = True, like: Any = None, like_key: Optional[str] = None,
        rename: Union[Mapping[str, str], Sequence[Sequence[str]]] = (), drop: Sequence[str] = (),
        allow_missing: bool = False, drop_unexpected: bool = False, drop_mismatched: bool = False,
        threads: Optional[int] = None) -> Report:
    """`ckptfix fix`: several passes in one read and write (strip, then
    add a prefix, then retag devices, then cast), verified, written
    atomically. `strip_prefix`: True strips "module.", a str that prefix;
    `to`: every storage's device tag ("cpu"); `map`: {"cuda:3": "cuda:0"};
    `dtype`: "bf16", "fp16", "float8_e4m3fn", ... or a torch.dtype; `keep`: key globs left as
    they are. Raises CheckpointError naming the problem (nothing is written
    then), e.g. when the pickle would call a global ckptfix does not know
    as data (see `allow_globals` and `weights_only`).
    `like`: the model (an nn.Module, a mapping of tensors, or a reference
    file: a checkpoint, a meta-device state dict, a JSON file) the state
    dict is fitted to instead of the prefix
    options (docs/cli.md, "fix --like"); `rename`: {regex: replacement}
    applied first, in order (Python's re.sub syntax); `drop`: key globs left
    out; `dtype="like"` casts to the model's types. A state dict that does
    not fit raises CheckpointError with torch's own lines."""
    args = ["fix", _src(src)]
    if like_key:
        args += ["--like-key", like_key]
    pairs = rename.items() if isinstance(rename, Mapping) else rename
    for pattern, replacement in pairs:
        # '=' ends the pattern on the command line: one in it is escaped, as Python's re reads "\\=" too.
        escaped = re.sub(r"(\\.)|=", lambda m: m.group(1) or "\\=", pattern)
        args += ["--rename", escaped + "=" + replacement]
    args += flag_list("--drop", drop)
    args += ["--allow-missing"] * allow_missing + ["--drop-unexpected"] * drop_unexpected
    args += ["--drop-mismatched"] * drop_mismatched
    if strip_prefix is True:
        args.append("--strip-prefix")
    elif strip_prefix:
        args.append("--strip-prefix=" + strip_prefix)
    if auto_prefix:
        args.append("--auto-prefix")
    if add_prefix:
        args += ["--add-prefix", add_prefix]
    if to:
        args += ["--to", to]
    for frm, tgt in (map or {}).items():
        args += ["--map", "{}={}".format(frm, tgt)]
    if dtype is not None:
        args += ["--dtype", dtype if dtype == "like" else dtype_name(dtype, "dtype")]
    if cast_from:
        args += ["--from", ",".join(dtype_name(d, "cast_from") for d in cast_from)]
    args += flag_list("--keep", keep) + flag_list("--key", key)
    if weights_only:
        args.append("--weights-only")
    if drop_unknown:
        args.append("--drop-unknown")
    args += _write_flags(dst, force=force, verify=verify, allow_globals=allow_globals, torch=torch, threads=threads)
    with tempfile.TemporaryDirectory(prefix="ckptfix-fix-") as stage:
        if like is not None:
            args += like_flags(like, stage)
        return run_json(args)


def convert(src: Path, dst: Path, *, extract: Optional[str] = None, key: Optional[str] = None,
            for_libtorch: bool = False, weights_only: bool = False, drop_unknown: bool = False,
            format: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None, drop_aliases: bool = False,
            max_shard_size: Optional[str] = None, allow_globals: Sequence[str] = (), torch: Optional[str] = None,
            tag: Optional[str] = None, force: bool = False, verify: bool = True,
            threads: Optional[int] = None) -> Report:
    """`ckptfix convert`: re-write as a torch zip file, or as safetensors
    (by `format` or dst's extension; `max_shard_size` writes a Hugging Face
    shard set), or with format="dcp" as a torch.distributed.checkpoint
    directory dst, from any format ckptfix reads (legacy, safetensors, shard
    sets, distributed checkpoints, DeepSpeed ZeRO directories: `tag` reads
    another tag than their `latest` names). `extract`: keep only the value
    at this path ("state_dict")."""
    args = ["convert", _src(src)]
    if tag:
        args += ["--tag", tag]
    if extract:
        args += ["--extract", extract]
    if key:
        args += ["--key", key]
    if for_libtorch:
        args.append("--for-libtorch")
    if weights_only:
        args.append("--weights-only")
    if drop_unknown:
        args.append("--drop-unknown")
    if format:
        args += ["--format", format]
    for k, v in (metadata or {}).items():
        args += ["--metadata", "{}={}".format(k, v)]
    if drop_aliases:
        args.append("--drop-aliases")
    if max_shard_size:
        args += ["--max-shard-size", str(max_shard_size)]
    return run_json(args + _write_flags(dst, force=force, verify=verify, allow_globals=allow_globals, torch=torch,
                                       threads=threads))


def weights_only(src: Path, dst: Path, *, drop_unknown: bool = False, torch: Optional[str] = None,
                 force: bool = False, verify: bool = True, threads: Optional[int] = None) -> Report:
    """`ckptfix weights-only`: rewrite what torch's default load
    (weights_only=True) refuses into the plain data it stands for (numpy
    values, Namespaces, configs, pickled modules -> their state_dict())."""
    args = ["weights-only", _src(src)]
    if drop_unknown:
        args.append("--drop-unknown")
    return run_json(args + _write_flags(dst, force=force, verify=verify, allow_globals=(), torch=torch,
                                       threads=threads))


def salvage(src: Path, dst: Path, *, require_complete: bool = False, keep_partial_optimizer: bool = False,
            force: bool = False) -> Report:
    """`ckptfix salvage`: what a damaged checkpoint (cut, "failed finding
    central directory", a flipped byte) still holds, every kept tensor
    complete and CRC-checked; the report names each tensor lost and why,
    and each optimizer whose per-parameter state lost tensors, whose whole
    state is then dropped unless `keep_partial_optimizer`."""
    args = ["salvage", _src(src), "-o", os.fspath(dst), "--json"]
    if require_complete:
        args.append("--require-complete")
    if keep_partial_optimizer:
        args.append("--keep-partial-optimizer")
    if force:
        args.append("--force")
    return run_json(args)
