#!/usr/bin/python3
"""Judge checkpoints with real PyTorch: load two files and compare them exactly.

ckptfix's output must never be judged by ckptfix itself.  This module loads
both files with ``torch.load`` (run it with ``/usr/bin/python3``, which has
torch) and compares the resulting object graphs strictly:

* Python types must be identical (dict vs OrderedDict, list vs tuple,
  Parameter vs Tensor, int vs bool all differ);
* floats and tensor elements are compared bit for bit (NaN payloads and
  signed zeros matter), tensors also by dtype/shape/stride/offset/flags and
  by the full bytes of their storage;
* which tensors share a storage must be the same on both sides;
* the *saved* location tag of every storage ('cpu', 'cuda:1', ...) is
  recorded while loading (everything is actually loaded onto the CPU) and
  must match, or must equal a required location.

Library use (other test scripts ``import torch_compare``)::

    exp, exp_locs = torch_compare.load_with_locations('expected.pt')
    act, act_locs = torch_compare.load_with_locations('actual.pt')
    diffs = torch_compare.compare(exp, act, exp_locs, act_locs)
    assert not diffs, '\\n'.join(diffs)

Command line::

    torch_compare.py EXPECTED ACTUAL [--expect-location LOC]
                     [--ignore-locations] [--max-diffs N]
                     [--expected-python FILE.py:FUNC]

Exit status: 0 equal, 1 different, 2 usage error or a file failed to load.

Paths in messages are Python-like: ``['state_dict']['fc.weight']`` for
mapping items, ``[3]`` for sequence items, ``.name`` for attributes (e.g.
``._metadata`` of a state_dict), ``.method()`` for derived values such as
``._indices()`` of a sparse tensor; ``<root>`` is the loaded object itself.
"""

import argparse
import dataclasses
import enum
import importlib.util
import struct
import sys
import traceback
import types
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

__all__ = [
    'LocationMap', 'CompareOptions', 'CompareResult',
    'load_with_locations', 'compare', 'compare_detailed', 'iter_tensors',
    'storage_id', 'storage_bytes', 'locations_by_path', 'carry_locations',
    'apply_transform', 'check_plain_load', 'load_transform', 'main',
    'load_trusted', 'default_load_error', 'default_load_parity', 'mmap_supported',
]

_MISSING = object()


# ---------------------------------------------------------------------------
# Storages: identity, bytes, saved locations
# ---------------------------------------------------------------------------

def _untyped(x):
    """Return the untyped storage behind a tensor or a (typed/untyped) storage.

    torch 1.13 calls it ``torch.UntypedStorage`` (a Python subclass of
    ``torch._C.StorageBase``; 1.12 called it ``torch._UntypedStorage``);
    ``Tensor.storage()`` returns a ``TypedStorage`` wrapper whose
    ``.untyped()`` gives it.  torch 2.x has ``Tensor.untyped_storage()``.
    """
    if isinstance(x, torch.Tensor):
        if hasattr(x, 'untyped_storage'):
            return x.untyped_storage()
        return x.storage().untyped()
    if isinstance(x, torch.TypedStorage):
        if hasattr(x, '_untyped_storage'):
            return x._untyped_storage
        return x.untyped()
    return x


def storage_id(x) -> int:
    """Identity of the storage behind a tensor or storage.

    This is the address of the C++ StorageImpl (``_cdata``), not
    ``data_ptr()``: every empty storage has data_ptr 0, and a Python storage
    object is a fresh wrapper on every ``.storage()`` call.  The id is only
    meaningful while the storage is alive.
    """
    return _untyped(x)._cdata


def _has_storage(t: torch.Tensor) -> bool:
    """True for dense (strided) tensors that own a real storage."""
    return t.layout == torch.strided and t.device.type != 'meta'


def storage_bytes(x) -> Optional[np.ndarray]:
    """All bytes of the storage behind a tensor or storage, as a uint8 array.

    The array is a view of the storage (no copy) for CPU storages; None for
    meta storages, which have no data.
    """
    u = _untyped(x)
    if u.device.type == 'meta':
        return None
    flat = torch.empty(0, dtype=torch.uint8, device=u.device).set_(u)
    return flat.cpu().numpy()


def _element_bytes(t: torch.Tensor) -> np.ndarray:
    """The raw bytes of each element of a strided tensor, shape (numel, itemsize).

    Built by viewing the storage as uint8 with strides scaled by the element
    size, so it works for every dtype (bfloat16, bool, complex, quantized)
    and keeps NaN payloads and signed zeros.
    """
    size = t.element_size()
    view = torch.empty(0, dtype=torch.uint8, device=t.device).set_(
        _untyped(t), t.storage_offset() * size,
        tuple(t.shape) + (size,), tuple(s * size for s in t.stride()) + (1,))
    return view.cpu().numpy().reshape(t.numel(), size)


def _device_location(x) -> str:
    """The location tag torch.save would write for a storage on this device."""
    device = _untyped(x).device
    return device.type if device.index is None else str(device)


