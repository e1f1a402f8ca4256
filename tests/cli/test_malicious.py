#!/usr/bin/python3
"""ckptfix never runs the code in a malicious pickle, and refuses such files cleanly.

Run:  /usr/bin/python3 tests/cli/test_malicious.py [--ckptfix PATH] [unittest args]
      (or set CKPTFIX_BIN; default <repo>/build/ckptfix)

For each "malicious" fixture in fixtures/manifest.json (each payload runs
`touch <marker>` in the current directory):

  * control: torch.load(path, weights_only=False) in a subprocess whose cwd is a fresh
    temp dir DOES create the marker, so the payload is real;
  * `ckptfix inspect`, `inspect --json` and `convert -o out.pt` in another fresh temp dir
    exit 1 with one error line naming the dangerous global (as the pickle spells it or
    its canonical name), create no marker anywhere, write no output, and leave the input
    untouched.

The same is checked for payloads crafted here with other opcodes and spellings (INST,
OBJ, getattr/__import__, memoized GLOBAL, protocol-4 STACK_GLOBAL exec, `os.system`, subprocess.Popen
as `commands.Popen`, a deflated record, a legacy file with the payload in the object
pickle, and the security review's bypasses of the old denylist: pydoc.pipepager through
INST, pkgutil.resolve_name through OBJ, pydoc.locate, _pyio.open, gzip.open,
sqlite3.connect and logging.config.dictConfig creating files, protocol-4 `torch` +
`os.system`); their controls unpickle them with plain `pickle` (or torch.load) the same way.

Payloads only ever run in the control subprocesses, with cwd inside a TemporaryDirectory.
"""

import io
import json
import os
import pickletools
import re
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_support as cs  # noqa: E402

# The judge's interpreter (tests/run_judged.sh runs this test with it): it has torch and numpy.
TORCH_PYTHON = sys.executable
CONTROL_TIMEOUT = 120

TORCH_LOAD = ('import sys, torch\n'
              'torch.load(sys.argv[1], map_location="cpu", weights_only=False)\n')
PICKLE_LOAD = ('import pickle, sys\n'
               'with open(sys.argv[1], "rb") as f:\n'
               '    pickle.loads(f.read())\n')


