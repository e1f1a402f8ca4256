#!/usr/bin/python3
"""Golden stderr texts: every error ckptfix prints, exactly, as llvm's lit tests do.

Run:  /usr/bin/python3 tests/cli/test_golden.py [--ckptfix PATH] [--update] [unittest args]
      (or set CKPTFIX_BIN; default <repo>/build/ckptfix)

Each file tests/cli/golden/*.test is one case, directives in '#' lines:

    # Free text: what the case is about (any '#' line that is no directive).
    # MAKE: GENERATOR ARGS...    build an input in %t before the run (see GENERATORS)
    # ENV: NAME=VALUE            set in ckptfix's environment
    # REQUIRES: no-gpu           skip unless the GPU load test cannot run here
    # RUN: ckptfix ARGS...       the command (split as a shell would; no shell runs);
    #                            `ckptfix-fault-injection ARGS...` runs the test-only build that
    #                            reads CKPTFIX_TEST_FAULT (docs/testing.md, "Fault injection")
    # KIND: corrupt              the ErrorKind (error.h's to_string name) of the failure
    # EXIT: 1                    the exit code
    # STDERR: ckptfix: error: ...  the whole stderr, one directive per line, in order
                                 (no STDERR line: stderr must be empty)
    # STDOUT: ...                if the case has any STDOUT line: the whole stdout
                                 (one `# STDOUT:` with nothing after it: stdout must be empty)

Placeholders, in every directive: %t (a fresh empty directory, also the
command's working directory), %fixtures (the repository's fixtures/), %s
(the case file), %S (the golden/ directory), %{gpu_reason} (why the GPU
load test cannot run on this machine, as `verify --json` reports it).

KIND is checked where ckptfix reports it: the command is run again with
--json after its name, and every failed input of the report must have that
error_kind. Errors raised before any input is read (bad options, --gpu
require) print no report; for them KIND is the kind the code raises,
stated, and the run with --json must fail the same way with nothing on
stdout. test_every_error_kind_has_a_case checks that every ErrorKind of
include/ckptfix/error.h but 'internal' has a case.

--update rewrites EXIT, STDERR (and STDOUT where a case has it) of every
case from what ckptfix prints now, paths turned back into placeholders: a
change of message texts is one command to accept (review the diff).
"""

import difflib
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'attacks'))
import cli_support as cs  # noqa: E402
import make_attacks  # noqa: E402

GOLDEN = os.path.join(HERE, 'golden')
ERROR_H = os.path.join(cs.REPO_ROOT, 'include', 'ckptfix', 'error.h')
ERROR_CC = os.path.join(cs.REPO_ROOT, 'src', 'error.cc')
UPDATE = False

DIRECTIVE = re.compile(r'^# (MAKE|ENV|REQUIRES|RUN|KIND|EXIT|STDERR|STDOUT):(?: (.*))?$')
EXPECTATIONS = ('EXIT', 'STDERR', 'STDOUT')
# Kinds no case can reach without a bug in ckptfix (kInternal is what an
# unexpected exception becomes; nothing documented raises it).
UNREACHABLE_KINDS = {'internal'}


# -- inputs built at test time ------------------------------------------------

def make_copy(src, dst):
    """copy SRC DST"""
    shutil.copyfile(src, dst)


def make_truncated(src, dst, nbytes):
    """truncated SRC DST N: the first N bytes of SRC"""
    cs.write(dst, cs.read(src)[:int(nbytes)])


def first_storage_data_offset(path):
    """File offset of the first byte of the first data/<key> record of a stored zip."""
    raw = cs.read(path)
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if '/data/' in info.filename and info.compress_type == zipfile.ZIP_STORED and info.file_size > 0:
                name_len, extra_len = struct.unpack('<HH', raw[info.header_offset + 26:info.header_offset + 30])
                return info.header_offset + 30 + name_len + extra_len
    raise AssertionError(f'{path} has no stored, non-empty data/ record')


