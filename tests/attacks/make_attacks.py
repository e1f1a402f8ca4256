#!/usr/bin/env python3
"""Write the hostile checkpoint files ckptfix must survive (issue 12).

Usage:
    python3 tests/attacks/make_attacks.py OUTDIR [NAME...]

Pure Python (no torch, no numpy), deterministic: the same bytes on every run
and machine. Nothing here ever unpickles anything. tests/cli/test_attacks.py
runs every reading command of ckptfix on each file and checks the outcome;
docs/security.md describes the attack classes and the limits that stop them.

Each file is a torch zip checkpoint (or a legacy stream file) built by hand:
the pickles are assembled opcode by opcode, the zip archive record by record,
so that a file can lie (a declared size, a length field) exactly where the
attack needs it and nowhere else. The files, by class:

  injection   stack_global_injection.pt, module_newline_injection.pt,
              inst_bad_name.pt, global_not_identifier.pt, non_utf8_global.pt
  depth       deep_build_chain.pt, deep_namespace_chain.pt, deep_list.pt
  names       many_dots_global.pt
  sharing     shared_dag.pt, deep_shared_key.pt, laughs_tensors.pt,
              laughs_dicts.pt, laughs_long_key.pt, laughs_wide.pt, laughs_deep.pt,
              laughs_objects.pt, laughs_padded.pt
  stack       pop_below_mark.pt
  calls       calls_function.pt, calls_function_via_memo.pt, calls_partial.pt,
              calls_partial_set_by_state.pt, calls_partial_after_call.pt,
              calls_via_rebuild_from_type.pt, calls_via_reconstructor.pt,
              calls_via_unknown_class.pt, calls_via_newobj.pt, calls_via_inst.pt,
              calls_via_obj.pt (a function held as a value, called while
              loading), function_module_attribute.pt,
              function_reading_files.pt (gadgets under a function module);
              held_functions.pt (sound: the functions only held)
  memory      zip_declares_4gib_pickle.pt, deflate_bomb_pickle.pt,
              deflate_bomb_storage.pt, none_pop_loop.pt, many_live_values.pt,
              many_tiny_storages.pt
  time        long_decimal.pt, many_globals.pt, big_metadata.pt
  output      non_utf8_key.pt, terminal_escapes.pt, non_utf8_str_key.pt (refused: CPython does)
  tensors     huge_shape_stride0.pt, huge_nbytes.pt
  diff        expanded_huge.pt, deflated_views.pt (sound; diffing one with
              itself read without bound)
  reference   good.pt (a sound state dict, the other side of `diff`)
"""

import os
import struct
import sys
import zlib

# ---------------------------------------------------------------------------
# Pickle opcodes (CPython Lib/pickle.py); only what the attacks need.
# ---------------------------------------------------------------------------

MARK, STOP, POP, NONE, APPEND, APPENDS = b'(', b'.', b'0', b'N', b'a', b'e'
BUILD, DICT, EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE = b'b', b'd', b'}', b']', b')'
LIST, REDUCE, SETITEM, SETITEMS, TUPLE = b'l', b'R', b's', b'u', b't'
TUPLE1, TUPLE2, BINPERSID, NEWFALSE = b'\x85', b'\x86', b'Q', b'\x89'
STACK_GLOBAL = b'\x93'


def proto(n):
    return b'\x80' + bytes([n])


def global_op(module, name):
    """GLOBAL: module and name as text lines (bytes or str)."""
    m = module.encode() if isinstance(module, str) else module
    n = name.encode() if isinstance(name, str) else name
    return b'c' + m + b'\n' + n + b'\n'


def inst_op(module, name):
    return b'i' + module.encode() + b'\n' + name.encode() + b'\n'


def unicode_op(s):
    """BINUNICODE of a str, or of raw bytes (which need not be UTF-8)."""
    b = s.encode() if isinstance(s, str) else s
    return b'X' + struct.pack('<I', len(b)) + b


def int_op(i):
    if 0 <= i < 256:
        return b'K' + bytes([i])
    if 0 <= i < 65536:
        return b'M' + struct.pack('<H', i)
    if -2**31 <= i < 2**31:
        return b'J' + struct.pack('<i', i)
    n = (i.bit_length() + 8) // 8
    return b'\x8a' + bytes([n]) + i.to_bytes(n, 'little', signed=True)


def binput(i):
    return b'q' + bytes([i]) if i < 256 else b'r' + struct.pack('<I', i)


def binget(i):
    return b'h' + bytes([i]) if i < 256 else b'j' + struct.pack('<I', i)


def tuple_of(parts):
    return MARK + b''.join(parts) + TUPLE