class LocationMap(dict):
    """Maps storage_id(storage) -> saved location string ('cpu', 'cuda:3', ...).

    It also keeps the recorded storages alive (so their ids stay unique) and
    resolves storages that merely view part of a recorded one (old legacy
    files restore storage views as slices of a root storage).
    """

    def __init__(self):
        super().__init__()
        self._storages = []     # keeps recorded storages (and their ids) alive

    def record(self, storage, location: str) -> None:
        """Remember the saved location of a storage (or of a tensor's storage)."""
        u = _untyped(storage)
        self._storages.append(u)
        self[u._cdata] = location

    def canonical_id(self, x) -> int:
        """storage_id(x), or the id of the recorded storage whose bytes contain it."""
        u = _untyped(x)
        sid = u._cdata
        if sid in self or u.device.type == 'meta' or u.data_ptr() == 0:
            return sid
        start, end = u.data_ptr(), u.data_ptr() + u.nbytes()
        for root in self._storages:
            rstart = root.data_ptr()
            if (root.device == u.device and rstart != 0
                    and rstart <= start and end <= rstart + root.nbytes()):
                return root._cdata
        return sid

    def location_of(self, x) -> Optional[str]:
        """Saved location of the storage behind x, or None if it was not recorded."""
        return self.get(self.canonical_id(x))


def load_with_locations(path) -> Tuple[Any, LocationMap]:
    """Load a checkpoint onto the CPU and record the saved location of each storage.

    ``torch.load`` is called with a ``map_location`` callable that records
    the location string each storage was saved with and returns the storage
    unchanged (it was read into CPU memory), so CUDA- or MPS-tagged files
    load on a CPU-only machine.  Uses ``weights_only=False``: only pass
    trusted test files.

    Returns ``(obj, locations)``; see LocationMap.
    """
    locations = LocationMap()

    def recorder(storage, location):
        locations.record(storage, location)
        return storage

    obj = torch.load(path, map_location=recorder, weights_only=False)
    return obj, locations


def check_plain_load(path) -> List[str]:
    """Check that ``torch.load(path)`` works without map_location.

    On this CPU-only machine that proves every storage is tagged with a
    location that exists here.  Returns a list of difference strings.
    """
    try:
        torch.load(path, weights_only=False)
    except Exception as exc:     # noqa: BLE001 - any failure is the finding
        return [f'<root>: plain torch.load without map_location failed: '
                f'{type(exc).__name__}: {exc}']
    return []


def load_trusted(path, **kwargs):
    """``torch.load`` of a file the tests made or bundled themselves.

    ``weights_only=False`` is said out loud: torch 2.6 changed the default to
    True, and the fixtures hold argparse.Namespace, numpy values and sets,
    which that default refuses.  Never use this on an untrusted file.
    """
    return torch.load(path, weights_only=False, **kwargs)


def default_load_error(path, **kwargs) -> Optional[str]:
    """None if this judge's *default* ``torch.load`` (``weights_only=True``
    since torch 2.6) loads the file onto the CPU, else its error, one line."""
    try:
        torch.load(path, map_location='cpu', **kwargs)
    except Exception as exc:     # noqa: BLE001 - any failure is the answer
        lines = str(exc).strip().splitlines()
        detail = next((ln.strip() for ln in lines if 'WeightsUnpickler error' in ln), lines[0] if lines else '')
        return f'{type(exc).__name__}: {detail}'
    return None


def mmap_supported() -> bool:
    """torch.load(mmap=True) exists since torch 2.1."""
    import inspect
    return 'mmap' in inspect.signature(torch.load).parameters


def default_load_parity(source, output) -> List[str]:
    """Differences in how this judge's default ``torch.load`` treats a
    rewritten file: the output must load by default whenever the source did
    (weights_only=True on torch >= 2.6), and, for zip outputs on torch >= 2.1,
    also with ``mmap=True``, giving the same object as a plain load."""
    diffs = []
    if default_load_error(source) is None:
        err = default_load_error(output)
        if err is not None:
            diffs.append(f'<root>: the source loads with the default torch.load but the output does not: {err}')
    with open(output, 'rb') as f:
        is_zip = f.read(4) == b'PK\x03\x04'
    if is_zip and mmap_supported():
        try:
            mapped = torch.load(output, mmap=True, map_location='cpu', weights_only=False)
        except Exception as exc:  # noqa: BLE001
            diffs.append(f'<root>: torch.load(mmap=True) failed: {type(exc).__name__}: {exc}')
        else:
            plain = torch.load(output, map_location='cpu', weights_only=False)
            diffs += [f'mmap=True vs plain load: {d}' for d in compare(plain, mapped, None, None,
                                                                      CompareOptions(ignore_locations=True))]
    return diffs


# ---------------------------------------------------------------------------
# Paths and object traversal
# ---------------------------------------------------------------------------

def _item_path(path: str, key) -> str:
    return f'{path}[{key!r}]'


def _attr_path(path: str, name) -> str:
    return f'{path}.{name}' if isinstance(name, str) else f'{path}.<{name!r}>'


def _show(path: str) -> str:
    """Display form of a path: '<root>' for the root, '<root>.attr' for its attributes."""
    return '<root>' + path if not path or path.startswith('.') else path