def make_flipped_storage_byte(src, dst):
    """flipped-storage-byte SRC DST: SRC with the first byte of its first storage record inverted (a CRC mismatch)"""
    raw = bytearray(cs.read(src))
    raw[first_storage_data_offset(src)] ^= 0xFF
    cs.write(dst, bytes(raw))


def make_attack(name, dst):
    """attack NAME DST: tests/attacks/make_attacks.py's file NAME (e.g. deep_list.pt), written to DST"""
    make_attacks.ATTACKS[name](dst)


def make_state_dict(dst, *keys):
    """state-dict DST KEY...: a zip checkpoint of an OrderedDict, each KEY a float32 tensor of 4 elements"""
    entries = [(k, str(i), 4) for i, k in enumerate(keys)]
    make_attacks.checkpoint(dst, make_attacks.float_state_dict_pickle(entries),
                            [(str(i), make_attacks.FOUR_FLOATS) for i in range(len(keys))])


def make_state_dict_with_int(dst, int_key, *keys):
    """state-dict-with-int DST INTKEY KEY...: as state-dict, plus INTKEY holding the int 3 (no state dict then)"""
    m = make_attacks
    entries = [(k, m.tensor(str(i), 4, (4,), (1,))) for i, k in enumerate(keys)] + [(int_key, m.int_op(3))]
    m.checkpoint(dst, m.proto(2) + m.state_dict(entries) + m.STOP,
                 [(str(i), m.FOUR_FLOATS) for i in range(len(keys))])


def make_calls_global(dst, module, name):
    """calls-global DST MODULE NAME: a zip checkpoint whose pickle is MODULE.NAME('x') (never run here)"""
    m = make_attacks
    pickle = m.proto(2) + m.global_op(module, name) + m.unicode_op('x') + m.TUPLE1 + m.REDUCE + m.STOP
    m.checkpoint(dst, pickle)


def make_object_of(dst, module, name):
    """object-of DST MODULE NAME: a zip checkpoint whose pickle is a MODULE.NAME object made as pickle makes a
    plain class's instances, NEWOBJ then BUILD({'a': 'x'}) (never run here)"""
    m = make_attacks
    pickle = (m.proto(2) + m.global_op(module, name) + m.EMPTY_TUPLE + b'\x81' + m.EMPTY_DICT + m.unicode_op('a') +
              m.unicode_op('x') + m.SETITEM + m.BUILD + m.STOP)
    m.checkpoint(dst, pickle)


def make_reduce_of(dst, module, name):
    """reduce-of DST MODULE NAME: a zip checkpoint whose pickle is a MODULE.NAME object made as a class's own
    __reduce__ makes it, REDUCE(cls, ('a', 'x')): a call with arguments (never run here)"""
    m = make_attacks
    pickle = (m.proto(2) + m.global_op(module, name) + m.unicode_op('a') + m.unicode_op('x') + b'\x86' + m.REDUCE +
              m.STOP)
    m.checkpoint(dst, pickle)


def make_safetensors(dst, header, data_bytes):
    """safetensors DST HEADER N: a safetensors file: the JSON HEADER as given (8-byte length first), then N bytes"""
    raw = header.encode()
    cs.write(dst, len(raw).to_bytes(8, 'little') + raw + bytes(int(data_bytes)))


def make_nonfinite(dst, *keys):
    """nonfinite DST KEY...: a zip checkpoint of an OrderedDict, each KEY a float32 tensor [nan, inf, -inf, 1.0]
    but the last, which is [1, 2, 3, 4]"""
    data = [struct.pack('<4f', float('nan'), float('inf'), float('-inf'), 1.0)] * (len(keys) - 1)
    data.append(make_attacks.FOUR_FLOATS)
    entries = [(k, str(i), 4) for i, k in enumerate(keys)]
    make_attacks.checkpoint(dst, make_attacks.float_state_dict_pickle(entries),
                            [(str(i), d) for i, d in enumerate(data)])