def ordered_dict():
    """collections.OrderedDict(): the empty backward hooks of every tensor."""
    return global_op('collections', 'OrderedDict') + EMPTY_TUPLE + REDUCE


def tensor(storage_key, numel, shape, stride, offset=0, storage_class='FloatStorage', location='cpu'):
    """A torch._utils._rebuild_tensor_v2 call as torch.save writes it."""
    pid = tuple_of([unicode_op('storage'), global_op('torch', storage_class), unicode_op(storage_key),
                    unicode_op(location), int_op(numel)]) + BINPERSID
    return (global_op('torch._utils', '_rebuild_tensor_v2')
            + tuple_of([pid, int_op(offset), tuple_of([int_op(d) for d in shape]),
                        tuple_of([int_op(s) for s in stride]), NEWFALSE, ordered_dict()])
            + REDUCE)


def state_dict(entries):
    """An OrderedDict of (key, value pickle) pairs; keys are str or raw bytes
    (BINUNICODE), or a bytearray: a Python 2 byte string (SHORT_BINSTRING)."""
    out = ordered_dict() + MARK
    for key, value in entries:
        if isinstance(key, bytearray):
            out += b'U' + bytes([len(key)]) + bytes(key) + value
        else:
            out += unicode_op(key) + value
    return out + SETITEMS


# ---------------------------------------------------------------------------
# Zip archives, written by hand so that any field can lie.
# ---------------------------------------------------------------------------

class Record:
    """One zip member: the bytes as they lie in the file, and what the
    directory says about them (declared size and CRC default to the truth)."""

    def __init__(self, name, data, deflated=False, size=None, crc=None):
        self.name = name.encode()
        if deflated:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            self.payload = c.compress(data) + c.flush()
        else:
            self.payload = data
        self.method = 8 if deflated else 0
        self.size = len(data) if size is None else size
        self.crc = zlib.crc32(data) if crc is None else crc


def raw_deflated(name, payload, size, crc):
    """A record whose deflated bytes are given as they are (bombs)."""
    r = Record(name, b'')
    r.payload, r.method, r.size, r.crc = payload, 8, size, crc
    return r


def write_zip(path, records):
    """Local headers, data, central directory (zip64 extras where a size
    needs them), end of central directory. Timestamps are fixed."""
    chunks, central, offset = [], [], 0
    for r in records:
        big = r.size >= 0xFFFFFFFF or len(r.payload) >= 0xFFFFFFFF
        extra = struct.pack('<HHQQ', 1, 16, r.size, len(r.payload)) if big else b''
        csize = 0xFFFFFFFF if big else len(r.payload)
        usize = 0xFFFFFFFF if big else r.size
        local = struct.pack('<IHHHHHIIIHH', 0x04034b50, 45 if big else 20, 0, r.method, 0, 0x21,
                            r.crc, csize, usize, len(r.name), len(extra)) + r.name + extra
        central.append(struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 45 if big else 20, 45 if big else 20, 0,
                                   r.method, 0, 0x21, r.crc, csize, usize, len(r.name), len(extra), 0, 0, 0, 0,
                                   offset) + r.name + extra)
        chunks += [local, r.payload]
        offset += len(local) + len(r.payload)
    cd = b''.join(central)
    n = len(records)
    end = b''
    if n >= 0xFFFF:  # zip64 end record and locator, as torch writes them
        zip64_eocd = offset + len(cd)
        end += struct.pack('<IQHHIIQQQQ', 0x06064b50, 44, 45, 45, 0, 0, n, n, len(cd), offset)
        end += struct.pack('<IIQI', 0x07064b50, 0, zip64_eocd, 1)
    end += struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), len(cd), offset, 0)
    with open(path, 'wb') as f:
        for c in chunks:
            f.write(c)
        f.write(cd)
        f.write(end)


def checkpoint(path, pickle_bytes, storages=(), pickle_deflated=False, pickle_size=None, root='archive'):
    """A torch zip checkpoint: data.pkl, data/<key> for each (key, bytes), version."""
    records = [Record(f'{root}/data.pkl', pickle_bytes, deflated=pickle_deflated, size=pickle_size)]
    records += [s if isinstance(s, Record) else Record(f'{root}/data/{s[0]}', s[1]) for s in storages]
    records += [Record(f'{root}/version', b'3\n')]
    write_zip(path, records)


def float_state_dict_pickle(entries):
    """Protocol 2 pickle of an OrderedDict of float32 tensors: (key, storage key, numel)."""
    return proto(2) + state_dict([(k, tensor(s, n, (n,), (1,))) for k, s, n in entries]) + STOP