def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _qualname(tp: type) -> str:
    module = tp.__module__
    return tp.__qualname__ if module == 'builtins' else f'{module}.{tp.__qualname__}'


def _float_bits(x: float) -> str:
    return '0x' + struct.pack('>d', x).hex()


def _strict_key(x):
    """A hashable key equal only for strictly equal atoms (1 != True != 1.0, -0.0 != 0.0)."""
    if type(x) is float:
        return (float, _float_bits(x))
    if type(x) is complex:
        return (complex, _float_bits(x.real), _float_bits(x.imag))
    if type(x) in (tuple, frozenset):
        items = [_strict_key(i) for i in x]
        return (type(x), tuple(items) if type(x) is tuple else tuple(sorted(map(repr, items))))
    return (type(x), repr(x))


_TORCH_ATOMS = (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.qscheme)
_IDENTITY_TYPES = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                   types.ModuleType, enum.Enum)
_ATOMS = (type(None), bool, int, float, complex, str, bytes)


def _slot_names(tp: type) -> List[str]:
    names = []
    for klass in tp.__mro__:
        slots = klass.__dict__.get('__slots__', ())
        for name in ([slots] if isinstance(slots, str) else slots):
            if name not in ('__dict__', '__weakref__') and name not in names:
                names.append(name)
    return names


def _instance_attrs(obj) -> Optional[Dict[str, Any]]:
    """The instance attributes (``__dict__`` plus filled ``__slots__``), or None."""
    attrs = getattr(obj, '__dict__', None)
    slots = _slot_names(type(obj))
    if not isinstance(attrs, dict) and not slots:
        return None
    result = dict(attrs) if isinstance(attrs, dict) else {}
    for name in slots:
        value = getattr(obj, name, _MISSING)
        if value is not _MISSING:
            result[name] = value
    return result


def _object_state(obj) -> Tuple[str, Any]:
    """How to compare a plain object: ('attrs', dict), (path_suffix, state) or ('eq', None)."""
    attrs = _instance_attrs(obj)
    if attrs is not None:
        return 'attrs', attrs
    getstate = getattr(type(obj), '__getstate__', None)
    if getstate is not None and getstate is not getattr(object, '__getstate__', None):
        try:
            return '.__getstate__()', obj.__getstate__()
        except Exception:    # noqa: BLE001
            pass
    try:
        reduced = obj.__reduce_ex__(2)
    except Exception:        # noqa: BLE001
        return 'eq', None
    if isinstance(reduced, str):            # a global: compare by identity
        return 'eq', None
    reduced = tuple(x if x is None or isinstance(x, (tuple, list, dict)) or i < 3
                    else list(x) for i, x in enumerate(reduced))
    return '.__reduce_ex__(2)', reduced


def _sparse_parts(t: torch.Tensor) -> List[Tuple[str, Any]]:
    """The component tensors of a sparse tensor, as (path_suffix, tensor)."""
    if t.layout == torch.sparse_coo:
        return [('._indices()', t._indices()), ('._values()', t._values())]
    parts = []
    for name in ('crow_indices', 'col_indices', 'ccol_indices', 'row_indices', 'values'):
        try:
            parts.append((f'.{name}()', getattr(t, name)()))
        except (RuntimeError, AttributeError):
            pass
    return parts


def iter_tensors(obj) -> Iterator[Tuple[str, Any]]:
    """Yield (path, tensor_or_storage) for every tensor and bare storage in obj.

    Paths are the ones compare() reports.  Each object is visited once (an
    object reachable twice is reported under its first path only).
    """
    seen = set()
    keep = []               # temporaries stay alive so their ids stay unique
    stack = [('', obj)]
    while stack:
        path, x = stack.pop()
        if isinstance(x, _ATOMS + _TORCH_ATOMS + _IDENTITY_TYPES) or isinstance(
                x, (np.ndarray, np.generic, np.dtype, set, frozenset, bytearray)):
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        keep.append(x)
        children: List[Tuple[str, Any]] = []
        if isinstance(x, torch.Tensor):
            yield path, x
            if x.layout != torch.strided:
                children = [(path + s, v) for s, v in _sparse_parts(x)]
        elif isinstance(x, (torch.TypedStorage, torch.UntypedStorage)):
            yield path, x
        elif isinstance(x, dict):
            children = [(_item_path(path, k), v) for k, v in x.items()]
            children += [(_attr_path(path, k), v) for k, v in (_instance_attrs(x) or {}).items()]
        elif isinstance(x, (list, tuple)):
            children = [(f'{path}[{i}]', v) for i, v in enumerate(x)]
            children += [(_attr_path(path, k), v) for k, v in (_instance_attrs(x) or {}).items()]
        else:
            how, state = _object_state(x)
            if how == 'attrs':
                children = [(_attr_path(path, k), v) for k, v in state.items()]
            elif how != 'eq':
                keep.append(state)
                children = [(path + how, state)]
        stack.extend(reversed(children))


def locations_by_path(obj, locations: LocationMap) -> Dict[str, Optional[str]]:
    """Map each tensor/storage path of obj to its saved location (see iter_tensors)."""
    return {path: locations.location_of(x) for path, x in iter_tensors(obj)
            if not isinstance(x, torch.Tensor) or _has_storage(x)}


