#!/usr/bin/python3
"""Issue 66, item 000: a differential oracle for ckptfix's unpickler.

For every pickle of the corpora (every fixture's data.pkl, every hostile file
of tests/attacks, the gadget corpus, the pickle differentials and the
committed fuzz findings, and with CKPTFIX_ORACLE_DIRS more directories, such
as a fuzz run's corpus), ckptfix's reading is held against CPython's own:

  * CPython's C unpickler (`pickle.Unpickler`, as torch.load uses it, with
    encoding='utf-8') loads the pickle with a find_class that returns inert
    stand-in classes (recording the global, every construction, BUILD state,
    APPEND and SETITEM) and a persistent_load that returns a marker: no code
    of the pickle's choosing runs, and the value tree is what CPython makes;
  * ckptfix's unpickler parses the same bytes and writes the value back
    (tests/tools/pickle_roundtrip); CPython loads that the same way.

Where ckptfix accepts a pickle CPython loads, the two value trees must be the
same (types, values, floats bit for bit, sharing, the order of construction
and of what each object is given). ckptfix may refuse what CPython loads (a
refusal is never a wrong reading); where it accepts what CPython refuses,
that is counted and printed (the known cases are listed in the report of
issue 66), not failed.

    tests/cli/test_pickle_oracle.py --tool build/tests/pickle_roundtrip
"""
import _compat_pickle
import argparse
import glob
import io
import os
import pickle
import queue
import struct
import subprocess
import sys
import resource
import signal
import tempfile
import threading
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "attacks"))
TOOL = None


class StandIn:
    """An instance of a global the pickle names: records how it is made and
    what it is given, runs nothing."""

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj._made = (args, kwargs)
        obj._given = []
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self._given.append(("build", state))

    def extend(self, items):
        # Consecutive APPENDS are one list of items: ckptfix models what the object is given,
        # and its writer may batch the items in fewer APPENDS.
        if self._given and self._given[-1][0] == "extend":
            self._given[-1][1].extend(items)
        else:
            self._given.append(("extend", list(items)))

    def append(self, item):
        self._given.append(("append", item))

    def __setitem__(self, key, value):
        self._given.append(("setitem", key, value))

    def add(self, item):
        self._given.append(("add", item))

    def __call__(self, *args, **kwargs):  # an object the pickle calls (a partial, a methodcaller)
        return Called(self, args, kwargs)


class Called:
    """What calling a stand-in object gave."""

    def __init__(self, callee, args, kwargs):
        self.callee, self.args, self.kwargs = callee, args, kwargs

    def __call__(self, *args, **kwargs):
        return Called(self, args, kwargs)


class Pid:
    def __init__(self, pid):
        self.pid = pid


class Loader(pickle.Unpickler):
    def __init__(self, data):
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.classes = {}

    def find_class(self, module, name):
        # As CPython's own find_class names it (protocol < 3: _compat_pickle applied; torch's
        # pickles are all protocol 2, and a writer of protocol 2 may spell builtins __builtin__).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        key = (module, name)
        if key not in self.classes:
            self.classes[key] = type(name.replace(".", "_"), (StandIn,), {"_global": module + "." + name})
        return self.classes[key]

    def persistent_load(self, pid):
        return Pid(pid)


def plain_value(v):
    """The bytes, bytearray or set a protocol 2 pickle spells as a call of a builtin (which the
    real builtin makes into the very value later protocols write with their own opcodes), as
    canonical() writes that value; None for anything else."""
    if not isinstance(v, StandIn) or v._made[1] or v._given:
        return None
    args, made = v._made[0], type(v)._global
    if made == "_codecs.encode" and len(args) == 2 and args[1] == "latin1" and isinstance(args[0], str):
        return ("bytes", args[0].encode("latin-1"))
    if made == "builtins.bytes" and not args:
        return ("bytes", b"")
    if made == "builtins.bytearray" and len(args) == 1:
        inner = ("bytes", args[0]) if isinstance(args[0], bytes) else plain_value(args[0])
        if inner and inner[0] == "bytes":
            return ("bytearray", inner[1])
    if made in ("builtins.set", "builtins.frozenset") and len(args) == 1 and isinstance(args[0], list):
        return (made[len("builtins."):], len(args[0]))
    return None


