#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, made from fixtures/ (docs/fuzzing.md).

    python3 scripts/fuzz_seeds.py FIXTURES_DIR OUT_DIR

Writes OUT_DIR/<target>/<name> for the targets checkpoint, zip, legacy,
unpickle, pickle_roundtrip, call_policy, safetensors, shard_index, dcp_metadata,
file_graph and salvage: whole fixture files for the file readers, small
safetensors files built here (every dtype, metadata, escapes), and for the
pickle targets each fixture's data.pkl, the five pickles of each legacy
fixture, small pickles of plain Python values at protocols 0-5, the object
pickles of the published gadgets (tests/attacks/gadget_corpus.py), and
for salvage each fixture cut, with its zip directory zeroed and with a byte
flipped.
Standard library only (no torch); nothing is ever unpickled.
"""
import collections
import json
import os
import struct
import pickle
import pickletools
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "attacks"))
import gadget_corpus  # noqa: E402

# The targets that take one pickle.
# "nested" reads each as a module's extra state would hold it (issue 66):
# every hostile and fixture pickle also runs through that path.
PICKLE_TARGETS = ("unpickle", "pickle_roundtrip", "call_policy", "nested")


def write(out_dir, target, name, data):
    d = os.path.join(out_dir, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def legacy_pickles(data):
    """The byte ranges of the leading pickles of a legacy stream (up to five)."""
    out, pos = [], 0
    for _ in range(5):
        try:
            ops = list(pickletools.genops(data[pos:]))
        except Exception:
            break
        end = pos + ops[-1][2] + 1  # STOP's position + 1
        out.append(data[pos:end])
        pos = end
    return out


def plain_values():
    """Values whose pickles exercise every protocol's opcodes (no globals that run code)."""
    shared = [1, 2]
    return {
        "scalars": [None, True, False, 0, 1, -1, 255, 65535, 2**31, -2**31 - 1, 2**64, -2**100, 1.5, float("inf"),
                    "", "text", "ü\u20ac", b"", b"bytes", bytearray(b"ba")],
        "containers": {"t0": (), "t1": (1,), "t2": (1, 2), "t3": (1, 2, 3), "t4": (1, 2, 3, 4), "l": [1, [2, [3]]],
                       "s": {1, 2}, "fs": frozenset({3}), "d": {1: "a", "b": 2.5}},
        "shared": [shared, shared, {"again": shared}],
        "ordered": collections.OrderedDict([("a", 1), ("b", [1, 2])]),
        "counter": collections.Counter("abca"),
        "long_str": "x" * 300,
        "many": list(range(1200)),
    }


def safetensors_seeds():
    """Small safetensors files laid out as the safetensors library writes them."""
    def file(tensors, metadata=None):
        header, data = {}, b""
        if metadata is not None:
            header["__metadata__"] = metadata
        for name, dtype, shape, nbytes in tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
            data += bytes(range(nbytes % 256)) + bytes(max(0, nbytes - 256))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        return struct.pack("<Q", len(text)) + text + data
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1,
             "F8_E5M2FNUZ": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8,
             "F64": 8, "I64": 8, "U64": 8}
    yield "empty", file([])
    yield "metadata", file([("w", "F32", [2, 2], 16)], {"format": "pt", "k\n\"": "v\u0001"})
    yield "all-dtypes", file([(f"t.{d}", d, [3], 3 * n) for d, n in sizes.items()] + [("f4", "F4", [2, 4], 4)])
    yield "scalar-and-empty", file([("s", "F64", [], 8), ("e", "F32", [0, 5], 0), ("names\u00e9\"", "I8", [1], 1)])