def carry_locations(by_path: Dict[str, Optional[str]], old_locations: LocationMap,
                    new_obj) -> LocationMap:
    """Locations for an object derived from a loaded one (e.g. by a Python edit).

    A storage of new_obj keeps its recorded location if it is one of the
    loaded storages; otherwise it takes the location found at the same path
    before the edit (by_path, from locations_by_path); otherwise (a new path)
    the location torch.save would write for it here ('cpu').
    """
    new = LocationMap()
    for path, x in iter_tensors(new_obj):
        if isinstance(x, torch.Tensor) and not _has_storage(x):
            continue
        loc = old_locations.location_of(x)
        if loc is None:
            loc = by_path.get(path)
        if loc is None:
            loc = _device_location(x)
        new.record(x, loc)
    return new


def apply_transform(obj, locations: LocationMap, func) -> Tuple[Any, LocationMap]:
    """Run ``func(obj)`` and return ``(new_obj, new_locations)``.

    func may return a new object or mutate obj in place and return None.
    Locations are carried over as described in carry_locations.
    """
    by_path = locations_by_path(obj, locations)
    result = func(obj)
    new_obj = obj if result is None else result
    return new_obj, carry_locations(by_path, locations, new_obj)


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class CompareOptions:
    """What compare() checks besides the values themselves.

    ignore_locations: skip all saved-location checks.
    expect_location:  instead of expected == actual locations, require every
                      storage recorded in the actual LocationMap to have
                      this location (e.g. 'cpu').
    check_aliasing:   objects that are one Python object at several paths
                      (pickle memo references) must be one object on both
                      sides.
    max_depth:        nesting depth at which comparison gives up (reported).
    """
    ignore_locations: bool = False
    expect_location: Optional[str] = None
    check_aliasing: bool = True
    max_depth: int = 400


@dataclasses.dataclass
class CompareResult:
    """Differences found, plus how many tensors and storages were compared."""
    diffs: List[str]
    tensors: int
    storages: int

    @property
    def equal(self) -> bool:
        return not self.diffs


def compare(expected, actual, exp_locations=None, act_locations=None,
            options: Optional[CompareOptions] = None) -> List[str]:
    """Compare two loaded objects strictly; return difference strings (empty = equal).

    exp_locations / act_locations come from load_with_locations (a
    LocationMap, or any dict storage_id -> location).  If either is None,
    location checks that need it are skipped.  options: CompareOptions (or
    None for the defaults).  Each string starts with the path of the value,
    e.g. ``['state_dict']['conv.weight']: dtype float32 != bfloat16``, with
    the expected value first.
    """
    return compare_detailed(expected, actual, exp_locations, act_locations, options).diffs


def compare_detailed(expected, actual, exp_locations=None, act_locations=None,
                     options: Optional[CompareOptions] = None) -> CompareResult:
    """Like compare(), but also return the numbers of tensors and storages compared."""
    comparer = _Comparer(exp_locations, act_locations, options or CompareOptions())
    return comparer.run(expected, actual)