# ---------------------------------------------------------------------------
# The attacks
# ---------------------------------------------------------------------------

FOUR_FLOATS = struct.pack('<4f', 1.0, 2.0, 3.0, 4.0)


def good(path):
    """The reference: {'w': tensor([1., 2., 3., 4.])}."""
    checkpoint(path, float_state_dict_pickle([('w', '0', 4)]), [('0', FOUR_FLOATS)])


def stack_global_injection(path):
    """A STACK_GLOBAL name carrying pickle opcodes after a newline. Read, it
    fails in torch.load; written back as GLOBAL text by ckptfix <= 0562585,
    the newline turned it into real opcodes calling posix.system."""
    name = 'OrderedDict\n0cposix\nsystem\n(Vtouch ckptfix-pwned-injection\ntR0ccollections\nOrderedDict'
    p = proto(4) + b'\x8c\x0bcollections' + unicode_op(name) + STACK_GLOBAL + EMPTY_TUPLE + REDUCE + STOP
    checkpoint(path, p)


def module_newline_injection(path):
    """The same through the module operand of STACK_GLOBAL."""
    module = 'collections\nOrderedDict\n0cposix\nsystem\n(Vtouch ckptfix-pwned-module\ntR0ccollections'
    p = proto(4) + unicode_op(module) + unicode_op('OrderedDict') + STACK_GLOBAL + EMPTY_TUPLE + REDUCE + STOP
    checkpoint(path, p)


def inst_bad_name(path):
    """INST with a class name that is no identifier."""
    checkpoint(path, proto(2) + MARK + inst_op('collections', 'Ordered Dict') + STOP)


def global_not_identifier(path):
    """GLOBAL with an empty dotted component in the module."""
    checkpoint(path, proto(2) + global_op('torch..nn', 'Linear') + STOP)


def non_utf8_global(path):
    """GLOBAL whose module is not UTF-8 (inspect --json aborted on it)."""
    checkpoint(path, proto(2) + global_op(b'collections\xff', 'OrderedDict') + EMPTY_TUPLE + REDUCE + STOP)


def deep_build_chain(path, depth=100_000):
    """argparse.Namespace objects, each BUILT with the next one as its state,
    100k deep: the graph walk recursed on every state (stack overflow in
    inspect, convert, check). torch.load refuses it too ("state is not a
    dictionary"); deep_namespace_chain.pt is the same depth torch reads."""
    p = proto(2) + global_op('argparse', 'Namespace') + binput(0)
    p += (binget(0) + EMPTY_TUPLE + REDUCE) * depth + NONE + BUILD * depth + STOP
    checkpoint(path, p)


def deep_namespace_chain(path, depth=100_000):
    """argparse.Namespace objects, each BUILT with {'next': the next one},
    100k deep. torch.load(weights_only=False) reads it: its unpickler does
    not recurse."""
    p = proto(2) + global_op('argparse', 'Namespace') + binput(0) + unicode_op('next') + binput(1) + POP
    p += (binget(0) + EMPTY_TUPLE + REDUCE + MARK + binget(1)) * (depth - 1)
    p += binget(0) + EMPTY_TUPLE + REDUCE + (DICT + BUILD) * (depth - 1) + STOP
    checkpoint(path, p)


def deep_list(path, depth=100_000):
    """[[[[...]]]] 100k deep."""
    p = proto(2) + EMPTY_LIST * depth + APPEND * (depth - 1) + STOP
    checkpoint(path, p)


def many_dots_global(path, dots=200_000):
    """A global name of 200k dots (stack overflow and ~GiBs in classification)."""
    checkpoint(path, proto(2) + global_op('torch', '.'.join(['a'] * (dots + 1))) + STOP)


def shared_dag(path, levels=64):
    """A list shared through the memo: L0 = [], L(i+1) = [Li, Li], 64 levels
    (1.3 KB). Walking every path takes 2^64 steps; torch reads it in 1 ms."""
    p = proto(2) + EMPTY_LIST + binput(0)
    for i in range(levels):
        p += EMPTY_LIST + MARK + binget(i) + binget(i) + APPENDS + binput(i + 1)
    checkpoint(path, p + STOP)


def _laughs(path, leaf, level, levels, deflated=False):
    """A billion-laughs graph over a tensor: `leaf` (pickle of the value at
    the bottom) memoized as 0, then each level built by `level(prev)` (the
    pickle of a container holding memo entry `prev` several times) and
    memoized. torch.load reads each such file in a millisecond: it is one
    tensor and `levels` small containers."""
    p = proto(2) + leaf + binput(0)
    for i in range(levels):
        p += level(binget(i)) + binput(i + 1)
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)], pickle_deflated=deflated)