def shard_index_seeds():
    """Index files as transformers writes them, and a few that must be refused."""
    good = {"metadata": {"total_size": 1696}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                                             "b\u00e9": "model-00002-of-00002.safetensors"}}
    yield "transformers.json", json.dumps(good, indent=2, sort_keys=True) + "\n"
    yield "bin.json", json.dumps({"metadata": {"total_size": 8}, "weight_map": {"w": "pytorch_model-00001-of-00001.bin"}})
    yield "traversal.json", json.dumps({"weight_map": {"w": "../etc/passwd"}})
    yield "no-map.json", json.dumps({"metadata": {}})


def made_from_seeds():
    """Rerun records (src/rerun/made_from.h) as ckptfix writes them, and a few it must refuse."""
    head = "ckptfix-made-from 1\nrecipe 0123456789abcdef0123456789abcdef\ninput /data/in%20dir/a.pt\n"
    yield "one.txt", head + "read 12 3334 1764400000123456789 /data/in%20dir/a.pt\nwrote 99 3334 1764400000987654321 a.pt\n"
    yield "set.txt", head + "read 1 2 3 /d/m.bin.index.json\nread 4 5 6 /d/m-00001-of-00002.bin\n" + \
        "".join(f"wrote {i} 10 20 model-0000{i}-of-00002.safetensors\n" for i in (1, 2)) + "wrote 3 30 40 model.safetensors.index.json\n"
    yield "escape.txt", head + "read 1 2 3 /x\nwrote 1 2 3 ..%2Fescape.pt\n"


def fit_seeds():
    """Inputs of the fit target (fuzz/targets/fit.cc): a JSON reference, NUL,
    --rename lines, NUL, the state dict's keys as KEY|D0,D1."""
    model = {"features.0.weight": [4, 3], "features.0.bias": [4], "bn.running_mean": [4], "bn.num_batches_tracked": [],
             "ln.weight": [4], "ln.bias": [4], "fc.parametrizations.weight.original0": [3, 1],
             "fc.parametrizations.weight.original1": [3, 4], "layer.norm1.weight": [2], "m._extra_state": None}
    ref = json.dumps({k: ({} if v is None else {"shape": v, "dtype": "float32"}) for k, v in model.items()})

    def keys(rename):
        return "\n".join(f"{rename(k)}|{','.join(map(str, v or []))}" for k, v in model.items() if v is not None)
    yield "wrappers", ref + "\0\0" + keys(lambda k: "_orig_mod.module." + k)
    yield "prefix", ref + "\0\0" + keys(lambda k: "model.backbone." + k)
    yield "legacy", ref + "\0\0" + keys(lambda k: k.replace("ln.weight", "ln.gamma").replace("norm1", "norm.1")
                                          .replace("parametrizations.weight.original0", "weight_g"))
    yield "renames", ref + "\0" + "^enc\\.(\\d+)\\.=features.\\1.\n(a*)*b=x\0" + keys(lambda k: k.replace("features", "enc"))
    yield "reference-only", ref


def graph_entry(kind, name, content):
    """One entry of a file_graph input (fuzz/targets/targets.h): kind 0 file,
    1 symbolic link, 2 hard link, 3 FIFO, 4 directory."""
    name = name.encode() if isinstance(name, str) else name
    content = content.encode() if isinstance(content, str) else content
    return bytes([kind, len(name)]) + name + struct.pack("<I", len(content)) + content