class _Comparer:
    """One comparison run: walks both graphs in parallel and collects diffs."""

    def __init__(self, exp_locations, act_locations, options: CompareOptions):
        self.locs = (exp_locations, act_locations)
        self.options = options
        self.diffs: List[str] = []
        self.pairs = set()          # (id(a), id(b)) already compared: stops cycles
        self.first_a = {}           # id(a) -> (id(b), path) where a was first seen
        self.first_b = {}
        self.keep = []              # keeps compared objects alive: ids stay unique
        self.tensor_storages = []   # (path, exp storage key, act storage key)
        self.storage_equal: Dict[Tuple[int, int], bool] = {}
        self.tensor_count = 0

    def run(self, a, b) -> CompareResult:
        self.visit(a, b, '', 0)
        self.check_sharing()
        self.check_locations()
        return CompareResult(self.diffs, self.tensor_count, len(self.storage_equal))

    def diff(self, path: str, message: str) -> None:
        self.diffs.append(f'{_show(path)}: {message}')

    # -- dispatch ----------------------------------------------------------

    def visit(self, a, b, path: str, depth: int) -> None:
        if depth > self.options.max_depth:
            self.diff(path, f'nesting deeper than {self.options.max_depth}; not compared')
            return
        ta, tb = type(a), type(b)
        if ta is not tb:
            self.diff(path, f'type {_qualname(ta)} != {_qualname(tb)}')
            # Keep going where the contents are still comparable.
            families = (torch.Tensor, dict, (list, tuple),
                        (torch.TypedStorage, torch.UntypedStorage))
            if not any(isinstance(a, f) and isinstance(b, f) for f in families):
                return
        if isinstance(a, np.generic):      # before the atoms: np.float64 is a float
            self.compare_numpy_scalar(a, b, path, depth)
        elif ta is float:
            if struct.pack('<d', a) != struct.pack('<d', b):
                self.diff(path, f'float {a!r} != {b!r} (bits {_float_bits(a)} != {_float_bits(b)})')
        elif ta is complex:
            if _strict_key(a) != _strict_key(b):
                self.diff(path, f'complex {a!r} != {b!r}')
        elif isinstance(a, (bytes, bytearray)):
            self.compare_bytes(a, b, path)
        elif isinstance(a, _ATOMS):
            if a != b:
                self.diff(path, f'{_qualname(ta)} {_short(a)} != {_short(b)}')
        elif isinstance(a, torch.Size):
            if tuple(a) != tuple(b):
                self.diff(path, f'{tuple(a)} != {tuple(b)}')
        elif isinstance(a, _TORCH_ATOMS + (np.dtype,)):
            if a != b:
                self.diff(path, f'{a} != {b}')
        elif isinstance(a, (tuple, frozenset)):
            # Immutable containers: compared by value, identity irrelevant.
            if isinstance(a, tuple):
                self.compare_sequence(a, b, path, depth)
            else:
                self.compare_set(a, b, path)
        elif isinstance(a, _IDENTITY_TYPES):
            if a is not b and a != b:
                self.diff(path, f'{_short(a)} != {_short(b)}')
        elif self.enter(a, b, path):
            self.visit_mutable(a, b, path, depth)

    def enter(self, a, b, path: str) -> bool:
        """Record that a and b are compared here; False if this pair was done already.

        Also checks aliasing: an object seen before with another partner
        means the two graphs reference objects differently.
        """
        ia, ib = id(a), id(b)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            self.record_tensor(a, b, path)
        if (ia, ib) in self.pairs:
            return False
        first_a, first_b = self.first_a.get(ia), self.first_b.get(ib)
        if self.options.check_aliasing:
            if first_a is not None:
                self.diff(path, f'is the same object as {_show(first_a[1])} in expected, '
                                f'but a different object in actual')
            elif first_b is not None:
                self.diff(path, f'is the same object as {_show(first_b[1])} in actual, '
                                f'but a different object in expected')
        self.pairs.add((ia, ib))
        self.first_a.setdefault(ia, (ib, path))
        self.first_b.setdefault(ib, (ia, path))
        self.keep.append((a, b))
        return True

    def visit_mutable(self, a, b, path: str, depth: int) -> None:
        if isinstance(a, torch.Tensor):
            self.compare_tensor(a, b, path, depth)
        elif isinstance(a, (torch.TypedStorage, torch.UntypedStorage)):
            self.compare_bare_storage(a, b, path)
        elif isinstance(a, np.ndarray):
            self.compare_ndarray(a, b, path, depth)
        elif isinstance(a, dict):
            self.compare_keyed(list(a.items()), list(b.items()), path, depth, _item_path, 'key')
            self.compare_attrs(a, b, path, depth)
            if hasattr(a, 'default_factory') and a.default_factory != b.default_factory:
                self.diff(path, f'default_factory {a.default_factory!r} != {b.default_factory!r}')
        elif isinstance(a, list):
            self.compare_sequence(a, b, path, depth)
        elif isinstance(a, set):
            self.compare_set(a, b, path)
        else:
            self.compare_object(a, b, path, depth)

    # -- containers and objects ------------------------------------------------

    def compare_sequence(self, a, b, path: str, depth: int) -> None:
        if len(a) != len(b):
            self.diff(path, f'length {len(a)} != {len(b)}')
        for i, (x, y) in enumerate(zip(a, b)):
            self.visit(x, y, f'{path}[{i}]', depth + 1)
        self.compare_attrs(a, b, path, depth)

    def compare_set(self, a, b, path: str) -> None:
        ka = {_strict_key(x): x for x in a}
        kb = {_strict_key(x): x for x in b}
        missing = [ka[k] for k in sorted(ka.keys() - kb.keys(), key=repr)]
        extra = [kb[k] for k in sorted(kb.keys() - ka.keys(), key=repr)]
        if missing or extra:
            self.diff(path, f'set elements differ: only in expected {_short(missing)}, '
                            f'only in actual {_short(extra)}')

    def compare_keyed(self, items_a, items_b, path: str, depth: int, child_path, what: str):
        """Compare ordered (key, value) lists: same keys, same order, equal values."""
        index_b = {_strict_key(k): (i, k, v) for i, (k, v) in enumerate(items_b)}
        keys_a = {_strict_key(k) for k, _ in items_a}
        common_a, common_b = [], []
        for k, v in items_a:
            hit = index_b.get(_strict_key(k))
            if hit is None:
                self.diff(child_path(path, k), f'{what} missing in actual')
            else:
                common_a.append(k)
                self.visit(v, hit[2], child_path(path, k), depth + 1)
        for k, _ in items_b:
            if _strict_key(k) not in keys_a:
                self.diff(child_path(path, k), f'unexpected {what} in actual (not in expected)')
            else:
                common_b.append(k)
        for pos, (x, y) in enumerate(zip(common_a, common_b)):
            if _strict_key(x) != _strict_key(y):
                self.diff(path, f'{what} order differs at position {pos} (of the common {what}s): '
                                f'expected {_short(x)}, actual {_short(y)}')
                break

    def compare_attrs(self, a, b, path: str, depth: int) -> None:
        """Compare instance attributes of containers (e.g. a state_dict's _metadata)."""
        attrs_a, attrs_b = _instance_attrs(a) or {}, _instance_attrs(b) or {}
        if attrs_a or attrs_b:
            self.compare_keyed(list(attrs_a.items()), list(attrs_b.items()),
                               path, depth, _attr_path, 'attribute')

    def compare_object(self, a, b, path: str, depth: int) -> None:
        how_a, state_a = _object_state(a)
        how_b, state_b = _object_state(b)
        if how_a != how_b:
            self.diff(path, f'object state kinds differ: {how_a} != {how_b}')
        elif how_a == 'attrs':
            self.compare_keyed(list(state_a.items()), list(state_b.items()),
                               path, depth, _attr_path, 'attribute')
        elif how_a == 'eq':
            try:
                equal = a == b
                equal = bool(equal)
            except Exception:    # noqa: BLE001
                equal = False
            if not equal:
                self.diff(path, f'{_short(a)} != {_short(b)}')
        else:
            self.keep.append((state_a, state_b))
            self.visit(state_a, state_b, path + how_a, depth + 1)

    def compare_bytes(self, a, b, path: str) -> None:
        if a == b:
            return
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        self.diff(path, f'{_qualname(type(a))} differ: length {len(a)} vs {len(b)}, '
                        f'first difference at offset {first}')

    # -- numpy -------------------------------------------------------------

    def compare_numpy_scalar(self, a, b, path: str, depth: int) -> None:
        if a.dtype != b.dtype:
            self.diff(path, f'numpy dtype {a.dtype} != {b.dtype}')
        elif a.dtype.hasobject:
            self.visit(a.item(), b.item(), path + '.item()', depth + 1)
        elif a.tobytes() != b.tobytes():
            # The value's Python repr: numpy 2 spells repr(np.float64(1.5))
            # as 'np.float64(1.5)', numpy 1 as '1.5'; messages stay the same.
            self.diff(path, f'numpy {_qualname(type(a))} {a.item()!r} != {b.item()!r} '
                            f'(bytes {a.tobytes().hex()} != {b.tobytes().hex()})')

    def compare_ndarray(self, a: np.ndarray, b: np.ndarray, path: str, depth: int) -> None:
        same = True
        if a.dtype != b.dtype:
            self.diff(path, f'numpy dtype {a.dtype} != {b.dtype}')
            same = False
        if a.shape != b.shape:
            self.diff(path, f'numpy shape {a.shape} != {b.shape}')
            same = False
        if a.flags.fnc != b.flags.fnc:
            self.diff(path, f'numpy Fortran order {a.flags.fnc} != {b.flags.fnc}')
        if not same:
            return
        if a.dtype.hasobject:
            self.visit(a.tolist(), b.tolist(), path + '.tolist()', depth + 1)
            return
        itemsize = max(a.dtype.itemsize, 1)
        ea = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, itemsize)
        eb = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, itemsize)
        self.report_elements(ea, eb, a.shape, path, 'numpy values', None, None)

    # -- tensors and storages ----------------------------------------------

    def storage_key(self, side: int, x) -> int:
        locs = self.locs[side]
        if isinstance(locs, LocationMap):
            return locs.canonical_id(x)
        return storage_id(x)

    def record_tensor(self, a, b, path: str) -> None:
        self.tensor_count += 1
        if _has_storage(a) and _has_storage(b):
            self.tensor_storages.append((path, self.storage_key(0, a), self.storage_key(1, b)))

    def compare_tensor(self, a: torch.Tensor, b: torch.Tensor, path: str, depth: int) -> None:
        def check(name, x, y):
            if x != y:
                self.diff(path, f'{name} {x} != {y}')
            return x == y

        same_dtype = check('dtype', _dtype_name(a.dtype), _dtype_name(b.dtype))
        same_shape = check('shape', tuple(a.shape), tuple(b.shape))
        same_layout = check('layout', a.layout, b.layout)
        check('device', a.device, b.device)
        check('requires_grad', a.requires_grad, b.requires_grad)
        check('is_conj', a.is_conj(), b.is_conj())
        check('is_neg', a.is_neg(), b.is_neg())
        if check('is_quantized', a.is_quantized, b.is_quantized) and a.is_quantized:
            self.compare_qparams(a, b, path, depth)
        dense = same_layout and _has_storage(a) and _has_storage(b)
        if dense:
            same_stride = check('stride', a.stride(), b.stride())
            same_offset = check('storage_offset', a.storage_offset(), b.storage_offset())
            same_storage = self.compare_storage(a, b, path)
            layout_same = same_dtype and same_shape and same_stride and same_offset
            if same_dtype and same_shape and not (layout_same and same_storage):
                self.compare_values(a, b, path)
        elif same_layout and a.layout != torch.strided:
            if a.layout == torch.sparse_coo:
                check('is_coalesced', a.is_coalesced(), b.is_coalesced())
            parts_b = dict(_sparse_parts(b))
            for suffix, part in _sparse_parts(a):
                if suffix in parts_b:
                    self.keep.append((part, parts_b[suffix]))
                    self.visit(part, parts_b[suffix], path + suffix, depth + 1)
        self.compare_attrs(a, b, path, depth)

    def compare_qparams(self, a, b, path: str, depth: int) -> None:
        if a.qscheme() != b.qscheme():
            self.diff(path, f'qscheme {a.qscheme()} != {b.qscheme()}')
        elif a.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            self.visit(a.q_scale(), b.q_scale(), path + '.q_scale()', depth + 1)
            self.visit(a.q_zero_point(), b.q_zero_point(), path + '.q_zero_point()', depth + 1)
        else:
            for name in ('q_per_channel_scales', 'q_per_channel_zero_points'):
                self.visit(getattr(a, name)(), getattr(b, name)(), f'{path}.{name}()', depth + 1)
            self.visit(a.q_per_channel_axis(), b.q_per_channel_axis(),
                       path + '.q_per_channel_axis()', depth + 1)

    def compare_values(self, a: torch.Tensor, b: torch.Tensor, path: str) -> None:
        try:
            ea, eb = _element_bytes(a), _element_bytes(b)
        except RuntimeError as exc:
            self.diff(path, f'could not read tensor elements: {exc}')
            return
        self.report_elements(ea, eb, tuple(a.shape), path, 'values', a, b)

    def report_elements(self, ea, eb, shape, path, what, ta, tb) -> None:
        """Report elements whose raw bytes differ (ea/eb: (numel, itemsize) uint8)."""
        if np.array_equal(ea, eb):
            return
        bad = np.flatnonzero((ea != eb).any(axis=1))
        first = int(bad[0])
        index = tuple(int(i) for i in np.unravel_index(first, shape)) if shape else ()
        bits_a = '0x' + ea[first][::-1].tobytes().hex()
        bits_b = '0x' + eb[first][::-1].tobytes().hex()
        self.diff(path, f'{what} differ in {len(bad)} of {len(ea)} elements; first at index '
                        f'{index}: {bits_a}{_element_value(ta, first)} != '
                        f'{bits_b}{_element_value(tb, first)}')

    def compare_storage(self, a, b, path: str) -> bool:
        """Compare the whole storages behind a and b (once per pair); True if equal."""
        key = (self.storage_key(0, a), self.storage_key(1, b))
        if key in self.storage_equal:
            return self.storage_equal[key]
        ua, ub = _untyped(a), _untyped(b)
        equal = True
        if ua.nbytes() != ub.nbytes():
            self.diff(path, f'storage nbytes {ua.nbytes()} != {ub.nbytes()}')
            equal = False
        else:
            ba, bb = storage_bytes(ua), storage_bytes(ub)
            if ba is not None and bb is not None and not np.array_equal(ba, bb):
                bad = np.flatnonzero(ba != bb)
                self.diff(path, f'storage bytes differ in {len(bad)} of {len(ba)} bytes; '
                                f'first at byte {int(bad[0])}: '
                                f'0x{int(ba[bad[0]]):02x} != 0x{int(bb[bad[0]]):02x}')
                equal = False
        self.storage_equal[key] = equal
        return equal

    def compare_bare_storage(self, a, b, path: str) -> None:
        self.tensor_storages.append((path, self.storage_key(0, a), self.storage_key(1, b)))
        if isinstance(a, torch.TypedStorage) and isinstance(b, torch.TypedStorage):
            if a.dtype != b.dtype:
                self.diff(path, f'storage dtype {_dtype_name(a.dtype)} != {_dtype_name(b.dtype)}')
        if _untyped(a).device != _untyped(b).device:
            self.diff(path, f'storage device {_untyped(a).device} != {_untyped(b).device}')
        self.compare_storage(a, b, path)

    # -- whole-graph checks ------------------------------------------------

    def check_sharing(self) -> None:
        """Tensors sharing a storage in one graph must share it in the other.

        Paths are split into connected components of "shares a storage on
        either side"; a component is reported if its partition into storages
        differs between expected and actual.
        """
        key_a = {p: ka for p, ka, _ in self.tensor_storages}
        key_b = {p: kb for p, _, kb in self.tensor_storages}
        parent = {p: p for p in key_a}

        def find(p):
            while parent[p] != p:
                parent[p] = parent[parent[p]]
                p = parent[p]
            return p

        for keys in (key_a, key_b):
            first_with_key = {}
            for p, k in keys.items():
                parent[find(p)] = find(first_with_key.setdefault(k, p))
        components: Dict[str, List[str]] = {}
        for p in key_a:
            components.setdefault(find(p), []).append(p)
        for members in components.values():
            if len(members) == 1:
                continue
            part_a, part_b = _partition(members, key_a), _partition(members, key_b)
            if part_a != part_b:
                self.diff(members[0], f'storage sharing differs: expected storages '
                                      f'{_format_partition(part_a)}, actual storages '
                                      f'{_format_partition(part_b)}')

    def check_locations(self) -> None:
        exp_locs, act_locs = self.locs
        if self.options.ignore_locations:
            return
        first_path_b = {}
        for path, _, kb in self.tensor_storages:
            first_path_b.setdefault(kb, path)
        want = self.options.expect_location
        if want is not None:
            if act_locs is None:
                return
            for key, loc in act_locs.items():
                if loc != want:
                    where = first_path_b.get(key, f'<storage not reached, id {key}>')
                    self.diff(where, f'saved location {loc!r}, expected {want!r}')
            return
        if exp_locs is None or act_locs is None:
            return
        done = set()
        for path, ka, kb in self.tensor_storages:
            if (ka, kb) in done:
                continue
            done.add((ka, kb))
            la, lb = exp_locs.get(ka), act_locs.get(kb)
            if la != lb:
                self.diff(path, f'saved location {la!r} != {lb!r}')