def markers_under(root, names):
    """Paths under `root` whose file name is one of `names` or starts with 'ckptfix-pwned'."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames + dirnames:
            if f in names or f.startswith('ckptfix-pwned'):
                found.append(os.path.join(dirpath, f))
    return found


def run_control(code, target, cwd):
    """Run the loader `code` on `target` in a subprocess with `cwd` (payload may run there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTHON')}
    env['HOME'] = cwd
    return subprocess.run([TORCH_PYTHON, '-c', code, target], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=CONTROL_TIMEOUT, errors='replace')


def global_pattern(*names):
    """Regex for any of the names in quotes, e.g. 'posix.system'."""
    return '|'.join(f"'{re.escape(n)}'" for n in names if n)


# ---------------------------------------------------------------------------
# Payloads crafted here (bytes only; never unpickled in this process)
# ---------------------------------------------------------------------------

def crafted_payloads():
    """(name, pickle bytes, accepted spellings of the global, marker)."""
    m = 'ckptfix-pwned-gen-{}'.format
    return [
        # protocol 0 INST: no GLOBAL opcode, the class name is an INST argument
        ('inst', f"(S'touch {m('inst')}'\niposix\nsystem\n.".encode(), ['posix.system'], m('inst')),
        # OBJ: GLOBAL inside a MARK, called by OBJ rather than REDUCE
        ('obj', f"(cposix\nsystem\nS'touch {m('obj')}'\no.".encode(), ['posix.system'], m('obj')),
        # indirect: getattr(__import__('os'), 'system')(...); os.system itself is never a GLOBAL
        ('getattr_import',
         f"c__builtin__\ngetattr\n(c__builtin__\n__import__\n(S'os'\ntRS'system'\ntR(S'touch {m('getattr')}'\ntR."
         .encode(), ['__builtin__.getattr', '__builtin__.__import__', 'builtins.getattr', 'builtins.__import__'],
         m('getattr')),
        # GLOBAL memoized, then fetched with BINGET before REDUCE
        ('memo_global', b'\x80\x02cposix\nsystem\nq\x00h\x00' + cs.binunicode(f"touch {m('memo')}") + b'\x85R.',
         ['posix.system'], m('memo')),
        # the portable spelling os.system instead of posix.system
        ('os_system', f"cos\nsystem\n(S'touch {m('os')}'\ntR.".encode(), ['os.system'], m('os')),
        # protocol 4: builtins.exec through STACK_GLOBAL with MEMOIZE
        ('exec_stack_global',
         b'\x80\x04' + cs.short_binunicode('builtins') + b'\x94' + cs.short_binunicode('exec') + b'\x94\x93\x94'
         + cs.binunicode(f"import os; os.system('touch {m('exec')}')") + b'\x94\x85\x94R\x94.',
         ['builtins.exec'], m('exec')),
        # subprocess.Popen as protocol 2 spells it (Python 2 compat name 'commands')
        ('popen_compat',
         b'\x80\x02ccommands\nPopen\n]q\x00(' + cs.binunicode('touch') + cs.binunicode(m('popen')) + b'e\x85R.',
         ['commands.Popen', 'subprocess.Popen'], m('popen')),
        # the call sits inside a list after harmless items
        ('nested_in_list',
         b'\x80\x02]q\x00(K\x01K\x02cposix\nsystem\n' + cs.binunicode(f"touch {m('list')}") + b'\x85Re.',
         ['posix.system'], m('list')),
        # bypasses of the old denylist found by the security review
        ('pydoc_pipepager_inst', f"(S'text'\nS'touch {m('pipepager')}'\nipydoc\npipepager\n.".encode(),
         ['pydoc.pipepager'], m('pipepager')),
        ('pkgutil_resolve_name_obj',
         f"(cpkgutil\nresolve_name\nS'os:system'\no(S'touch {m('resolve')}'\ntR.".encode(),
         ['pkgutil.resolve_name'], m('resolve')),
        ('pydoc_locate', f"cpydoc\nlocate\n(S'os.system'\ntR(S'touch {m('locate')}'\ntR.".encode(),
         ['pydoc.locate'], m('locate')),
        ('pyio_open', f"c_pyio\nopen\n(S'{m('pyio')}'\nS'w'\ntR.".encode(), ['_pyio.open'], m('pyio')),
        ('gzip_open', f"cgzip\nopen\n(S'{m('gzip')}'\nS'wb'\ntR.".encode(), ['gzip.open'], m('gzip')),
        ('sqlite3_connect', f"csqlite3\nconnect\n(S'{m('sqlite')}'\ntR.".encode(), ['sqlite3.connect'],
         m('sqlite')),
        ('logging_dictconfig',
         (f"clogging.config\ndictConfig\n((dS'version'\nI1\nsS'handlers'\n(dS'h'\n(dS'class'\n"
          f"S'logging.FileHandler'\nsS'filename'\nS'{m('logging')}'\nssstR.").encode(),
         ['logging.config.dictConfig'], m('logging')),
        # protocol 4 reaches os.system through an attribute of torch
        ('torch_os_system_dotted',
         b'\x80\x04' + cs.short_binunicode('torch') + cs.short_binunicode('os.system') + b'\x93'
         + cs.binunicode(f"touch {m('dotted')}") + b'\x85R.',
         ['torch.os.system'], m('dotted')),
    ]


class MaliciousTest(cs.CliTestCase):

    def setUp(self):
        # ckptfix runs (and its inputs) live in self.tmp, which must never see a marker;
        # the control loaders run in self.control_tmp, where the markers are expected.
        self.tmp = cs.TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.control_tmp = cs.TempDir(prefix='ckptfix-control-')
        self.addCleanup(self.control_tmp.cleanup)
        self.counter = 0

    def fresh_dir(self, label, root=None):
        self.counter += 1
        path = os.path.join(root or self.tmp.path, f'{self.counter:02d}-{label}')
        os.makedirs(path)
        return path

    # -- the two halves of each check ----------------------------------------

    def assert_payload_runs(self, code, target, marker, label):
        """Control: loading the file with Python creates `marker` in the cwd."""
        cwd = self.fresh_dir(f'control-{label}', root=self.control_tmp.path)
        proc = run_control(code, target, cwd)
        self.assertGreaterEqual(proc.returncode, 0, f'control loader crashed: {proc.stderr[-2000:]}')
        self.assertTrue(
            os.path.exists(os.path.join(cwd, marker)),
            f'control failed: loading {target} with Python did not create {marker} in {cwd}, so the test '
            f'cannot prove the payload is real. loader exit {proc.returncode}, stderr tail:\n{proc.stderr[-2000:]}')

    def assert_refused(self, path, names, marker, label):
        """ckptfix inspect / inspect --json / convert refuse `path` without running anything."""
        cwd = self.fresh_dir(f'ckptfix-{label}')
        before_input = cs.file_state(path)
        pattern = global_pattern(*names)
        watched_extra = [os.path.dirname(path), cs.REPO_ROOT, os.path.expanduser('~')]
        pre_existing = {d: os.path.exists(os.path.join(d, marker)) for d in watched_extra}

        runs = [('inspect', ['inspect', path]),
                ('inspect --json', ['inspect', '--json', path]),
                ('convert', ['convert', path, '-o', 'out.pt']),
                ('convert --force', ['convert', path, '-o', 'out.pt', '--force']),
                ('salvage', ['salvage', path, '-o', 'out.pt'])]
        for label_run, args in runs:
            with self.subTest(command=label_run, file=os.path.basename(path)):
                before = cs.tree(cwd)
                proc = cs.run(args, cwd=cwd)
                if label_run == 'inspect --json':
                    self.check_json_failure(proc, path, pattern)
                else:
                    msg = self.assert_error_line(proc, path, pattern)
                    self.assertRegex(msg, r'dangerous|refus|unsafe|not allowed|forbidden',
                                     'error does not say the global was refused as dangerous')
                self.assertEqual(markers_under(self.tmp.path, {marker}), [],
                                 f'PAYLOAD RAN: marker {marker} appeared under the temp dir' + cs.describe(proc))
                for d, existed in pre_existing.items():
                    if not existed:
                        self.assertFalse(os.path.exists(os.path.join(d, marker)),
                                         f'PAYLOAD RAN: marker {marker} appeared in {d}' + cs.describe(proc))
                self.assertFalse(os.path.lexists(os.path.join(cwd, 'out.pt')),
                                 'convert of a malicious file wrote out.pt' + cs.describe(proc))
                self.assert_tree_unchanged(cwd, before, proc, what='working directory')
                self.assert_untouched(path, before_input)

    def check_json_failure(self, proc, path, pattern):
        self.assert_not_crashed(proc)
        self.assertEqual(proc.returncode, 1, 'inspect --json on a malicious file must exit 1' + cs.describe(proc))
        try:
            doc = json.loads(proc.stdout)
        except ValueError as e:
            self.fail(f'inspect --json did not print valid JSON ({e})' + cs.describe(proc))
        self.assertEqual(len(doc['inputs']), 1, cs.describe(proc))
        entry = doc['inputs'][0]
        self.assertEqual(entry.get('status'), 'failed', cs.describe(proc))
        self.assertEqual(entry.get('path'), path, cs.describe(proc))
        self.assertRegex(entry.get('error', ''), pattern, 'JSON error text does not name the global')
        self.assertEqual([t for t in doc.get('tensors', []) if t.get('file') == path], [],
                         'a refused file still contributed tensors to the JSON')
        self.assertLessEqual(len(proc.stderr.splitlines()), 1, 'more than one stderr line' + cs.describe(proc))
        if proc.stderr:
            self.assertTrue(proc.stderr.startswith(f"{cs.ERROR_PREFIX}'{path}': "), cs.describe(proc))

    # -- tests ---------------------------------------------------------------

    def test_manifest_fixtures(self):
        entries = cs.fixtures('malicious')
        for entry in entries:
            for field in ('global', 'pickle_global', 'marker'):
                self.assertTrue(entry.get(field), f'{entry["file"]}: manifest lacks {field!r}')
            with self.subTest(fixture=entry['file'], step='control: torch.load runs the payload'):
                self.assertIn(entry['marker'].encode(), cs.read(entry['path']),
                              'the fixture does not hold its own marker name; refusing to run it')
                self.assert_payload_runs(TORCH_LOAD, entry['path'], entry['marker'], entry['file'])
            with self.subTest(fixture=entry['file'], step='ckptfix refuses'):
                self.assert_refused(entry['path'], [entry['pickle_global'], entry['global']],
                                    entry['marker'], entry['file'])

    def test_crafted_payloads(self):
        """Other opcodes and spellings, each in a torch-like zip; controls use plain pickle."""
        inputs = self.fresh_dir('inputs')
        for name, pkl, names, marker in crafted_payloads():
            with self.subTest(payload=name):
                # Static sanity check of our own bytes before running them anywhere.
                ops = [op.name for op, _, _ in pickletools.genops(pkl)]
                self.assertEqual(ops[-1], 'STOP')
                raw = os.path.join(inputs, f'{name}.pkl')
                cs.write(raw, pkl)
                self.assert_payload_runs(PICKLE_LOAD, raw, marker, name)
                ckpt = os.path.join(inputs, f'{name}.pt')
                with zipfile.ZipFile(ckpt, 'w', zipfile.ZIP_STORED) as z:
                    z.writestr(f'{name}/data.pkl', pkl)
                    z.writestr(f'{name}/version', b'3\n')
                self.assert_refused(ckpt, names, marker, name)

    def test_deflated_payload(self):
        """The payload record is deflate-compressed: a raw byte scan of the file cannot see it."""
        name, pkl, names, marker = crafted_payloads()[0]
        inputs = self.fresh_dir('inputs')
        ckpt = os.path.join(inputs, 'deflated.pt')
        with zipfile.ZipFile(ckpt, 'w', zipfile.ZIP_DEFLATED) as z:
            z.writestr('deflated/data.pkl', pkl)
            z.writestr('deflated/version', b'3\n')
        self.assertNotIn(b'system', cs.read(ckpt), 'deflate did not hide the payload bytes')
        self.assert_payload_runs(TORCH_LOAD, ckpt, marker, 'deflated')
        self.assert_refused(ckpt, names, marker, 'deflated')

    def test_legacy_payload_in_object_pickle(self):
        """Legacy stream with a genuine magic number / sys_info; the payload is the object pickle."""
        genuine = cs.read(cs.fixture_path('legacy_state_dict.pt'))
        f = io.BytesIO(genuine)
        bounds = []
        for _ in range(5):
            start = f.tell()
            for _op in pickletools.genops(f):
                pass
            bounds.append((start, f.tell()))
        marker = 'ckptfix-pwned-gen-legacy-object'
        evil = b'\x80\x02cposix\nsystem\n' + cs.binunicode(f'touch {marker}') + b'\x85R.'
        data = genuine[:bounds[3][0]] + evil + genuine[bounds[3][1]:]
        ckpt = cs.write(os.path.join(self.fresh_dir('inputs'), 'legacy_object.pt'), data)
        self.assert_payload_runs(TORCH_LOAD, ckpt, marker, 'legacy-object')
        self.assert_refused(ckpt, ['posix.system'], marker, 'legacy-object')

    def test_json_mixed_with_valid_input(self):
        """A malicious file among valid ones: exit 1, the valid one is still reported."""
        good = cs.fixture_path('plain_state_dict.pt')
        for entry in cs.fixtures('malicious'):
            with self.subTest(fixture=entry['file']):
                cwd = self.fresh_dir('mixed')
                proc = cs.run(['inspect', '--json', good, entry['path']], cwd=cwd)
                self.assert_not_crashed(proc)
                self.assertEqual(proc.returncode, 1, cs.describe(proc))
                doc = json.loads(proc.stdout)
                self.assertEqual([(i['path'], i['status']) for i in doc['inputs']],
                                 [(good, 'ok'), (entry['path'], 'failed')], cs.describe(proc))
                self.assertRegex(doc['inputs'][1]['error'], global_pattern(entry['pickle_global'], entry['global']))
                self.assertEqual({t['file'] for t in doc['tensors']}, {good})
                self.assertEqual(markers_under(self.tmp.path, {entry['marker']}), [])


if __name__ == '__main__':
    cs.main()
