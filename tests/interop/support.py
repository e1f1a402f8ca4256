"""Shared helpers for the interop tests: the ckptfix binary, the fixtures,
temporary directories, and running commands."""
import argparse
import hashlib
import json
import os
import subprocess
import sys

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


def manifest(kind=None):
    with open(os.path.join(FIXTURES, "manifest.json")) as f:
        entries = json.load(f)
    return [e for e in entries if kind is None or e["kind"] == kind]


def fixture(name):
    return os.path.join(FIXTURES, name)


def run(*args, check=None, cwd=None):
    """Runs ckptfix; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([CKPTFIX, *args], capture_output=True, text=True, cwd=cwd)
    if check is not None and proc.returncode != check:
        raise AssertionError(f"ckptfix {' '.join(args)} exited {proc.returncode}, expected {check}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