def _dtype_name(dtype) -> str:
    return str(dtype).replace('torch.', '')


def _element_value(t, flat_index: int) -> str:
    """' (value)' for error messages, or '' when it cannot be shown."""
    if t is None:
        return ''
    try:
        value = t.reshape(-1)[flat_index]
        value = value.int_repr() if t.is_quantized else value
        return f' ({value.item()!r})'
    except Exception:        # noqa: BLE001
        return ''


def _partition(members: List[str], key_of: Dict[str, Any]) -> List[List[str]]:
    """Split paths into groups with equal storage keys, in a canonical order."""
    groups: Dict[Any, List[str]] = {}
    for p in members:
        groups.setdefault(key_of[p], []).append(p)
    return sorted(sorted(g) for g in groups.values())


def _format_partition(partition: List[List[str]]) -> str:
    return ' | '.join('{' + ', '.join(_show(p) for p in group) + '}' for group in partition)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def load_transform(spec: str):
    """Return the function named by 'FILE.py:FUNC'."""
    file_name, sep, func_name = spec.rpartition(':')
    if not sep or not file_name or not func_name:
        raise ValueError(f'--expected-python wants FILE.py:FUNC, got {spec!r}')
    module_spec = importlib.util.spec_from_file_location('_torch_compare_transform', file_name)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f'cannot import {file_name!r}')
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, func_name)


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description='Compare two PyTorch checkpoints exactly, using real torch.load.')
    parser.add_argument('expected', help='reference checkpoint')
    parser.add_argument('actual', help='checkpoint under test (e.g. written by ckptfix)')
    parser.add_argument('--expect-location', metavar='LOC',
                        help="require every storage of ACTUAL to be saved with location LOC "
                             "(instead of EXPECTED's locations); with 'cpu' also require a "
                             "plain torch.load(ACTUAL) to work")
    parser.add_argument('--ignore-locations', action='store_true',
                        help='do not check saved locations')
    parser.add_argument('--max-diffs', type=int, default=50, metavar='N',
                        help='print at most N differences (default 50)')
    parser.add_argument('--expected-python', metavar='FILE.py:FUNC',
                        help='transform the loaded EXPECTED object with FUNC(obj) before '
                             'comparing (FUNC may mutate obj and return None); locations '
                             'are kept by storage, then by tensor path')
    parser.add_argument('--no-aliasing-check', action='store_true',
                        help='do not require Python object identity (pickle memo '
                             'references) to match')
    args = parser.parse_args(argv)
    if args.expect_location is not None and args.ignore_locations:
        parser.error('--expect-location and --ignore-locations exclude each other')
    if args.max_diffs < 0:
        parser.error('--max-diffs must be >= 0')
    return args


