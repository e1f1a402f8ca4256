#!/usr/bin/env python3
"""Pickles CPython reads otherwise than ckptfix did, and calls hidden in
callables ckptfix knows as data (issue 66, items 000 and 0). Pure Python,
deterministic, nothing is unpickled here; each pickle is the data.pkl of a
torch zip (tests/attacks/zip_differentials.Zip).

    python3 tests/attacks/pickle_differentials.py OUTDIR CANARY

VALUES: files whose value CPython fixes (torch.load gives it); ckptfix must
either read the same (its output loads as the input does) or refuse:
  int_octal.pt         {'epoch': I0100}: 64 in CPython <= 3.13, 100 in 3.14 (refused)
  int_plus_one.pt      {'flag': I+1}: True in CPython
  unicode_escapes.pt   keys V'enc\\\\u0041' and V'enc\\A': two keys in CPython
  float_overflow.pt    F1e500: refused by CPython
  float_nan_payload.pt Fnan(1): refused by CPython
  long1_wide.pt        LONG1 of 9 bytes holding 1: the int 1 in CPython
  put_negative.pt      PUT -1: refused by CPython
  str_not_utf8.pt      BINUNICODE b'\\xff': refused by CPython

CALLS: files whose loading calls `_osx_support._read_output('touch CANARY')`
(the `control_*` files, to prove the shape runs in torch) or an unknown
`ckptfix_test_payload.run` (the others, to prove the call rule, not the
gadget list, refuses them):
  ordereddict_keys     OrderedDict(SimpleNamespace(keys=partial(f, 'touch ...')))
  dict_keys            dict(SimpleNamespace(keys=partial(...)))
  namespace_keys       dict(argparse.Namespace(keys=partial(...)))
  reconstructor_keys   copyreg._reconstructor(OrderedDict, dict, SimpleNamespace(keys=...))
  nested_ordereddict   OrderedDict(OrderedDict instance whose BUILD set keys=partial(...))
  setstate_attribute   torch._utils._rebuild_parameter_with_state(t, False, OrderedDict(),
                       {'__setstate__': partial(...)}) then BUILD 'x'
  hashed_key           {instance of an unknown class: 1}: its __hash__ runs
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zip_differentials import Zip, ROOT  # noqa: E402

PROTO2 = b"\x80\x02"


def g(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def s(text):
    b = text.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def torch_file(pickle):
    z = Zip()
    z.add(f"{ROOT}/data.pkl", pickle)
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


def tensor_file(pickle, storage):
    z = Zip()
    z.add(f"{ROOT}/data.pkl", pickle)
    z.add(f"{ROOT}/data/0", storage)
    z.add(f"{ROOT}/version", b"3\n")
    return z.finish()


# -- values ---------------------------------------------------------------------

def dict_of(key, value_ops):
    return PROTO2 + b"}" + s(key) + value_ops + b"s."


VALUES = {
    "int_octal.pt": dict_of("epoch", b"I0100\n"),
    "int_plus_one.pt": dict_of("flag", b"I+1\n"),
    "unicode_escapes.pt": PROTO2 + b"}" + b"Venc\\\\u0041\nK\x01s" + b"Venc\\A\nK\x02s" + b".",
    "float_overflow.pt": dict_of("x", b"F1e500\n"),
    "float_nan_payload.pt": dict_of("x", b"Fnan(1)\n"),
    "long1_wide.pt": dict_of("x", b"\x8a\x09\x01" + b"\x00" * 8),
    "put_negative.pt": dict_of("x", b"Np-1\n0g-1\n"),
    "str_not_utf8.pt": PROTO2 + b"}X\x01\x00\x00\x00\xffK\x01s.",
}
# CPython refuses these; ckptfix must refuse them too (exit 1).
REFUSED_BY_CPYTHON = {"float_overflow.pt", "float_nan_payload.pt", "put_negative.pt", "str_not_utf8.pt"}
# Read differently by CPython releases: ckptfix refuses them.
REFUSED_AS_AMBIGUOUS = {"int_octal.pt"}


# -- calls ------------------------------------------------------------------------

def partial(func_module, func_name, argument):
    return g("functools", "partial") + g(func_module, func_name) + s(argument) + b"\x86R"


def namespace_with_keys(cls_module, cls_name, func):
    # cls.__new__(cls) then BUILD {'keys': func}, as pickle writes an instance
    return g(cls_module, cls_name) + b")\x81" + b"}" + s("keys") + func + b"sb"


def call_files(module, name, command):
    f = partial(module, name, command)
    ns = namespace_with_keys("types", "SimpleNamespace", f)
    files = {
        "ordereddict_keys": PROTO2 + b"}" + s("cfg") + g("collections", "OrderedDict") + ns + b"\x85Rs.",
        "dict_keys": PROTO2 + b"}" + s("cfg") + g("builtins", "dict") + ns + b"\x85Rs.",
        "namespace_keys": PROTO2 + b"}" + s("cfg") + g("builtins", "dict") +
                          namespace_with_keys("argparse", "Namespace", f) + b"\x85Rs.",
        "reconstructor_keys": PROTO2 + b"}" + s("cfg") + g("copyreg", "_reconstructor") +
                              g("collections", "OrderedDict") + g("builtins", "dict") + ns + b"\x87Rs.",
        "nested_ordereddict": PROTO2 + b"}" + s("cfg") + g("collections", "OrderedDict") +
                              namespace_with_keys("collections", "OrderedDict", f) + b"\x85Rs.",
        "hashed_key": PROTO2 + b"}" + g(module, name) + b")\x81K\x01s.",
    }
    # torch's allowlisted parameter rebuild fills the instance dict from its 4th argument.
    param = (g("torch._utils", "_rebuild_parameter_with_state") + b"(" +
             g("torch._utils", "_rebuild_tensor_v2") + b"((" + s("storage") + g("torch", "FloatStorage") + s("0") +
             s("cpu") + b"K\x01tQK\x00K\x01\x85K\x01\x85\x89" + g("collections", "OrderedDict") + b")RtR" +
             b"\x89" + g("collections", "OrderedDict") + b")R" + b"}" + s("__setstate__") + f + b"stR")
    files["setstate_attribute"] = PROTO2 + b"}" + s("p") + param + s("x") + b"bs."
    return files


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: pickle_differentials.py OUTDIR CANARY")
    out, canary = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, pickle in VALUES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(torch_file(pickle))
    storage = struct.pack("<f", 1.0)
    for prefix, (module, name) in (("control_", ("_osx_support", "_read_output")),
                                   ("", ("ckptfix_test_payload", "run"))):
        for case, pickle in call_files(module, name, "touch " + canary).items():
            data = tensor_file(pickle, storage) if case == "setstate_attribute" else torch_file(pickle)
            with open(os.path.join(out, prefix + case + ".pt"), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
