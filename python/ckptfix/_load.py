"""ckptfix.load: a state dict as tensors of the caller's torch, with nothing
unpickled. `ckptfix layout` (the binary's reader) says where each tensor's
bytes are; this module maps those files and has torch wrap the bytes."""
from __future__ import annotations

import collections
import ctypes
import io
import mmap as mmap_module
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Union

from ._arguments import dtype_name, like_flags
from ._binary import check_input, run_json
from ._errors import CheckpointError

if TYPE_CHECKING:  # torch is the caller's; it is imported when load() runs
    import torch

#: Bytes of each of the two staging buffers a copy onto a GPU goes through.
STAGING_BYTES = 64 << 20

MapLocation = Union[None, str, "torch.device", Mapping[str, Union[str, "torch.device"]]]


def load(path: Union[str, "os.PathLike[str]"], *, map_location: MapLocation = "cpu", key: Optional[str] = None,
         strip_prefix: Optional[str] = None, dtype: Union[None, str, "torch.dtype"] = None,
         mmap: bool = False, like: Any = None, allow_missing: bool = False, drop_unexpected: bool = False,
         drop_mismatched: bool = False, weights_only: Optional[bool] = None) -> Dict[str, Any]:
    """The state dict of a checkpoint, as tensors of this Python's torch.

    Reads torch.save files (zip and legacy), safetensors files, Hugging Face
    shard sets (an index file) and distributed checkpoints (a directory)
    without unpickling anything: ckptfix's reader parses the file and says
    where each storage's bytes are (where a storage is not stored aligned
    and little-endian, ckptfix first copies it, converted, into a temporary
    file), and torch gets those bytes.

    path: the checkpoint.
    map_location: as torch.load's: a device for every tensor ("cpu", "cuda:1",
        a torch.device), a dict from saved locations to devices
        ({"cuda:3": "cuda:0"}; other locations stay as saved), or None (as
        saved). Default "cpu". Onto a GPU the bytes go through two pinned
        staging buffers, copied asynchronously while the next is filled.
    key: the state dict at this '/'-separated path ("state_dict",
        "model/ema"); default: the root when it is a state dict, else the
        only one in the file (as ckptfix::libtorch::load_state_dict chooses).
    strip_prefix: remove this prefix ("module.") from every key that has it.
    dtype: cast floating tensors to it (torch's own Tensor.to, so
        bit-identical to it); others stay as they are. A torch.dtype or its
        name in either spelling ("bf16" as the CLI says it, "bfloat16").
    weights_only: accepted as True, as people pass it to torch.load:
        ckptfix.load never runs pickled code, so every load is weights-only
        (and reads more than torch's: numpy values, configs). False raises
        ValueError: there is no mode that runs the file's code.
    mmap: as torch.load's. False (the default, as torch.load's): CPU
        tensors own their memory, read from the file, and nothing of the
        file stays mapped, so the file may be overwritten (torch.save to
        the same path) while they live. True: CPU tensors are views of a
        private, copy-on-write mapping of the file (no copy; writing them
        changes memory, never the file), and, as with
        torch.load(mmap=True), the file must not be truncated or
        overwritten in place while they live (reading a page of a
        truncated file kills the process with SIGBUS). Onto a GPU it
        changes nothing: the bytes are copied to the device either way.

    Returns the entries in the file's order: dtype, shape, stride, storage
    offset and requires_grad as saved (torch.nn.Parameter where the file
    has one), tensors that share a storage in the file sharing one here;
    Python attributes set on a tensor before it was saved set again, sparse
    tensors sparse, and a module's extra state (a key ending in
    `_extra_state`) as the plain data it holds, so that
    model.load_state_dict(sd, strict=True) takes it.
    like: the model the state dict goes into, an nn.Module (its
        state_dict()'s keys, shapes and dtypes; nothing of it is changed) or
        a mapping of keys to tensors (meta tensors will do): the keys are
        fitted to it as `ckptfix fix --like` fits them (docs/cli.md: wrapper
        segments, one prefix, known renames, num_batches_tracked), in its
        order, so that model.load_state_dict(ckptfix.load(p, like=model))
        works. What no rule places raises CheckpointError with torch's own
        lines ("Missing key(s) in state_dict: ..."), unless allowed:
    allow_missing: give what fits even where the model has keys the file
        lacks (then load_state_dict(..., strict=False)).
    drop_unexpected: leave out the keys the model does not have.
    drop_mismatched: leave out the keys whose shape is not the model's.
    CPU tensors are writable; writing changes memory, never the file.
    Raises CheckpointError for a file ckptfix cannot read or refuses (its
    `kind` says why: "corrupt", "unsafe", ...), FileNotFoundError (also a
    CheckpointError) for a path that names nothing, IsADirectoryError for a
    directory that is not a distributed checkpoint.
    """
    import torch

    if weights_only is False:
        raise ValueError("ckptfix.load has no weights_only=False: it never runs a file's pickled code, and reads "
                         "numpy values, configs and other data without it; to run the file's code, use torch.load")
    if weights_only not in (None, True):
        raise TypeError("weights_only takes True or False, not {}".format(type(weights_only).__name__))
    if dtype is not None:
        dtype = torch_dtype(torch, dtype_name(dtype, "dtype"))
    if not isinstance(strip_prefix, (str, type(None))):
        raise TypeError("strip_prefix takes a str, not {}".format(type(strip_prefix).__name__))
    path = check_input(os.fspath(path))
    args = ["layout", path]
    if key:
        args += ["--key", key]
    if like is None and (allow_missing or drop_unexpected or drop_mismatched):
        raise TypeError("allow_missing, drop_unexpected and drop_mismatched go with like=")
    if like is not None and strip_prefix:
        # The fit strips what it must; stripping after it would un-fit the keys.
        raise TypeError("like= chooses the prefixes itself: give no strip_prefix with it")
    with tempfile.TemporaryDirectory(prefix="ckptfix-load-") as stage:
        if like is not None:
            args += like_flags(like, stage)
            args += ["--allow-missing"] * allow_missing + ["--drop-unexpected"] * drop_unexpected
            args += ["--drop-mismatched"] * drop_mismatched
        layout = run_json(args + ["--stage", stage])
        # Mapped before the directory goes: a mapping outlives its file's name.
        return tensors_of(layout, torch, device_rule(map_location, torch), strip_prefix=strip_prefix, dtype=dtype,
                          mmap=mmap)


