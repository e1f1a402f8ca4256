"""Shared helpers for the ckptfix CLI tests (tests/cli/test_*.py).

The tests are plain `unittest` scripts run as

    /usr/bin/python3 tests/cli/test_X.py [--ckptfix /path/to/ckptfix] [unittest args]

The binary is taken from --ckptfix, else the CKPTFIX_BIN environment variable,
else <repo>/build/ckptfix. The repo root is found relative to this file
(tests/cli/../..), never from the current directory.

Nothing here writes outside a tempfile.TemporaryDirectory().
"""

import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(REPO_ROOT, 'fixtures')
MANIFEST = os.path.join(FIXTURES, 'manifest.json')
DEFAULT_BIN = os.path.join(REPO_ROOT, 'build', 'ckptfix')

# Seconds before a single ckptfix run counts as hung.
RUN_TIMEOUT = 20

# scripts/test.sh sets CKPTFIX_TEST_SANITIZED=1 for the AddressSanitizer build,
# where each ckptfix process costs 0.1-0.3 s more. There the tests that run
# every hostile file through every command (attacks, gadgets, globals) leave
# out the rewrites whose code another one already runs: strip-prefix,
# add-prefix, remap and cast read, judge and write exactly as fix does (the
# passes themselves are run under the sanitizers by the unit and interop
# tests). The release build runs them all.
SANITIZED = os.environ.get('CKPTFIX_TEST_SANITIZED') == '1'
SHARED_WRITE_PATH = {'strip-prefix', 'add-prefix', 'remap', 'cast'}


def unless_sanitized(commands, name_of=lambda command: command[0]):
    """`commands`, less those named in SHARED_WRITE_PATH under the sanitizers."""
    return [c for c in commands if not (SANITIZED and name_of(c) in SHARED_WRITE_PATH)]

_binary = None


# -- command line -----------------------------------------------------------

def parse_args(argv):
    """Strip `--ckptfix PATH` / `--ckptfix=PATH` from argv; return the rest."""
    global _binary
    rest = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == '--ckptfix':
            if i + 1 >= len(argv):
                sys.exit('error: --ckptfix needs a path')
            _binary = argv[i + 1]
            i += 2
            continue
        if arg.startswith('--ckptfix='):
            _binary = arg[len('--ckptfix='):]
        else:
            rest.append(arg)
        i += 1
    return rest


def main():
    """Entry point for the test scripts: parse --ckptfix, then hand over to unittest."""
    rest = parse_args(sys.argv[1:])
    unittest.main(argv=[sys.argv[0]] + rest)


def binary():
    """Absolute path of the ckptfix binary under test (fails the test if unusable)."""
    path = _binary or os.environ.get('CKPTFIX_BIN') or DEFAULT_BIN
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise AssertionError(
            f'ckptfix binary not found or not executable: {path} '
            f'(pass --ckptfix PATH, set CKPTFIX_BIN, or build with `ninja -C {REPO_ROOT}/build`)')
    return path


# -- running ----------------------------------------------------------------

def run(args, cwd, timeout=RUN_TIMEOUT):
    """Run ckptfix with `args` in `cwd`; return CompletedProcess (text, not checked)."""
    try:
        return subprocess.run([binary()] + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, errors='replace')
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f'ckptfix {" ".join(args)} hung (no exit within {timeout}s)') from e


# -- running with time and memory measured ----------------------------------

def sanitized():
    if os.environ.get('CKPTFIX_SANITIZED') == '1':
        return True
    with open(binary(), 'rb') as f:
        return b'__asan_init' in f.read()


class Run:
    def __init__(self, args, returncode, stdout, stderr, seconds, cpu, max_rss):
        self.args, self.returncode, self.stdout, self.stderr = args, returncode, stdout, stderr
        self.seconds, self.cpu, self.max_rss = seconds, cpu, max_rss
        self.cwd = None

    def describe(self):
        return (f'\n  command: ckptfix {" ".join(self.args)}\n  exit: {self.returncode}'
                f'\n  seconds: {self.seconds:.2f} wall, {self.cpu:.2f} CPU  peak RSS: {self.max_rss / 2**20:.0f} MiB'
                f'\n  stderr: {self.stderr[-3000:]!r}\n  stdout: {self.stdout[:2000]!r}')