def _tensor_leaf():
    return tensor('0', 4, (4,), (1,))


def laughs_tensors(path, levels=64):
    """L0 = tensor, L(i+1) = [Li, Li]: 2^64 paths to one tensor (917 bytes).
    Before issue 22, inspect/check/verify kept every path the walk reached
    until the step limit and peaked at 1.2 GiB."""
    _laughs(path, _tensor_leaf(), lambda prev: EMPTY_LIST + MARK + prev + prev + APPENDS, levels)


def laughs_dicts(path, levels=64):
    """D0 = OrderedDict{'w': tensor} (a state dict), D(i+1) = {'a': Di, 'b': Di}:
    2^64 positions of one state dict."""
    leaf = state_dict([('w', _tensor_leaf())])
    _laughs(path, leaf, lambda prev: EMPTY_DICT + MARK + unicode_op('a') + prev + unicode_op('b') + prev + SETITEMS,
            levels)


def laughs_long_key(path, levels=64, key_bytes=1 << 20):
    """D0 = OrderedDict{1 MiB key: tensor} (a state dict whose key a reader
    copies), then [Di, Di]: every position of D0 holds 1 MiB of keys."""
    leaf = state_dict([('k' * key_bytes, _tensor_leaf())])
    _laughs(path, leaf, lambda prev: EMPTY_LIST + MARK + prev + prev + APPENDS, levels, deflated=True)


def laughs_wide(path, levels=16):
    """L(i+1) = (Li,) * 16 as tuples: 16^16 paths to one tensor."""
    _laughs(path, _tensor_leaf(), lambda prev: MARK + prev * 16 + TUPLE, levels)


def laughs_deep(path, levels=900):
    """900 levels of [Li, Li] with long keys on the way: deep and shared, each
    path 900 elements long."""
    key = unicode_op('k' * 64)
    _laughs(path, _tensor_leaf(),
            lambda prev: EMPTY_DICT + MARK + key + prev + unicode_op('k' * 63 + 'b') + prev + SETITEMS, levels)


def laughs_padded(path, depth=990, width=20_000, padding=100_000):
    """One tensor at 20000 places of a list under dicts 990 deep, beside a
    list of 100k ints that only raise the walk's allowance (16 steps a
    value): every position's path is 990 keys long."""
    p = proto(2) + EMPTY_LIST + MARK + b''.join(int_op(i) for i in range(padding)) + APPENDS
    p += _tensor_leaf() + binput(0) + POP
    p += (EMPTY_DICT + unicode_op('k')) * depth
    p += EMPTY_LIST + MARK + binget(0) * width + APPENDS + SETITEM * depth + TUPLE2
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)])


def laughs_objects(path, levels=64):
    """Namespaces whose attributes are the level below, twice, and the tensor:
    objects, dicts and lists mixed."""
    def level(prev):
        return (global_op('argparse', 'Namespace') + EMPTY_TUPLE + REDUCE + EMPTY_DICT + MARK +
                unicode_op('x') + prev + unicode_op('y') + EMPTY_LIST + MARK + prev + binget(0) + APPENDS +
                SETITEMS + BUILD)
    _laughs(path, _tensor_leaf(), level, levels)


def deep_shared_key(path, levels=900, key_bytes=1 << 20):
    """Dicts nested 900 deep, every one keyed by the same memoized 1 MiB str:
    every path is 900 MiB, though the pickle is 1 MiB."""
    p = proto(2) + unicode_op('k' * key_bytes) + binput(0) + POP
    p += (EMPTY_DICT + binget(0)) * levels + NONE + SETITEM * levels + STOP
    checkpoint(path, p, pickle_deflated=True)


# -- calls: a function a model may hold as a value, called while loading ----

NEWOBJ, OBJ = b'\x81', b'o'


def _gelu():
    """torch.nn.functional.gelu as torch.save spells it."""
    return global_op('torch._C._nn', 'gelu')


def _with_tensor(value_pickle, key='y'):
    """A state dict {'w': tensor, key: value} around a value's pickle."""
    return proto(2) + state_dict([('w', _tensor_leaf()), (key, value_pickle)]) + STOP


def _checkpoint_with(path, value_pickle, key='y'):
    checkpoint(path, _with_tensor(value_pickle, key), [('0', FOUR_FLOATS)])