def write_reference(like: Any, torch: Any, path: str) -> None:
    """What `like` (an nn.Module or a mapping of tensors) expects, as the
    JSON reference `--like` reads: each key, in order, with its shape and
    dtype; {} for a module's extra state."""
    import json
    if isinstance(like, torch.nn.Module):
        entries = like.state_dict()
    elif isinstance(like, Mapping):
        entries = like
    else:
        raise TypeError("like= takes an nn.Module or a mapping of tensors, not {}".format(type(like).__name__))
    reference = {}
    for k, v in entries.items():
        if not isinstance(k, str):
            raise TypeError("like=: key {!r} is not a str".format(k))
        if isinstance(v, torch.Tensor):
            reference[k] = {"shape": list(v.shape), "dtype": str(v.dtype)[len("torch."):]}
        elif k == "_extra_state" or k.endswith("._extra_state"):
            reference[k] = {}
        else:
            raise TypeError("like=: the value of {!r} is {}, not a tensor".format(k, type(v).__name__))
    with open(path, "w") as f:
        json.dump(reference, f)


def device_rule(map_location: MapLocation, torch: Any) -> Callable[[str], "torch.device"]:
    """Where a storage saved at a location tag goes, as torch.load decides it."""
    if map_location is None:
        return lambda location: torch.device(location)
    if isinstance(map_location, (str, torch.device)):
        device = torch.device(map_location)
        return lambda location: device
    if isinstance(map_location, Mapping):
        mapped = {str(k): torch.device(v) for k, v in map_location.items()}
        return lambda location: mapped.get(location, torch.device(location))
    raise TypeError("map_location must be None, a str, a torch.device or a dict of them, not {}".format(
        type(map_location).__name__))