# RLIMIT_AS of each measured run (not under sanitizers): a regression fails
# the test instead of exhausting the machine.
ADDRESS_SPACE_GUARD = 4 << 30


def run_measured(args, cwd, guard, timeout):
    """Runs ckptfix; returns a Run with the child's own peak RSS (wait4)."""
    def limit():
        os.setsid()
        if guard:
            resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_GUARD, ADDRESS_SPACE_GUARD))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([binary()] + args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                preexec_fn=limit)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Run(args, proc.returncode, out.read().decode('utf-8', 'replace'),
                   err.read().decode('utf-8', 'replace'), seconds, usage.ru_utime + usage.ru_stime,
                   usage.ru_maxrss * 1024)


def describe(proc):
    """A readable dump of a finished run, for assertion messages."""
    rc = proc.returncode
    if rc < 0:
        try:
            rc_text = f'{rc} (killed by {signal.Signals(-rc).name})'
        except ValueError:
            rc_text = f'{rc} (killed by signal {-rc})'
    else:
        rc_text = str(rc)
    cmd = ' '.join(proc.args) if isinstance(proc.args, (list, tuple)) else str(proc.args)
    out = proc.stdout if len(proc.stdout) < 2000 else proc.stdout[:2000] + '...'
    return f'\n  command: {cmd}\n  exit: {rc_text}\n  stderr: {proc.stderr!r}\n  stdout: {out!r}'


# -- files ------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 16), b''):
            h.update(chunk)
    return h.hexdigest()


def file_state(path):
    """What must not change about an input: content hash, size and mtime."""
    st = os.stat(path)
    return {'sha256': sha256(path), 'size': st.st_size, 'mtime_ns': st.st_mtime_ns}