def held_functions(path):
    """Sound: functions held as values, as models hold activations, and a
    functools.partial binding a layer's constructor (never called)."""
    partial = (global_op('functools', 'partial') + tuple_of([global_op('torch.nn.modules.normalization', 'LayerNorm')])
               + REDUCE + tuple_of([global_op('torch.nn.modules.normalization', 'LayerNorm'), EMPTY_TUPLE,
                                    EMPTY_DICT + unicode_op('eps') + b'G' + struct.pack('>d', 1e-6) + SETITEM, NONE])
               + BUILD)
    p = proto(2) + state_dict([('weight', _tensor_leaf()), ('act', _gelu()), ('silu', global_op('torch.nn.functional', 'silu')),
                               ('norm_layer', partial)]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS)])


def calls_function(path):
    """REDUCE(torch._C._nn.gelu, (tensor,)): loading would call it."""
    _checkpoint_with(path, _gelu() + tuple_of([_tensor_leaf()]) + REDUCE)


def calls_function_via_memo(path):
    """gelu held under 'act' (memoized), then the memo entry called."""
    p = proto(2) + state_dict([('act', _gelu() + binput(1)), ('y', binget(1) + tuple_of([_tensor_leaf()]) + REDUCE)])
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)])


def calls_partial(path):
    """p = functools.partial(gelu) held as a value, then p(tensor) called."""
    p = proto(2) + state_dict([
        ('f', global_op('functools', 'partial') + tuple_of([_gelu()]) + REDUCE + binput(1)),
        ('y', binget(1) + tuple_of([_tensor_leaf()]) + REDUCE)])
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)])


def calls_partial_set_by_state(path):
    """A partial made of a harmless class, its function replaced by BUILD
    (partial.__setstate__) with gelu, then called."""
    p = proto(2) + state_dict([
        ('f', global_op('functools', 'partial') + tuple_of([global_op('collections', 'OrderedDict')]) + REDUCE +
         tuple_of([_gelu(), EMPTY_TUPLE, NONE, NONE]) + BUILD + binput(1)),
        ('y', binget(1) + tuple_of([_tensor_leaf()]) + REDUCE)])
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)])


def calls_partial_after_call(path):
    """A partial called once, then given gelu by BUILD: a later call would run it."""
    p = proto(2) + state_dict([
        ('f', global_op('functools', 'partial') + tuple_of([global_op('collections', 'OrderedDict')]) + REDUCE +
         binput(1)),
        ('y', binget(1) + EMPTY_TUPLE + REDUCE),
        ('g', binget(1) + tuple_of([_gelu(), EMPTY_TUPLE, NONE, NONE]) + BUILD)])
    checkpoint(path, p + STOP, [('0', FOUR_FLOATS)])


def calls_via_rebuild_from_type(path):
    """torch._tensor._rebuild_from_type_v2(gelu, torch.Tensor, (tensor,), {}) calls gelu(tensor)."""
    _checkpoint_with(path, global_op('torch._tensor', '_rebuild_from_type_v2') +
                     tuple_of([_gelu(), global_op('torch', 'Tensor'), tuple_of([_tensor_leaf()]), EMPTY_DICT]) + REDUCE)


def calls_via_reconstructor(path):
    """copyreg._reconstructor(cls, base, state) makes base.__new__(cls): here cls is gelu."""
    _checkpoint_with(path, global_op('copyreg', '_reconstructor') +
                     tuple_of([_gelu(), global_op('builtins', 'object'), NONE]) + REDUCE)


def calls_via_unknown_class(path):
    """A project's class called with {'f': [gelu]}: its code may call what it is given."""
    _checkpoint_with(path, global_op('mypackage.layers', 'Block') +
                     tuple_of([EMPTY_DICT + unicode_op('f') + EMPTY_LIST + _gelu() + APPEND + SETITEM]) + REDUCE)


def calls_via_newobj(path):
    """NEWOBJ: gelu.__new__(gelu)."""
    _checkpoint_with(path, _gelu() + EMPTY_TUPLE + NEWOBJ)


def calls_via_inst(path):
    """INST torch._C._nn gelu: the protocol-0 spelling of a call."""
    _checkpoint_with(path, MARK + inst_op('torch._C._nn', 'gelu'))


def calls_via_obj(path):
    """OBJ with gelu as the class."""
    _checkpoint_with(path, MARK + _gelu() + OBJ)


def function_module_attribute(path):
    """torch.nn.functional.os is the os module: a name under a function
    module is still judged as a gadget."""
    _checkpoint_with(path, global_op('torch.nn.functional', 'os'))


def function_reading_files(path):
    """A method that reads files (from_file), under a function module: refused even held."""
    _checkpoint_with(path, global_op('torch._C._nn', 'from_file'))


