"""Shared helpers for the interop tests: the ckptfix binary, the fixtures,
temporary directories, and running commands."""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "fixtures")
CKPTFIX = os.environ.get("CKPTFIX_BIN", os.path.join(REPO, "build", "ckptfix"))


def parse_args():
    """Takes --ckptfix PATH off the command line; the rest goes to unittest."""
    global CKPTFIX
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--ckptfix")
    args, rest = parser.parse_known_args()
    if args.ckptfix:
        CKPTFIX = os.path.abspath(args.ckptfix)
    return [sys.argv[0]] + rest


# Fixture sets: (folder under fixtures/, the torch version that wrote it).
# fixtures/ itself holds torch 1.13's set; fixtures/torch2.6/ and
# fixtures/torch2.14/ the sets written by those versions (make_all.sh).
FIXTURE_SETS = [("", (1, 13)), ("torch2.6", (2, 6)), ("torch2.14", (2, 14))]


def torch_version():
    """The judge's torch version as a tuple, e.g. (2, 14)."""
    import torch
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def manifest(kind=None, sets=None):
    """Fixtures of every set this judge's torch can read (written by the same
    or an older torch), or of `sets` (folder names). Each entry's "file" is
    relative to fixtures/ ("torch2.14/training.pt"); "set" names its folder
    ("" for torch 1.13's) and "written_by" the torch version."""
    entries = []
    for folder, version in FIXTURE_SETS:
        if sets is not None and folder not in sets:
            continue
        if sets is None and version > torch_version():
            continue
        path = os.path.join(FIXTURES, folder, "manifest.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for e in json.load(f):
                if kind is None or e["kind"] == kind:
                    entries.append(dict(e, file=os.path.join(folder, e["file"]) if folder else e["file"],
                                        set=folder, written_by=version))
    return entries


def flat_name(fixture_file):
    """A file name for an output made from a fixture: 'torch2.14/x.pt' -> 'torch2.14__x.pt'."""
    return fixture_file.replace("/", "__")


def fixture(name):
    return os.path.join(FIXTURES, name)


def run(*args, check=None, cwd=None):
    """Runs ckptfix; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([CKPTFIX, *args], capture_output=True, text=True, cwd=cwd)
    if check is not None and proc.returncode != check:
        raise AssertionError(f"ckptfix {' '.join(args)} exited {proc.returncode}, expected {check}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def unreadable_by_this_python(exc):
    """A reason to skip, when `exc` says this judge's Python cannot unpickle
    what a newer Python wrote (Python 3.13 pickles paths as pathlib._local.X,
    a module Python 3.12 lacks: the GPU machine's pip torch runs on 3.12,
    Debian trixie's and sid's on 3.13); else None."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.startswith("pathlib."):
        return (f"Python {sys.version.split()[0]} cannot unpickle what a newer Python wrote "
                f"(no module {exc.name}): the fixture is not readable by this judge")
    return None


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class ScratchDirTest(unittest.TestCase):
    """A test case with a fresh temporary directory, self.tmp, removed after
    each test; path() and folder() name places in it, making their parents."""
    prefix = "ckptfix-"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.prefix)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        p = os.path.join(self.tmp, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def folder(self, *parts):
        p = os.path.join(self.tmp, *parts)
        os.makedirs(p, exist_ok=True)
        return p