def tree(root):
    """Every path under `root` (relative, directories end in '/')."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            found.add(os.path.normpath(os.path.join(rel, d)) + '/')
        for f in filenames:
            found.add(os.path.normpath(os.path.join(rel, f)))
    return found


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def write(path, data):
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data)
    return path


class TempDir:
    """tempfile.TemporaryDirectory with a `.path` and `join()`."""

    def __init__(self, prefix='ckptfix-test-'):
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.path = os.path.realpath(self._tmp.name)

    def join(self, *parts):
        return os.path.join(self.path, *parts)

    def cleanup(self):
        self._tmp.cleanup()


# -- fixtures ---------------------------------------------------------------

def short_binunicode(s):
    """Pickle SHORT_BINUNICODE of s (protocol 4), for hand-made payloads."""
    b = s.encode()
    return b'\x8c' + bytes([len(b)]) + b


def binunicode(s):
    """Pickle BINUNICODE of s (protocol 1 and later), for hand-made payloads."""
    b = s.encode()
    return b'X' + len(b).to_bytes(4, 'little') + b


def manifest():
    with open(MANIFEST) as f:
        return json.load(f)


def fixtures(kind):
    """Manifest entries of one kind, with an absolute 'path' added."""
    entries = [dict(e, path=os.path.join(FIXTURES, e['file'])) for e in manifest() if e['kind'] == kind]
    if not entries:
        raise AssertionError(f'manifest.json lists no fixtures of kind {kind!r}')
    return entries


def fixture_path(name):
    path = os.path.join(FIXTURES, name)
    if not os.path.isfile(path):
        raise AssertionError(f'missing fixture {path} (regenerate with fixtures/make_fixtures.py)')
    return path


# -- assertions -------------------------------------------------------------

ERROR_PREFIX = 'ckptfix: error: '


class CliTestCase(unittest.TestCase):
    """unittest.TestCase with ckptfix-specific assertions."""

    maxDiff = None

    def assert_not_crashed(self, proc):
        self.assertGreaterEqual(proc.returncode, 0, 'ckptfix crashed (killed by a signal)' + describe(proc))
        self.assertIn(proc.returncode, (0, 1, 2), 'ckptfix exit code is none of 0, 1, 2' + describe(proc))
        for bad in ('Traceback', 'terminate called', 'Segmentation fault', 'AddressSanitizer',
                    'runtime error:', 'Assertion', 'core dumped'):
            self.assertNotIn(bad, proc.stderr, f'ckptfix stderr shows {bad!r}' + describe(proc))

    def assert_error_line(self, proc, path_as_given, *patterns):
        """Exit 1; exactly one stderr line `ckptfix: error: 'PATH': ...`; each regex
        pattern (case-insensitive) matches that line. Returns the text after the path."""
        self.assert_not_crashed(proc)
        self.assertEqual(proc.returncode, 1, 'expected exit 1 (input failed)' + describe(proc))
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, 'expected exactly one line on stderr' + describe(proc))
        self.assertTrue(proc.stderr.endswith('\n'), 'stderr line is not newline-terminated' + describe(proc))
        line = lines[0]
        prefix = f"{ERROR_PREFIX}'{path_as_given}': "
        self.assertTrue(line.startswith(prefix),
                        f'stderr does not start with {prefix!r}' + describe(proc))
        rest = line[len(prefix):]
        self.assertTrue(rest.strip(), 'error line has no message after the path' + describe(proc))
        for pattern in patterns:
            self.assertRegex(rest, re.compile(pattern, re.IGNORECASE),
                             f'error message does not match /{pattern}/' + describe(proc))
        return rest

    def assert_usage_error(self, proc, *patterns):
        """Exit 2 and a non-empty message on stderr."""
        self.assert_not_crashed(proc)
        self.assertEqual(proc.returncode, 2, 'expected exit 2 (usage error)' + describe(proc))
        self.assertTrue(proc.stderr.strip(), 'usage error without a message on stderr' + describe(proc))
        for pattern in patterns:
            self.assertRegex(proc.stderr, re.compile(pattern, re.IGNORECASE),
                             f'usage message does not match /{pattern}/' + describe(proc))

    def assert_untouched(self, path, before, what='input'):
        self.assertTrue(os.path.exists(path), f'{what} {path} was deleted')
        after = file_state(path)
        self.assertEqual(after['sha256'], before['sha256'], f'{what} {path} was modified (sha256 changed)')
        self.assertEqual(after['size'], before['size'], f'{what} {path} changed size')
        self.assertEqual(after['mtime_ns'], before['mtime_ns'], f'{what} {path} mtime changed')

    def assert_tree_unchanged(self, root, before, proc, what='directory'):
        after = tree(root)
        self.assertEqual(sorted(after - before), [],
                         f'ckptfix left new files in the {what} {root}' + describe(proc))
        self.assertEqual(sorted(before - after), [],
                         f'ckptfix removed files from the {what} {root}' + describe(proc))

    def check_input_fails(self, input_arg, cwd, *patterns, input_path=None, commands=('inspect', 'convert')):
        """Run `inspect` and `convert` on a bad input and check the failure contract.

        input_arg: the path exactly as given on the command line (relative to cwd or absolute).
        input_path: the real file to check for being untouched (default: input_arg in cwd),
                    or None-like for inputs that are not regular files.
        Returns {command: message-after-path}.
        """
        if input_path is None:
            input_path = os.path.join(cwd, input_arg)
        is_file = os.path.isfile(input_path)
        before_input = file_state(input_path) if is_file else None
        messages = {}
        for command in commands:
            with self.subTest(command=command, input=input_arg):
                out_dir = tempfile.mkdtemp(prefix='out-', dir=cwd)
                out = os.path.join(out_dir, 'converted.pt')
                watched = [cwd] + ([os.path.dirname(input_path)] if os.path.isdir(os.path.dirname(input_path)) else [])
                before = {d: tree(d) for d in watched}
                if command == 'inspect':
                    proc = run(['inspect', input_arg], cwd=cwd)
                else:
                    proc = run(['convert', input_arg, '-o', out], cwd=cwd)
                messages[command] = self.assert_error_line(proc, input_arg, *patterns)
                self.assertFalse(os.path.lexists(out), f'convert failed but wrote {out}' + describe(proc))
                self.assertEqual(os.listdir(out_dir), [],
                                 'failed command left files in the output directory' + describe(proc))
                for d in watched:
                    self.assert_tree_unchanged(d, before[d], proc)
                if is_file:
                    self.assert_untouched(input_path, before_input)
        return messages