def pop_below_mark(path):
    """`(l(0l`: POP of an empty mark region then LIST left the mark above the
    stack top (std::length_error, no file named; diff aborted)."""
    checkpoint(path, proto(2) + b'(l(0l' + STOP)


def zip_declares_4gib_pickle(path):
    """290 bytes whose directory declares a 4 GiB data.pkl (allocated up front)."""
    pickle = float_state_dict_pickle([('w', '0', 4)])
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    write_zip(path, [raw_deflated('archive/data.pkl', c.compress(pickle) + c.flush(), 1 << 32, zlib.crc32(pickle)),
                     Record('archive/version', b'3\n')])


def _crc32_shift_matrix(n):
    """zlib's crc32_combine operator for n zero bytes, as 32 column vectors."""
    def times(mat, vec):
        out, i = 0, 0
        while vec:
            if vec & 1:
                out ^= mat[i]
            vec >>= 1
            i += 1
        return out

    def square(mat):
        return [times(mat, mat[i]) for i in range(32)]

    odd = [0xEDB88320] + [1 << i for i in range(31)]  # one zero bit
    even = square(odd)                                  # two zero bits
    odd = square(even)                                  # four zero bits
    result = [1 << i for i in range(32)]                # identity
    while n:
        even = square(odd)                              # first time: one zero byte
        if n & 1:
            result = [times(even, c) for c in result]
        n >>= 1
        if not n:
            break
        odd = square(even)
        if n & 1:
            result = [times(odd, c) for c in result]
        n >>= 1
    return result, times


def crc32_combine(crc1, crc2, len2):
    """CRC-32 of A + B from CRC(A), CRC(B) and len(B) (zlib's crc32_combine)."""
    if len2 == 0:
        return crc1
    mat, times = _crc32_shift_matrix(len2)
    return times(mat, crc1) ^ crc2


def crc32_repeated(unit, count):
    """CRC-32 of unit * count, in O(log count) combines."""
    crc, piece, piece_len = 0, zlib.crc32(unit), len(unit)
    while count:
        if count & 1:
            crc = crc32_combine(crc, piece, piece_len)
        piece = crc32_combine(piece, piece, piece_len)
        piece_len *= 2
        count >>= 1
    return crc