def canonical(value):
    """A tree of tuples that is the same for two values exactly when they are
    the same data, built the same way, with the same sharing."""
    seen = {}
    keep = []

    def walk(v):
        if id(v) in seen:
            return ("ref", seen[id(v)])
        plain = plain_value(v)
        # Every container once: shared values (a billion laughs) stay linear. Bytes are no
        # container, also when spelled as a call; a bytearray or set is one however spelled.
        if (isinstance(v, (list, dict, set, frozenset, tuple, StandIn, Pid, Called, bytearray))
                and (plain is None or plain[0] != "bytes")):
            seen[id(v)] = len(seen)
            keep.append(v)  # alive while its id is a key
        if plain is not None:
            return plain
        if v is None or isinstance(v, bool):
            return (type(v).__name__, v)
        if isinstance(v, int):
            return ("int", v)
        if isinstance(v, float):
            return ("float", struct.pack("<d", v))
        if isinstance(v, (str, bytes, bytearray)):
            return (type(v).__name__, bytes(v) if not isinstance(v, str) else v)
        if isinstance(v, tuple):
            return ("tuple",) + tuple(walk(x) for x in v)
        if isinstance(v, list):
            return ("list",) + tuple(walk(x) for x in v)
        if isinstance(v, dict):
            return ("dict",) + tuple((walk(k), walk(x)) for k, x in v.items())
        if isinstance(v, (set, frozenset)):
            return (type(v).__name__, len(v))
        if isinstance(v, Pid):
            return ("pid", walk(v.pid))
        if isinstance(v, Called):
            return ("called", walk(v.callee), walk(v.args), walk(v.kwargs))
        if isinstance(v, StandIn):
            args, kwargs = v._made
            return ("object", type(v)._global, walk(args), walk(kwargs),
                    tuple((g[0],) + tuple(walk(x) for x in g[1:]) for g in v._given))
        if isinstance(v, type) and issubclass(v, StandIn):
            return ("global", v._global)
        return ("other", repr(v))

    return walk(value)


def cpython_reading(data):
    """CPython's value tree of `data`, or why it refuses it (serve() calls it on a thread with a
    large stack: the walk of a deep, sound value recurses as deep as it is)."""
    try:
        return canonical(Loader(data).load()), None
    except Exception as e:  # CPython refuses it (or the stand-ins cannot play a part it needs)
        return None, f"{type(e).__name__}: {e}"


def pickles_of_corpora(workdir):
    """(name, pickle bytes) of every corpus."""
    out = []

    def from_zip(path):
        try:
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    # Larger pickles are limit attacks (millions of values), no parse differential:
                    # CPython with stand-ins takes minutes on them.
                    if info.filename.endswith("data.pkl") and info.file_size <= (1 << 20):
                        out.append((os.path.relpath(path, REPO) + ":" + info.filename, z.read(info)))
        except Exception:
            pass

    for path in sorted(glob.glob(os.path.join(REPO, "fixtures", "**", "*"), recursive=True)):
        if os.path.isfile(path):
            from_zip(path)
    import make_attacks
    import gadget_corpus
    import pickle_differentials
    attacks = os.path.join(workdir, "attacks")
    subprocess.run([sys.executable, make_attacks.__file__, attacks], check=True, capture_output=True)
    gadgets = os.path.join(workdir, "gadgets")
    subprocess.run([sys.executable, gadget_corpus.__file__, gadgets], check=True, capture_output=True)
    differentials = os.path.join(workdir, "differentials")
    subprocess.run([sys.executable, pickle_differentials.__file__, differentials, "ckptfix-oracle"], check=True)
    for directory in (attacks, gadgets, differentials):
        for path in sorted(glob.glob(os.path.join(directory, "*"))):
            if os.path.getsize(path) <= (64 << 20):
                from_zip(path)
    extra = [d for d in os.environ.get("CKPTFIX_ORACLE_DIRS", "").split(":") if d]
    most = int(os.environ.get("CKPTFIX_ORACLE_MAX", "2000"))  # files per extra directory (a fuzz corpus)
    for directory in [os.path.join(REPO, "tests", "fuzz_regressions", "unpickle"),
                      os.path.join(REPO, "tests", "fuzz_regressions", "pickle_roundtrip"),
                      os.path.join(REPO, "tests", "fuzz_regressions", "call_policy")] + extra:
        for path in sorted(glob.glob(os.path.join(directory, "*")))[:most]:
            if os.path.isfile(path) and os.path.getsize(path) <= (1 << 20) and not path.endswith((".md", "PENDING")):
                with open(path, "rb") as f:
                    out.append((os.path.relpath(path, REPO), f.read()))
    return out