def main(argv=None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    loaded = []
    for path in (args.expected, args.actual):
        try:
            loaded.append(load_with_locations(path))
        except Exception as exc:     # noqa: BLE001
            print(f'error: cannot load {path}: {type(exc).__name__}: {exc}', file=sys.stderr)
            return 2
    (expected, exp_locs), (actual, act_locs) = loaded

    if args.expected_python:
        try:
            transform = load_transform(args.expected_python)
            expected, exp_locs = apply_transform(expected, exp_locs, transform)
        except Exception as exc:     # noqa: BLE001
            print(f'error: --expected-python {args.expected_python}: '
                  f'{type(exc).__name__}: {exc}', file=sys.stderr)
            return 2

    options = CompareOptions(ignore_locations=args.ignore_locations,
                             expect_location=args.expect_location,
                             check_aliasing=not args.no_aliasing_check)
    try:
        result = compare_detailed(expected, actual, exp_locs, act_locs, options)
    except Exception:            # noqa: BLE001 - a crash must not read as "different"
        traceback.print_exc()
        print('error: the comparison itself failed (bug in torch_compare.py)', file=sys.stderr)
        return 2
    diffs = list(result.diffs)
    if args.expect_location == 'cpu':
        diffs += check_plain_load(args.actual)
    if not diffs:
        print(f'equal: {result.tensors} tensors, {result.storages} storages compared')
        return 0
    for line in diffs[:args.max_diffs]:
        print(line)
    if len(diffs) > args.max_diffs:
        print(f'... and {len(diffs) - args.max_diffs} more differences')
    print(f'DIFFERENT: {len(diffs)} differences')
    return 1


if __name__ == '__main__':
    sys.exit(main())