def deflate_flushed(unit, count):
    """Raw deflate blocks of unit * count, ending in a full flush and no final
    block (so more blocks may follow), without building unit * count: one
    1 MiB chunk compressed after a full flush does not refer back, so its
    bytes repeat."""
    reps = max(1, (1 << 20) // len(unit))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(unit * reps) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(unit * reps) + c.flush(zlib.Z_FULL_FLUSH)
    assert first == again, 'deflate blocks do not repeat'
    whole, rest = divmod(count, reps)
    out = first * whole
    if rest:
        out += c.compress(unit * rest) + c.flush(zlib.Z_FULL_FLUSH)
    return out


def deflated_record(name, segments):
    """A deflated record of the concatenation of segments, each a bytes or a
    (unit, count) repetition; declared size and CRC are the true ones."""
    payload, size, crc = b'', 0, 0
    for seg in segments:
        unit, count = (seg, 1) if isinstance(seg, bytes) else seg
        payload += deflate_flushed(unit, count)
        crc = crc32_combine(crc, crc32_repeated(unit, count), len(unit) * count)
        size += len(unit) * count
    payload += zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # the final (empty) block
    return raw_deflated(name, payload, size, crc)


def deflate_bomb_pickle(path, pairs=256 << 20):
    """data.pkl inflating ~1000:1 to 512 MiB of NONE, POP, then a sound root."""
    tail = state_dict([('w', tensor('0', 4, (4,), (1,)))]) + STOP
    write_zip(path, [deflated_record('archive/data.pkl', [proto(2), (NONE + POP, pairs), tail]),
                     Record('archive/data/0', FOUR_FLOATS), Record('archive/version', b'3\n')])


def deflate_bomb_storage(path, gib=10):
    """A float tensor whose deflated storage inflates to 10 GiB of zeros
    (about 1030:1); converting it wrote a 10 GiB file."""
    n = (gib << 30) // 4
    storage = deflated_record('archive/data/0', [(b'\0', gib << 30)])
    checkpoint(path, float_state_dict_pickle([('w', '0', n)]), [storage])


def none_pop_loop(path, pairs=30 << 20):
    """data.pkl: 30M times NONE, POP (60 MiB deflated to ~60 KB), and no STOP:
    each None was kept (224 bytes each) until the truncation was found."""
    write_zip(path, [deflated_record('archive/data.pkl', [proto(2), (NONE + POP, pairs)]),
                     Record('archive/version', b'3\n')])


def many_live_values(path, count=20 << 20):
    """A list APPENDed 20M Nones (40 MiB deflated to ~40 KB): every value stays alive."""
    write_zip(path, [deflated_record('archive/data.pkl', [proto(2) + EMPTY_LIST, (NONE + APPEND, count), STOP]),
                     Record('archive/version', b'3\n')])


def many_tiny_storages(path, count=1_000_000):
    """A list of 1M one-element float storages, each its own zip record."""
    p = proto(2) + EMPTY_LIST + binput(0) + unicode_op('storage') + binput(1) + POP
    p += global_op('torch', 'FloatStorage') + binput(2) + POP + unicode_op('cpu') + binput(3) + POP
    items = [MARK + binget(1) + binget(2) + unicode_op(str(i)) + binget(3) + b'K\x01' + TUPLE + BINPERSID
             for i in range(count)]
    p = b''.join([p] + [MARK + b''.join(items[i:i + 1000]) + APPENDS for i in range(0, count, 1000)] + [STOP])
    one = struct.pack('<f', 1.0)
    records = [Record('archive/data.pkl', p, deflated=True)]
    records += [Record(f'archive/data/{i}', one) for i in range(count)]
    records += [Record('archive/version', b'3\n')]
    write_zip(path, records)


def long_decimal(path, digits=1_000_000):
    """LONG with a 1M-digit decimal literal (quadratic to convert)."""
    checkpoint(path, proto(2) + b'L' + b'7' * digits + b'L\n' + STOP)


def many_globals(path, count=200_000):
    """A list of 200k distinct globals (each was compared with all before it)."""
    batches = [MARK + b''.join(global_op('mypackage.layers', f'Layer{j}') for j in range(i, i + 1000)) + APPENDS
               for i in range(0, count, 1000)]
    checkpoint(path, b''.join([proto(2), EMPTY_LIST] + batches + [STOP]))


def big_metadata(path, count=200_000):
    """A DataParallel state dict whose _metadata has 200k 'module.' entries:
    strip-prefix searched the whole list for each of them."""
    meta = [ordered_dict(), MARK] + [unicode_op(f'module.m{i}') + EMPTY_DICT for i in range(count)] + [SETITEMS]
    p = proto(2) + state_dict([('module.w', tensor('0', 4, (4,), (1,)))])
    p += EMPTY_DICT + unicode_op('_metadata') + b''.join(meta) + SETITEM + BUILD + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS)], pickle_deflated=True)


def non_utf8_key(path):
    """A state dict key that is not UTF-8 (inspect --json aborted): a Python 2
    byte string, which ckptfix keeps as the bytes it is (torch.load reads it
    with encoding='latin1')."""
    p = proto(2) + state_dict([(bytearray(b'w\xff\xfe'), tensor('0', 4, (4,), (1,)))]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS)])


def non_utf8_str_key(path):
    """A str key whose bytes are not UTF-8: CPython refuses to load it (issue 66)."""
    p = proto(2) + state_dict([(b'w\xff\xfe', tensor('0', 4, (4,), (1,)))]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS)])


def terminal_escapes(path):
    """Keys and a location that clear the screen, or forge a `FILE: ok` line
    in check's output."""
    entries = [('\x1b[2J\x1b[31mred', tensor('0', 4, (4,), (1,))),
               ('w\nmodel.pt: ok', tensor('0', 4, (4,), (1,))),
               ('\u202eevil', tensor('0', 4, (4,), (1,)))]
    p = proto(2) + state_dict(entries) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS)])


def huge_shape_stride0(path):
    """shape (2^32, 2^32), stride (0, 0) over one float: numel overflows 64
    bits (it was taken as 0 bytes); torch refuses it."""
    p = proto(2) + state_dict([('w', tensor('0', 1, (1 << 32, 1 << 32), (0, 0)))]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS[:4])])


def expanded_huge(path):
    """shape (2^40,), stride (0,) over one float: torch reads it (an expanded
    tensor, 4 TiB of elements); `diff` of it compared 2^40 elements."""
    p = proto(2) + state_dict([('w', tensor('0', 1, (1 << 40,), (0,)))]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS[:4])])