def make_text(dst, text):
    """text DST TEXT: a file holding TEXT and a newline"""
    cs.write(dst, text.encode() + b'\n')


def make_dir(dst):
    """dir DST: an empty directory"""
    os.makedirs(dst)


GENERATORS = {
    'copy': make_copy,
    'truncated': make_truncated,
    'flipped-storage-byte': make_flipped_storage_byte,
    'attack': make_attack,
    'state-dict': make_state_dict,
    'state-dict-with-int': make_state_dict_with_int,
    'calls-global': make_calls_global,
    'object-of': make_object_of,
    'reduce-of': make_reduce_of,
    'safetensors': make_safetensors,
    'nonfinite': make_nonfinite,
    'text': make_text,
    'dir': make_dir,
}


# -- cases ----------------------------------------------------------------------

class Case:
    """One parsed .test file."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding='utf-8') as f:
            self.lines = f.read().splitlines()
        self.directives = []  # (name, text)
        for number, line in enumerate(self.lines, 1):
            m = DIRECTIVE.match(line)
            if m:
                self.directives.append((m.group(1), m.group(2) or ''))
            elif line.startswith('# ') and re.match(r'^# [A-Z-]+:', line):
                raise AssertionError(f'{path}:{number}: unknown directive: {line}')
            elif line and not line.startswith('#'):
                raise AssertionError(f'{path}:{number}: not a comment or directive: {line}')

    def all(self, name):
        return [text for n, text in self.directives if n == name]

    def one(self, name, required=True):
        found = self.all(name)
        if len(found) > 1 or (required and not found):
            raise AssertionError(f'{self.path}: needs exactly one {name} directive, has {len(found)}')
        return found[0] if found else None

    def rewrite(self, exit_code, stderr_lines, stdout_lines):
        """The file with its expectations replaced (they go last, in the order EXIT, STDERR, STDOUT)."""
        kept = [line for line in self.lines
                if not (DIRECTIVE.match(line) and DIRECTIVE.match(line).group(1) in EXPECTATIONS)]
        out = kept + [f'# EXIT: {exit_code}']
        out += [f'# STDERR: {line}'.rstrip() for line in stderr_lines]
        if self.all('STDOUT'):
            out += [f'# STDOUT: {line}'.rstrip() for line in stdout_lines or ['']]
        with open(self.path, 'w', encoding='utf-8') as f:
            f.write('\n'.join(out) + '\n')


def case_files():
    return sorted(os.path.join(GOLDEN, n) for n in os.listdir(GOLDEN) if n.endswith('.test'))


_gpu_reason = None


def gpu_reason():
    """Why the GPU load test cannot run here, or None when it can."""
    global _gpu_reason
    if _gpu_reason is None:
        tmp = cs.TempDir()
        try:
            proc = cs.run(['verify', '--json', cs.fixture_path('plain_state_dict.pt')], cwd=tmp.path)
        finally:
            tmp.cleanup()
        gpu = json.loads(proc.stdout)['inputs'][0]['verification']['gpu']
        _gpu_reason = ('', ) if gpu['status'] == 'ok' else (gpu.get('reason', ''),)
    return _gpu_reason[0] or None


def lines_of(text):
    """Output split into lines; a missing final newline shows as its own marker."""
    lines = text.split('\n')
    if lines[-1] == '':
        lines.pop()
    else:
        lines[-1] += '\\ (no newline at end)'
    return lines


class GoldenTest(cs.CliTestCase):

    def substitutions(self, case, tmp):
        subs = {'%t': tmp, '%fixtures': cs.FIXTURES, '%s': case.path, '%S': GOLDEN}
        if 'no-gpu' in case.all('REQUIRES') or '%{gpu_reason}' in ''.join(t for _, t in case.directives):
            subs['%{gpu_reason}'] = gpu_reason() or '(the GPU load test runs here)'
        return subs

    @staticmethod
    def expand(text, subs):
        # Longest placeholder first: %fixtures before %t ... (none is a prefix of another
        # but %s / %S / %t are single letters; match them as whole tokens).
        return re.sub(r'%\{gpu_reason\}|%fixtures|%[tsS]', lambda m: subs[m.group(0)], text)

    @staticmethod
    def unexpand(text, subs):
        """Actual output with the substituted values turned back into placeholders."""
        for placeholder, value in sorted(subs.items(), key=lambda kv: -len(kv[1])):
            if value and placeholder != '%S':
                text = text.replace(value, placeholder)
        return text

    def run_case(self, path):
        case = Case(path)
        for req in case.all('REQUIRES'):
            if req != 'no-gpu':
                raise AssertionError(f'{path}: unknown REQUIRES {req!r}')
            if gpu_reason() is None:
                self.skipTest('the GPU load test runs on this machine')
        tmp = cs.TempDir(prefix='ckptfix-golden-')
        self.addCleanup(tmp.cleanup)
        subs = self.substitutions(case, tmp.path)
        for make in case.all('MAKE'):
            words = [self.expand(w, subs) for w in shlex.split(make)]
            if not words or words[0] not in GENERATORS:
                raise AssertionError(f'{path}: MAKE {make!r}: generators are {", ".join(GENERATORS)}')
            GENERATORS[words[0]](*words[1:])
        env = dict(os.environ)
        for item in case.all('ENV'):
            name, _, value = item.partition('=')
            env[name] = self.expand(value, subs)
        argv = [self.expand(w, subs) for w in shlex.split(case.one('RUN'))]
        if not argv or argv[0] not in ('ckptfix', 'ckptfix-fault-injection'):
            raise AssertionError(f'{path}: RUN must start with ckptfix or ckptfix-fault-injection')
        program = fault_injection_binary() if argv[0] == 'ckptfix-fault-injection' else cs.binary()
        proc = self.run_ckptfix(argv[1:], tmp.path, env, program)
        self.assert_not_crashed(proc)

        actual_stderr = self.unexpand(proc.stderr, subs)
        actual_stdout = self.unexpand(proc.stdout, subs)
        if UPDATE:
            case.rewrite(proc.returncode, lines_of(actual_stderr), lines_of(actual_stdout))
            case = Case(path)

        expected_exit = int(case.one('EXIT'))
        expected_stderr = case.all('STDERR')
        problems = []
        if proc.returncode != expected_exit:
            problems.append(f'exit code: expected {expected_exit}, got {proc.returncode}')
        problems += self.compare('stderr', expected_stderr, lines_of(actual_stderr))
        if case.all('STDOUT'):
            expected_stdout = [] if case.all('STDOUT') == [''] else case.all('STDOUT')
            problems += self.compare('stdout', expected_stdout, lines_of(actual_stdout))
        kind = case.one('KIND', required=False)
        if kind is not None and not problems:
            problems += self.check_kind(kind, argv[1:], tmp.path, env, proc, program)
        if problems:
            self.fail(f'\n{os.path.relpath(path, cs.REPO_ROOT)}: ckptfix {shlex.join(argv[1:])}\n'
                      + '\n'.join(problems)
                      + f'\n(accept the new output with: {sys.executable} {os.path.relpath(__file__, cs.REPO_ROOT)}'
                        f' --update)')

    @staticmethod
    def run_ckptfix(args, cwd, env, program=None):
        try:
            return subprocess.run([program or cs.binary()] + list(args), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=cs.RUN_TIMEOUT,
                                  errors='replace')
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f'ckptfix {" ".join(args)} hung') from e

    @staticmethod
    def compare(what, expected, actual):
        if expected == actual:
            return []
        diff = difflib.unified_diff(expected, actual, f'expected {what}', f'actual {what}', lineterm='')
        return [f'{what} differs:'] + ['  ' + line for line in diff]

    def check_kind(self, kind, args, cwd, env, proc, program=None):
        """Runs the command again with --json after its name; see the module doc."""
        if not args or args[0].startswith('-') or args[0] == 'diff':
            return [f'KIND {kind!r}: cannot be checked for this command (no --json report)']
        json_run = self.run_ckptfix([args[0], '--json'] + args[1:], cwd, env, program)
        if json_run.returncode != proc.returncode:
            return [f'KIND: with --json the exit code is {json_run.returncode}, not {proc.returncode}']
        if not json_run.stdout.strip():
            # Failed before any input was read: no report, and stderr must be the same.
            if json_run.stderr != proc.stderr:
                return ['KIND: with --json (no report) stderr differs:\n' + json_run.stderr]
            return []
        report = json.loads(json_run.stdout)
        kinds = [i.get('error_kind') for i in report['inputs'] if i.get('status') in ('failed', 'interrupted')]
        if not kinds or any(k != kind for k in kinds):
            return [f'KIND: expected every failed input to be {kind!r}, the --json report says {kinds}']
        return []

    def test_every_error_kind_has_a_case(self):
        with open(ERROR_H) as f:
            enum_body = re.search(r'enum class ErrorKind \{(.*?)\};', f.read(), re.S).group(1)
        enumerators = re.findall(r'^\s*(k[A-Za-z]+),', enum_body, re.M)
        with open(ERROR_CC) as f:
            source = f.read()
        names = {}
        for e in enumerators:
            m = re.search(r'case ErrorKind::' + e + r':\s*return "([a-z_-]+)";', source)
            self.assertIsNotNone(m, f'src/error.cc: no to_string case for ErrorKind::{e}')
            names[e] = m.group(1)
        covered = {Case(p).one('KIND', required=False) for p in case_files()}
        missing = sorted(f'{e} ({n})' for e, n in names.items() if n not in covered and n not in UNREACHABLE_KINDS)
        self.assertEqual(missing, [], 'error kinds without a golden case in tests/cli/golden/')
        unknown = sorted(k for k in covered if k and k not in names.values())
        self.assertEqual(unknown, [], 'golden cases name kinds error.h does not have')

    def test_usage_errors_of_every_command(self):
        with open(os.path.join(cs.REPO_ROOT, 'src', 'cli', 'main.cc')) as f:
            commands = re.findall(r'commands\.emplace_back\("([a-z-]+)"', f.read())
        self.assertTrue(commands)
        covered = set()
        for p in case_files():
            case = Case(p)
            words = shlex.split(case.one('RUN'))
            if case.one('EXIT') == '2' and len(words) > 1:
                covered.add(words[1])
        self.assertEqual(sorted(set(commands) - covered), [], 'commands without a usage-error (exit 2) case')


def add_case_tests():
    for path in case_files():
        name = 'test_' + re.sub(r'\W', '_', os.path.splitext(os.path.basename(path))[0])
        setattr(GoldenTest, name, lambda self, p=path: self.run_case(p))


def fault_injection_binary():
    """The test-only build of the CLI: --fault-injection PATH, else
    CKPTFIX_FAULT_INJECTION_BIN, else <repo>/build/tests/ckptfix_fault_injection."""
    path = os.path.abspath(FAULT_INJECTION or os.environ.get('CKPTFIX_FAULT_INJECTION_BIN') or
                           os.path.join(cs.REPO_ROOT, 'build', 'tests', 'ckptfix_fault_injection'))
    if not os.access(path, os.X_OK):
        raise AssertionError(f'fault-injection build not found: {path} (ninja -C build ckptfix_fault_injection)')
    return path


FAULT_INJECTION = None

add_case_tests()


if __name__ == '__main__':
    if '--update' in sys.argv:
        sys.argv.remove('--update')
        UPDATE = True
    if '--fault-injection' in sys.argv:
        at = sys.argv.index('--fault-injection')
        FAULT_INJECTION = sys.argv[at + 1]
        del sys.argv[at:at + 2]
    cs.main()