def torch_dtype(torch: Any, name: str) -> "torch.dtype":
    """torch's dtype of a ckptfix dtype name (torch's own names)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError("this torch ({}) has no dtype {}".format(torch.__version__, name))
    return dtype


class Staging:
    """Host bytes onto a device through two staging buffers.

    For a GPU the buffers are pinned and each is copied to the device
    asynchronously on a stream of its own, while the CPU fills the other one
    from the mapping (torch's copy_, on several threads); a buffer is filled
    again only once the event recorded after its last copy has passed. For
    the CPU the same code runs with plain buffers and synchronous copies:
    what the tests exercise on machines without a GPU.
    """

    def __init__(self, device: "torch.device", buffer_bytes: int, torch: Any) -> None:
        self._torch = torch
        self._cuda = device.type == "cuda"
        self._buffers = [torch.empty(max(1, buffer_bytes), dtype=torch.uint8, pin_memory=self._cuda)
                         for _ in range(2)]
        self._events: List[Any] = [None, None]
        self._next = 0
        self._stream = torch.cuda.Stream(device=device) if self._cuda else None
        if self._stream is not None:
            # What the default stream did (allocating the destinations) comes first.
            self._stream.wait_stream(torch.cuda.current_stream(device))

    def copy(self, source: "torch.Tensor", target: "torch.Tensor") -> None:
        """Copies the uint8 CPU tensor `source` into `target` (uint8, same size)."""
        torch = self._torch
        size = self._buffers[0].numel()
        total = source.numel()
        for start in range(0, total, size):
            n = min(size, total - start)
            i = self._next
            self._next ^= 1
            if self._events[i] is not None:
                self._events[i].synchronize()  # its last copy to the device is done
            buffer = self._buffers[i][:n]
            buffer.copy_(source[start:start + n])
            if self._stream is None:
                target[start:start + n].copy_(buffer)
                continue
            with torch.cuda.stream(self._stream):
                target[start:start + n].copy_(buffer, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
            self._events[i] = event

    def finish(self) -> None:
        """Waits for every copy: the targets are complete afterwards."""
        if self._stream is not None:
            self._stream.synchronize()


def tensors_of(layout: Dict[str, Any], torch: Any, device_for: Callable[[str], "torch.device"], *,
               strip_prefix: Optional[str] = None, dtype: Optional["torch.dtype"] = None,
               staging_bytes: int = STAGING_BYTES, stage_cpu: bool = False,
               mmap: bool = False) -> Dict[str, Any]:
    """The entries `ckptfix layout` describes. `stage_cpu` sends CPU targets
    through Staging too (for tests of the GPU path's logic on the CPU).
    `mmap`: CPU tensors are views of the mapped files, else read into
    memory of their own."""
    mappings: Dict[str, Any] = {}
    files: Dict[str, int] = {}

    def mapped(path: str) -> Any:
        m = mappings.get(path)
        if m is None:
            with open(path, "rb") as f:
                # Private and copy-on-write: writable tensors, the file untouched.
                m = mmap_module.mmap(f.fileno(), 0, access=mmap_module.ACCESS_COPY)
            mappings[path] = m
        return m

    def read(path: str, offset: int, nbytes: int) -> "torch.Tensor":
        fd = files.get(path)
        if fd is None:
            fd = files[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return read_into_new_tensor(torch, fd, path, offset, nbytes)

    # One uint8 tensor per storage, on its device: every view of a storage is a view of it.
    bases: List["torch.Tensor"] = []
    stagings: Dict[str, Staging] = {}
    try:
        for s in layout["storages"]:
            nbytes = s["nbytes"]
            device = device_for(s["location"])
            on_cpu = device.type == "cpu" and not stage_cpu
            if nbytes == 0:
                host = torch.empty(0, dtype=torch.uint8)
            elif on_cpu and not mmap:
                host = read(s["file"], s["offset"], nbytes)
            else:
                host = torch.frombuffer(mapped(s["file"]), dtype=torch.uint8, count=nbytes, offset=s["offset"])
            if on_cpu:
                bases.append(host)
                continue
            bases.append(to_device(torch, host, device, s, layout, stagings, staging_bytes))
        for staging in stagings.values():
            staging.finish()
    finally:
        for fd in files.values():
            os.close(fd)
    return typed_tensors(layout, torch, bases, strip_prefix=strip_prefix, dtype=dtype)


def read_into_new_tensor(torch: Any, fd: int, path: str, offset: int, nbytes: int) -> "torch.Tensor":
    """`nbytes` bytes of the open file `fd` at `offset`, in a new uint8 tensor
    that owns its memory (read straight into it: one copy, from the page cache)."""
    tensor = torch.empty(nbytes, dtype=torch.uint8)
    view = memoryview((ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())).cast("B")
    done = 0
    while done < nbytes:
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise CheckpointError("'{}': the file ended at byte {} while reading {} bytes at offset {}; it changed "
                                  "while being loaded".format(path, offset + done, nbytes, offset))
        done += n
    return tensor


def to_device(torch: Any, host: "torch.Tensor", device: "torch.device", s: Dict[str, Any], layout: Dict[str, Any],
              stagings: Dict[str, "Staging"], staging_bytes: int) -> "torch.Tensor":
    """A storage's bytes copied onto `device`, through that device's staging buffers."""
    try:
        target = torch.empty(s["nbytes"], dtype=torch.uint8, device=device)
    except (RuntimeError, AssertionError) as e:  # a CPU-only torch asserts it has no CUDA
        raise CheckpointError("'{}': storage '{}' was saved on '{}' and goes to '{}', which this torch cannot "
                              "use ({}); choose map_location".format(layout.get("path"), s["key"], s["location"],
                                                                      device, str(e).splitlines()[0]))
    staging = stagings.get(str(device))
    if staging is None:
        staging = stagings[str(device)] = Staging(device, staging_bytes, torch)
    staging.copy(host, target)
    return target


def typed_tensors(layout: Dict[str, Any], torch: Any, bases: List["torch.Tensor"], *,
                  strip_prefix: Optional[str], dtype: Optional["torch.dtype"]) -> Dict[str, Any]:
    """The entries of the layout: tensors, each a view of its storage's bytes
    in `bases`; sparse tensors made of such tensors; and modules' extra
    states, plain data (with tensors in it) decoded as torch.load gives it."""
    typed: Dict[Any, "torch.Tensor"] = {}  # (storage, dtype name, cast) -> the storage as that type
    made: Dict[Any, "torch.Tensor"] = {}  # one object per tensor of the pickle, as torch.load gives

    def tensor(index: int, cast: bool) -> "torch.Tensor":
        made_key = (index, cast)
        if made_key in made:
            return made[made_key]
        t = layout["tensors"][index]
        if t.get("meta"):  # no data: as torch.load makes it, on the meta device whatever map_location says
            result = torch.empty_strided(t["shape"], t["stride"], dtype=torch_dtype(torch, t["dtype"]), device="meta")
            if t["parameter"]:
                result = torch.nn.Parameter(result, requires_grad=t["requires_grad"])
            elif t["requires_grad"]:
                result.requires_grad_(True)
            made[made_key] = result
            return result
        k = (t["storage"], t["dtype"], cast)
        whole = typed.get(k)
        if whole is None:
            element = torch_dtype(torch, t["dtype"])
            base = bases[t["storage"]]
            whole = base.view(element) if base.numel() else torch.empty(0, dtype=element, device=base.device)
            if cast and dtype is not None and whole.is_floating_point() and whole.dtype != dtype:
                whole = whole.to(dtype)  # once per storage: views of it stay shared
            typed[k] = whole
        result = torch.as_strided(whole, t["shape"], t["stride"], t["storage_offset"])
        if t["parameter"]:
            result = torch.nn.Parameter(result, requires_grad=t["requires_grad"])
        elif t["requires_grad"]:
            result.requires_grad_(True)
        made[made_key] = result
        # Python attributes (t.foo = 1 before saving), set again where this
        # torch's own load does (torch >= 2.0; 1.13 drops them).
        if "attributes" in t and hasattr(torch._utils, "_set_obj_state"):
            for name, value in decode(t["attributes"]).items():
                setattr(result, name, value)
        return result

    def decode(value: Any) -> Any:
        """Plain data as `ckptfix layout` encodes it (docs/cli.md, "layout")."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, list):
            return [decode(v) for v in value]
        (kind, v), = value.items()
        if kind == "int":
            return int(v)
        if kind == "float":
            return float.fromhex(v)
        if kind == "bytes":
            return bytes.fromhex(v)
        if kind == "tuple":
            return tuple(decode(i) for i in v)
        if kind == "set":
            return {decode(i) for i in v}
        if kind == "frozenset":
            return frozenset(decode(i) for i in v)
        if kind == "dict":
            return {decode(a): decode(b) for a, b in v}
        if kind == "ordered_dict":
            return collections.OrderedDict((decode(a), decode(b)) for a, b in v)
        if kind == "tensor":
            return tensor(v, cast=False)  # a module's extra state is carried as it is
        if kind == "bytes_io":  # Transformer Engine's older extra state: as torch.load gives it
            buffer = io.BytesIO(bytes.fromhex(v[0]))
            buffer.seek(int(decode(v[1])))
            return buffer
        raise CheckpointError("'{}': ckptfix layout gave a value of unknown kind {!r}".format(layout.get("path"), kind))

    def sparse(entry: Dict[str, Any]) -> "torch.Tensor":
        """A sparse tensor from its parts, as torch._utils._rebuild_sparse_tensor makes and checks it."""
        parts = [tensor(i, cast=True).detach() for i in entry["parts"]]
        size = entry["size"]
        if entry["layout"] == "sparse_coo":
            validate = getattr(torch, "_validate_sparse_coo_tensor_args", None)
            if validate is not None:
                validate(parts[0], parts[1], size)
            result = torch.sparse_coo_tensor(parts[0], parts[1], size)
            if entry.get("coalesced"):
                result = result._coalesced_(True)
            return result
        layout_type = getattr(torch, entry["layout"])
        validate = getattr(torch, "_validate_sparse_compressed_tensor_args", None)
        if validate is not None:
            validate(parts[0], parts[1], parts[2], size, layout_type)
        return torch.sparse_compressed_tensor(parts[0], parts[1], parts[2], size, layout=layout_type)

    out: Dict[str, Any] = {}
    if strip_prefix and layout["entries"] and not any(e["key"].startswith(strip_prefix) for e in layout["entries"]):
        # As `ckptfix strip-prefix` says it (issue 67): a prefix no key has is a wrong idea of the
        # keys, which torch's consume_prefix_in_state_dict_if_present would let through silently.
        keys = [e["key"] for e in layout["entries"]]
        first = keys[0].split(".", 1)[0] + "." if "." in keys[0] else ""
        shared = first if first and all(k.startswith(first) and "." in k[len(first):] for k in keys) else ""
        raise CheckpointError("'{}': no key starts with {!r}{}".format(
            layout.get("path"), strip_prefix,
            "; every key starts with {!r} instead: strip_prefix={!r}".format(shared, shared) if shared else
            " (its keys are {})".format(", ".join(repr(k) for k in keys[:2]) + (", ..." if len(keys) > 2 else ""))))
    for e in layout["entries"]:
        name = e["key"]
        if strip_prefix and name.startswith(strip_prefix):
            name = name[len(strip_prefix):]
        if name in out:
            raise ValueError("strip_prefix={!r} makes two keys {!r}".format(strip_prefix, name))
        try:
            if e["kind"] == "tensor":
                out[name] = tensor(e["tensor"], cast=True)
            elif e["kind"] == "sparse":
                out[name] = sparse(e)
            else:
                out[name] = decode(e["value"])
        except RecursionError:
            raise CheckpointError("'{}': key '{}': its value is nested too deeply to be made in Python".format(
                layout.get("path"), e["key"])) from None
        except RuntimeError as error:  # torch's own check of a sparse tensor's indices
            raise CheckpointError("'{}': key '{}': {}".format(layout.get("path"), e["key"],
                                                              str(error).splitlines()[0])) from None
    return out