def graph_seeds(fixtures):
    """Directories for file_graph: every distributed checkpoint of fixtures/,
    shard sets built here, and the sets that name files badly (an index
    naming itself or another index, links, a FIFO, a directory)."""
    for root, _, files in sorted(os.walk(fixtures)):
        if ".metadata" not in files:
            continue
        entries = []
        for f in sorted(files):
            with open(os.path.join(root, f), "rb") as fh:
                entries.append(graph_entry(0, f, fh.read()))
        data = b"".join(entries)
        if len(data) <= 128 * 1024:
            yield os.path.relpath(root, fixtures).replace(os.sep, "-"), data
            # The same set with its data file replaced by a link to .metadata, and by a FIFO.
            first = next(f for f in sorted(files) if f.endswith(".distcp"))
            rest = [e for f, e in zip(sorted(files), entries) if f != first]
            yield os.path.relpath(root, fixtures).replace(os.sep, "-") + "-link", \
                b"".join(rest) + graph_entry(1, first, ".metadata")
            yield os.path.relpath(root, fixtures).replace(os.sep, "-") + "-fifo", b"".join(rest) + graph_entry(3, first, "")
    # DeepSpeed ZeRO tag directories (the scratch directory is the tag
    # directory), and each with a rank's optimizer file cut in half.
    zero = os.path.join(fixtures, "torch2.14", "zero")
    for case in sorted(os.listdir(zero)) if os.path.isdir(zero) else []:
        tag = os.path.join(zero, case, "global_step2")
        if not os.path.isdir(tag):
            continue
        files = {}
        for f in sorted(os.listdir(tag)):
            with open(os.path.join(tag, f), "rb") as fh:
                files[f] = fh.read()
        yield "zero-" + case, b"".join(graph_entry(0, f, d) for f, d in files.items())
        cut = next(f for f in sorted(files) if f.endswith("_optim_states.pt") and "rank_1_" in f)
        yield "zero-" + case + "-cut", b"".join(
            graph_entry(0, f, d[:len(d) // 2] if f == cut else d) for f, d in files.items())
    shards = dict(safetensors_seeds())
    one, two = shards["metadata"], shards["scalar-and-empty"]
    index = {"metadata": {}, "weight_map": {"w": "a.safetensors", "s": "b.safetensors", "e": "b.safetensors",
                                            "names\u00e9\"": "b.safetensors"}}
    good = graph_entry(0, "a.safetensors", one) + graph_entry(0, "b.safetensors", two)
    yield "shard-set", graph_entry(0, "model.safetensors.index.json", json.dumps(index)) + good
    yield "shard-set-hardlink", (graph_entry(0, "model.safetensors.index.json", json.dumps(index)) + good +
                                 graph_entry(2, "c.safetensors", "a.safetensors"))
    with open(os.path.join(fixtures, "plain_state_dict.pt"), "rb") as f:
        plain = f.read()
    yield "bin-set", (graph_entry(0, "pytorch_model.bin.index.json", json.dumps({"weight_map": {"w": "pytorch_model.bin"}}))
                      + graph_entry(0, "pytorch_model.bin", plain))
    names_itself = json.dumps({"weight_map": {"w": "i.json"}})
    yield "index-names-itself", graph_entry(0, "i.json", names_itself)
    yield "index-pair", (graph_entry(0, "a.json", json.dumps({"weight_map": {"w": "b.json"}})) +
                         graph_entry(0, "b.json", json.dumps({"weight_map": {"w": "a.json"}})))
    yield "bin-is-index", (graph_entry(0, "i.json", json.dumps({"weight_map": {"w": "m.bin"}})) +
                           graph_entry(0, "m.bin", json.dumps({"weight_map": {"w": "m.bin"}})))
    yield "shard-links-to-index", graph_entry(0, "i.json", json.dumps({"weight_map": {"w": "s.bin"}})) + graph_entry(1, "s.bin", "i.json")
    yield "shard-fifo", graph_entry(0, "i.json", json.dumps({"weight_map": {"w": "s.bin"}})) + graph_entry(3, "s.bin", "")
    yield "shard-directory", graph_entry(0, "i.json", json.dumps({"weight_map": {"w": "s.bin"}})) + graph_entry(4, "s.bin", "")


def damaged_versions(data, is_zip):
    """(label, bytes) of a file damaged the ways salvage meets files: cut at
    30, 60 and 90 %, the zip's central directory zeroed, a byte flipped in
    the middle."""
    for percent in (30, 60, 90):
        yield f"cut{percent}", data[:len(data) * percent // 100]
    if is_zip:
        directory = data.find(b"PK\x01\x02")
        if directory > 0:
            yield "zeroed-directory", data[:directory] + bytes(len(data) - directory)
    if data:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x10
        yield "flipped", bytes(flipped)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    fixtures, out = sys.argv[1], sys.argv[2]
    count = collections.Counter()
    # fixtures/ itself (torch 1.13's set), and what only torch 2.x pickles:
    # modules' extra states, tensors with Python attributes, every sparse layout.
    values = os.path.join("torch2.14", "state_dict_values")
    names = sorted(os.listdir(fixtures))
    if os.path.isdir(os.path.join(fixtures, values)):
        names += [os.path.join(values, n) for n in sorted(os.listdir(os.path.join(fixtures, values)))]
    for name in names:
        path = os.path.join(fixtures, name)
        if not name.endswith(".pt") or os.path.getsize(path) > 256 * 1024:
            continue
        name = name.replace(os.sep, "-")
        with open(path, "rb") as f:
            data = f.read()
        write(out, "checkpoint", name, data)
        count["checkpoint"] += 1
        for label, damaged in damaged_versions(data, zipfile.is_zipfile(path)):
            write(out, "salvage", f"{name}.{label}", damaged)
            count["salvage"] += 1
        if zipfile.is_zipfile(path):
            write(out, "zip", name, data)
            count["zip"] += 1
            try:
                with zipfile.ZipFile(path) as z:
                    for member in z.namelist():
                        if member.endswith("data.pkl"):
                            pkl = z.read(member)
                            for target in PICKLE_TARGETS:
                                write(out, target, name + ".data.pkl", pkl)
                                count[target] += 1
            except (zipfile.BadZipFile, OSError, EOFError):
                pass  # a damaged fixture is still a good seed for the file readers
        elif data[:1] == b"\x80":
            write(out, "legacy", name, data)
            count["legacy"] += 1
            for i, pkl in enumerate(legacy_pickles(data)):
                for target in PICKLE_TARGETS:
                    write(out, target, f"{name}.pickle{i}", pkl)
                    count[target] += 1
    for g in gadget_corpus.GADGETS:
        for legacy in (False, True):
            for target in PICKLE_TARGETS:
                write(out, target, f"gadget-{g.name}{'-legacy' if legacy else ''}", gadget_corpus.object_pickle(g, legacy))
                count[target] += 1
    for label, value in plain_values().items():
        for protocol in range(6):
            pkl = pickle.dumps(value, protocol=protocol)
            for target in PICKLE_TARGETS:
                write(out, target, f"plain-{label}-p{protocol}", pkl)
                count[target] += 1
    # Distributed checkpoints' .metadata files, wherever fixtures/ has them.
    for root, _, files in sorted(os.walk(fixtures)):
        if ".metadata" in files:
            with open(os.path.join(root, ".metadata"), "rb") as f:
                name = os.path.relpath(root, fixtures).replace(os.sep, "-")
                write(out, "dcp_metadata", name + ".metadata", f.read())
                count["dcp_metadata"] += 1
    for name, text in shard_index_seeds():
        write(out, "shard_index", name, text.encode())
        count["shard_index"] += 1
    for name, text in made_from_seeds():
        write(out, "made_from", name, text.encode())
        count["made_from"] += 1
    for name, text in fit_seeds():
        write(out, "fit", name, text.encode())
        count["fit"] += 1
    for name, data in graph_seeds(fixtures):
        write(out, "file_graph", name, data)
        count["file_graph"] += 1
    for name, data in safetensors_seeds():
        for target in ("safetensors", "checkpoint"):
            write(out, target, f"{name}.safetensors", data)
            count[target] += 1
        for label, damaged in damaged_versions(data, False):
            write(out, "salvage", f"{name}.safetensors.{label}", damaged)
            count["salvage"] += 1
    print("fuzz seeds: " + ", ".join(f"{t} {n}" for t, n in sorted(count.items())))


if __name__ == "__main__":
    main()