def deflated_views(path, views=20_000, numel=16 << 20):
    """20k one-element views at the end of one deflated 64 MiB storage:
    `diff` inflated the storage from its start for each view (1.3 TB)."""
    pid = tuple_of([unicode_op('storage'), global_op('torch', 'FloatStorage'), unicode_op('0'), unicode_op('cpu'),
                    int_op(numel)]) + binput(1)
    rebuild = global_op('torch._utils', '_rebuild_tensor_v2') + binput(2)
    shape = tuple_of([int_op(1)]) + binput(3)
    hooks = ordered_dict() + binput(4)
    parts = [proto(2), ordered_dict(), binput(0), MARK, unicode_op('t0'), rebuild, MARK, pid, BINPERSID,
             int_op(numel - 1), shape, binget(3), NEWFALSE, hooks, TUPLE, REDUCE]
    for i in range(1, views):
        parts += [unicode_op(f't{i}'), binget(2), MARK, binget(1), BINPERSID, int_op(numel - 1), binget(3), binget(3),
                  NEWFALSE, binget(4), TUPLE, REDUCE]
    parts += [SETITEMS, STOP]
    checkpoint(path, b''.join(parts), [deflated_record('archive/data/0', [(b'\0', numel * 4)])])


def huge_nbytes(path):
    """shape (2^62,) stride (0,): numel fits, numel x 4 bytes does not."""
    p = proto(2) + state_dict([('w', tensor('0', 1, (1 << 62,), (0,)))]) + STOP
    checkpoint(path, p, [('0', FOUR_FLOATS[:4])])


ATTACKS = {
    'good.pt': good,
    'stack_global_injection.pt': stack_global_injection,
    'module_newline_injection.pt': module_newline_injection,
    'inst_bad_name.pt': inst_bad_name,
    'global_not_identifier.pt': global_not_identifier,
    'non_utf8_global.pt': non_utf8_global,
    'deep_build_chain.pt': deep_build_chain,
    'deep_namespace_chain.pt': deep_namespace_chain,
    'deep_list.pt': deep_list,
    'many_dots_global.pt': many_dots_global,
    'shared_dag.pt': shared_dag,
    'deep_shared_key.pt': deep_shared_key,
    'laughs_tensors.pt': laughs_tensors,
    'laughs_dicts.pt': laughs_dicts,
    'laughs_long_key.pt': laughs_long_key,
    'laughs_wide.pt': laughs_wide,
    'laughs_deep.pt': laughs_deep,
    'laughs_objects.pt': laughs_objects,
    'laughs_padded.pt': laughs_padded,
    'pop_below_mark.pt': pop_below_mark,
    'held_functions.pt': held_functions,
    'calls_function.pt': calls_function,
    'calls_function_via_memo.pt': calls_function_via_memo,
    'calls_partial.pt': calls_partial,
    'calls_partial_set_by_state.pt': calls_partial_set_by_state,
    'calls_partial_after_call.pt': calls_partial_after_call,
    'calls_via_rebuild_from_type.pt': calls_via_rebuild_from_type,
    'calls_via_reconstructor.pt': calls_via_reconstructor,
    'calls_via_unknown_class.pt': calls_via_unknown_class,
    'calls_via_newobj.pt': calls_via_newobj,
    'calls_via_inst.pt': calls_via_inst,
    'calls_via_obj.pt': calls_via_obj,
    'function_module_attribute.pt': function_module_attribute,
    'function_reading_files.pt': function_reading_files,
    'zip_declares_4gib_pickle.pt': zip_declares_4gib_pickle,
    'deflate_bomb_pickle.pt': deflate_bomb_pickle,
    'deflate_bomb_storage.pt': deflate_bomb_storage,
    'none_pop_loop.pt': none_pop_loop,
    'many_live_values.pt': many_live_values,
    'many_tiny_storages.pt': many_tiny_storages,
    'long_decimal.pt': long_decimal,
    'many_globals.pt': many_globals,
    'big_metadata.pt': big_metadata,
    'non_utf8_key.pt': non_utf8_key,
    'non_utf8_str_key.pt': non_utf8_str_key,
    'terminal_escapes.pt': terminal_escapes,
    'huge_shape_stride0.pt': huge_shape_stride0,
    'huge_nbytes.pt': huge_nbytes,
    'expanded_huge.pt': expanded_huge,
    'deflated_views.pt': deflated_views,
}


def make(out_dir, names=None):
    """Writes the named attacks (default: all) into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name in names or ATTACKS:
        paths[name] = os.path.join(out_dir, name)
        ATTACKS[name](paths[name])
    return paths


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    unknown = [n for n in sys.argv[2:] if n not in ATTACKS]
    if unknown:
        sys.exit(f'unknown attack(s): {", ".join(unknown)}; known: {", ".join(ATTACKS)}')
    for name, p in make(sys.argv[1], sys.argv[2:] or None).items():
        print(f'{p}: {os.path.getsize(p)} bytes')