def read_all(paths):
    """CPython's reading of each file, in a worker process (restarted past a file on which
    CPython itself crashes, which a fuzzed pickle can make it do, or on which it spends over
    30 s: inside C code, such as the repr of a huge value, no alarm reaches it):
    {path: (tree repr, why)}."""
    results = {}
    todo = list(paths)
    while todo:
        with tempfile.NamedTemporaryFile("w", suffix=".list", delete=False) as f:
            f.write("\n".join(todo))
        proc = subprocess.Popen([sys.executable, __file__, "--read-list", f.name], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, errors="replace", preexec_fn=big_stack)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        done = 0
        why_stopped = None
        while done < len(todo):
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                why_stopped = "CPython took over 30 s"
                break
            if line is None:
                why_stopped = "CPython crashed"
                break
            kind, _, rest = line.rstrip("\n").partition(" ")
            results[todo[done]] = (rest, None) if kind == "OK" else (None, rest)
            done += 1
        proc.kill()
        proc.wait()
        proc.stdout.close()
        os.unlink(f.name)
        if done < len(todo):  # the worker died or stalled reading todo[done]
            results[todo[done]] = (None, why_stopped)
            done += 1
        todo = todo[done:]
    return results


class TooSlow(Exception):
    pass


def serve(list_file):
    """The worker: one line per file of the list. Its main thread's stack is 1 GiB (the
    parent's preexec), for the walk of deep values; a file CPython takes over 20 s to read
    (a fuzzed pickle can) is given up."""
    def too_slow(*_):
        raise TooSlow()

    signal.signal(signal.SIGALRM, too_slow)
    sys.setrecursionlimit(1000000)
    with open(list_file) as f:
        for path in f.read().split("\n"):
            with open(path, "rb") as data:
                signal.alarm(20)
                try:
                    tree, why = cpython_reading(data.read())
                    line = f"OK {tree!r}" if why is None else "NO " + why.replace("\n", " ")[:300]
                except TooSlow:
                    line = "NO CPython took over 20 s"
                finally:
                    signal.alarm(0)
            print(line, flush=True)


def big_stack():
    resource.setrlimit(resource.RLIMIT_STACK, (1 << 30, 1 << 30))


class PickleOracleTest(unittest.TestCase):
    def test_ckptfix_reads_every_pickle_as_cpython_does(self):
        with tempfile.TemporaryDirectory() as tmp:
            corpus = pickles_of_corpora(tmp)
            self.assertGreater(len(corpus), 200, "the corpora went missing")
            pairs = []  # (name, original, rewritten) of what ckptfix accepts
            refused = 0
            for i, (name, data) in enumerate(corpus):
                original, rewritten = os.path.join(tmp, f"{i}.pkl"), os.path.join(tmp, f"{i}.out.pkl")
                with open(original, "wb") as f:
                    f.write(data)
                proc = subprocess.run([TOOL, original], capture_output=True, timeout=60)
                if proc.returncode != 0:  # refused: never read otherwise (and bombs stay out of CPython)
                    refused += 1
                    continue
                with open(rewritten, "wb") as f:
                    f.write(proc.stdout)
                pairs.append((name, original, rewritten))
            readings = read_all([p for _, original, rewritten in pairs for p in (original, rewritten)])
            compared = accepted_refused_by_cpython = 0
            mismatches = []
            too_slow = 0
            for name, original, rewritten in pairs:
                theirs, why_theirs = readings[original]
                ours, why_ours = readings[rewritten]
                # A reading CPython gave up on (a limit attack of millions of values) compares nothing.
                if any(w and ("TooSlow" in w or "took over" in w) for w in (why_theirs, why_ours)):
                    too_slow += 1
                    continue
                if theirs is None:
                    accepted_refused_by_cpython += 1
                    continue
                compared += 1
                if ours != theirs:
                    mismatches.append(f"{name}: CPython reads the rewrite otherwise ({why_ours or 'another value'})")
            print(f"\npickle oracle: {len(corpus)} pickles: {compared} read alike by CPython and ckptfix, "
                  f"{refused} refused by ckptfix, {accepted_refused_by_cpython} accepted by ckptfix though "
                  f"CPython (with inert stand-ins) refuses them, {too_slow} too slow for CPython to compare", file=sys.stderr)
            self.assertEqual(mismatches, [], "\n".join(mismatches[:20]))
            self.assertGreater(compared, 100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--tool")
    parser.add_argument("--read-list")
    args, rest = parser.parse_known_args()
    if args.read_list:
        serve(args.read_list)
        sys.exit(0)
    TOOL = os.path.abspath(args.tool)
    unittest.main(argv=[sys.argv[0]] + rest)
