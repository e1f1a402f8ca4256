#!/usr/bin/python3
"""ckptfix on damaged and non-checkpoint inputs, and on bad command lines.

Run:  /usr/bin/python3 tests/cli/test_bad_inputs.py [--ckptfix PATH] [unittest args]
      (or set CKPTFIX_BIN; default <repo>/build/ckptfix)

For every bad input, both `inspect` and `convert` must:
  * exit with status 1 exactly (no signal, no other code),
  * print exactly one stderr line `ckptfix: error: '<path as given>': <where>: <what>`
    whose text shows the failure was understood (and names the place when we know it),
  * write nothing: no -o file, no temp file, nothing new in the working directory,
  * leave the input byte-for-byte untouched (sha256, size, mtime).

Inputs are the "damaged" and "unsupported" fixtures from fixtures/manifest.json, plus
damaged copies of valid fixtures and hand-crafted archives made here with Python
(zipfile, pickle and torch's own zip writer). Each crafted defect comes with an
undamaged control built the same way, which ckptfix (and torch) must accept, so a
failure is known to come from the defect and not from the crafting.

Usage errors (unknown subcommand or flag, convert without -o, existing output without
--force) must exit 2. Every file is created inside a TemporaryDirectory.
"""

import collections
import io
import os
import pickle
import pickletools
import re
import shutil
import stat
import struct
import sys
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_support as cs  # noqa: E402

import torch  # noqa: E402  (only /usr/bin/python3 has it; used to craft archives)

# Fragments that show a truncated / cut-off zip was understood as such.
TRUNCATED_ZIP = r'truncat|central directory|end of (the )?file'


# ---------------------------------------------------------------------------
# Crafting helpers (pure Python; nothing here unpickles anything)
# ---------------------------------------------------------------------------

def zip_records(path):
    """[(name without root, data)] in archive order, and the root folder."""
    with zipfile.ZipFile(path) as z:
        names = [i.filename for i in z.infolist()]
        root = names[0].split('/', 1)[0]
        return [(n[len(root) + 1:], z.read(n)) for n in names], root


def python_zip(path, records, root):
    """A torch-like zip written by Python zipfile (stored, fixed timestamps)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        for name, data in records:
            full = f'{root}/{name}' if root else name
            z.writestr(zipfile.ZipInfo(full, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


def torch_zip(path, pkl, records=()):
    """A zip checkpoint written by torch's own writer (root = file name stem; it adds 'version')."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = torch._C.PyTorchFileWriter(path)
    writer.write_record('data.pkl', pkl, len(pkl))
    for name, data in records:
        if name != 'version':
            writer.write_record(name, data, len(data))
    writer.write_end_of_file()
    del writer
    return path


def pickle_bounds(data, count):
    """(start, end) of the first `count` concatenated pickles, found by pickletools
    (which only parses opcodes, never executes them)."""
    f = io.BytesIO(data)
    bounds = []
    for _ in range(count):
        start = f.tell()
        for _op in pickletools.genops(f):
            pass
        bounds.append((start, f.tell()))
    return bounds


def opcode_positions(pkl):
    return [(op.name, pos) for op, _arg, pos in pickletools.genops(pkl)]


class _StoragePlaceholder:
    pass


class _TensorRef:
    """Pickles like a torch tensor: _rebuild_tensor_v2(storage, offset, size, stride, ...)."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, self.offset, tuple(self.size), tuple(self.stride), False,
                 collections.OrderedDict()))


def tensor_pickle(key, numel, offset, size, stride):
    """data.pkl for {key: tensor viewing float32 storage '0' of `numel` elements}, protocol 2,
    laid out exactly as torch.save does (persistent id tuple, _rebuild_tensor_v2)."""
    storage = _StoragePlaceholder()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is storage:
                return ('storage', torch.FloatStorage, '0', 'cpu', numel)
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(collections.OrderedDict([(key, _TensorRef(storage, offset, size, stride))]))
    return buf.getvalue()


def torch_loads_ok(path):
    """Whether torch itself loads a file we crafted. weights_only=True: torch's restricted
    unpickler, so even this check cannot run pickle code."""
    try:
        torch.load(path, map_location='cpu', weights_only=True)
        return True
    except Exception:  # noqa: BLE001  (any refusal counts)
        return False


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

class BadInputTest(cs.CliTestCase):

    def setUp(self):
        self.tmp = cs.TempDir()
        self.cwd = self.tmp.path
        self.addCleanup(self.tmp.cleanup)

    def make(self, name, data):
        """Write a generated input under <tmp>/inputs/; return its path relative to cwd."""
        cs.write(os.path.join(self.cwd, 'inputs', name), data)
        return os.path.join('inputs', name)

    def abs(self, rel):
        return os.path.join(self.cwd, rel)

    def assert_accepted(self, rel, why):
        """Control: ckptfix inspect accepts an undamaged twin built the same way."""
        proc = cs.run(['inspect', rel], cwd=self.cwd)
        self.assert_not_crashed(proc)
        self.assertEqual(proc.returncode, 0,
                         f'control file ({why}) should be accepted; the crafting is broken' + cs.describe(proc))


class FixtureTest(BadInputTest):
    """Damaged and unsupported fixtures listed in manifest.json."""

    DAMAGED_PATTERNS = {
        'truncated_half.pt': [TRUNCATED_ZIP],
        'truncated_central_dir.pt': [TRUNCATED_ZIP],
        'not_a_checkpoint.txt': [r'not a (pytorch |torch )?checkpoint|neither'],
        'empty.pt': [r'empty|0 bytes'],
        'legacy_truncated.pt': [r'truncat|past the end|end of (the )?file', r'storage'],
    }

    def test_damaged_fixtures(self):
        entries = cs.fixtures('damaged')
        for entry in entries:
            with self.subTest(fixture=entry['file'], expect=entry.get('expect')):
                patterns = self.DAMAGED_PATTERNS.get(entry['file'], [])
                self.check_input_fails(entry['path'], self.cwd, *patterns)
        self.assertTrue(set(self.DAMAGED_PATTERNS) <= {e['file'] for e in entries},
                        'a damaged fixture this test knows about is missing from manifest.json')

    def test_unsupported_fixtures(self):
        patterns = {'torchscript': [r'torchscript|torch\.jit'], 'tar': [r'\btar\b']}
        entries = cs.fixtures('unsupported')
        for entry in entries:
            with self.subTest(fixture=entry['file'], format=entry['format']):
                self.assertIn(entry['format'], patterns, f'no expectation for unsupported format {entry["format"]}')
                self.check_input_fails(entry['path'], self.cwd, *patterns[entry['format']])
        self.assertEqual({e['format'] for e in entries}, set(patterns))

    def test_path_is_quoted_as_given(self):
        """Relative path with spaces and ./ prefix is echoed verbatim."""
        os.makedirs(self.abs('my dir'))
        shutil.copy(cs.fixture_path('truncated_half.pt'), self.abs('my dir/trunc half.pt'))
        for given in ('my dir/trunc half.pt', './my dir/trunc half.pt', self.abs('my dir/trunc half.pt')):
            with self.subTest(given=given):
                self.check_input_fails(given, self.cwd, TRUNCATED_ZIP, input_path=self.abs('my dir/trunc half.pt'))


class TruncatedZipTest(BadInputTest):
    """plain_state_dict.pt (a valid torch-written zip) cut at many points."""

    def setUp(self):
        super().setUp()
        self.good = cs.read(cs.fixture_path('plain_state_dict.pt'))

    def test_truncated_zip(self):
        n = len(self.good)
        cd_start = self.good.find(b'PK\x01\x02')
        cuts = {30, 100, n // 2, cd_start, cd_start + 20, n - 100, n - 23, n - 22, n - 12, n - 1}
        for cut in sorted(cuts):
            with self.subTest(cut=cut, of=n):
                rel = self.make(f'cut_{cut}.pt', self.good[:cut])
                self.check_input_fails(rel, self.cwd, TRUNCATED_ZIP)

    def test_truncated_inside_zip_magic(self):
        """1-3 bytes of 'PK\\x03\\x04' are a truncated zip too, not 'some other file'."""
        for cut in (1, 2, 3):
            with self.subTest(cut=cut):
                rel = self.make(f'cut_{cut}.pt', self.good[:cut])
                msgs = self.check_input_fails(rel, self.cwd)
                for command, msg in msgs.items():
                    self.assertRegex(
                        msg, re.compile(TRUNCATED_ZIP + r'|too short', re.I),
                        f'CONTRACT VIOLATION: `{command}` of the first {cut} byte(s) of a zip checkpoint must say '
                        f'the file is truncated / too short (as it does from 4 bytes on); it calls it "not a '
                        f'PyTorch checkpoint" instead: {msg!r}')


class TruncatedLegacyTest(BadInputTest):
    """legacy_state_dict.pt cut inside its five pickles and inside the storage data."""

    PICKLES = ('magic number', 'protocol version', 'sys_info', 'object', 'storage key')

    def setUp(self):
        super().setUp()
        self.good = cs.read(cs.fixture_path('legacy_state_dict.pt'))
        self.bounds = pickle_bounds(self.good, 5)
        self.data_start = self.bounds[-1][1]

    def test_cut_inside_pickles(self):
        cuts = []
        for i, (start, end) in enumerate(self.bounds):
            cuts += [(i, start + 1), (i, (start + end) // 2), (i, end - 1)]
        for i, cut in cuts:
            with self.subTest(pickle=self.PICKLES[i], cut=cut):
                rel = self.make(f'legacy_cut_{cut}.pt', self.good[:cut])
                msgs = self.check_input_fails(rel, self.cwd, r'truncat', r'legacy', r'pickle',
                                              r'offset 0x[0-9a-f]+')
                for command, msg in msgs.items():
                    off = int(re.search(r'offset 0x([0-9a-f]+)', msg, re.I).group(1), 16)
                    self.assertTrue(self.bounds[i][0] <= off <= cut,
                                    f'{command}: reported offset {off:#x} is not inside the cut pickle '
                                    f'[{self.bounds[i][0]:#x}, {cut:#x}]: {msg!r}')
                    self.assertIn(self.PICKLES[i], msg, f'{command}: message does not name the pickle')

    def test_cut_inside_storage_data(self):
        n = len(self.good)
        s = self.data_start
        for cut in (s, s + 4, s + 8, s + 8 + 10, (s + n) // 2, n - 1):
            with self.subTest(cut=cut, data_start=s, of=n):
                rel = self.make(f'legacy_cut_{cut}.pt', self.good[:cut])
                self.check_input_fails(rel, self.cwd, r"storage '\d+'",
                                       r'truncat|past the end|end of (the )?file')


class ZipStructureTest(BadInputTest):
    """Corrupted central directories, local header offsets and record layout."""

    def setUp(self):
        super().setUp()
        self.good = cs.read(cs.fixture_path('plain_state_dict.pt'))
        self.cd = [m.start() for m in re.finditer(b'PK\x01\x02', self.good)]
        with zipfile.ZipFile(cs.fixture_path('plain_state_dict.pt')) as z:
            self.infos = z.infolist()
        self.assertEqual(len(self.cd), len(self.infos))

    def test_bad_central_directory_signature(self):
        last = len(self.cd) - 1
        for label, entries in (('first', [0]), ('middle', [3]), ('last', [last]), ('all', range(len(self.cd)))):
            with self.subTest(entries=label):
                data = bytearray(self.good)
                for e in entries:
                    data[self.cd[e]:self.cd[e] + 4] = b'\xde\xad\xbe\xef'
                rel = self.make(f'bad_cd_{label}.pt', bytes(data))
                msgs = self.check_input_fails(rel, self.cwd, r'central directory')
                first_bad = self.cd[min(entries)]
                for command, msg in msgs.items():
                    self.assertRegex(msg, rf'0x0*{first_bad:x}\b|entry {min(entries)}\b',
                                     f'{command}: message does not locate the bad entry (offset {first_bad:#x})')

    def test_local_header_offset_into_garbage(self):
        garbage = self.infos[1].header_offset + 80      # inside the bytes of data/0
        for e in (0, 3, len(self.cd) - 1):
            name = self.infos[e].filename
            with self.subTest(entry=name):
                data = bytearray(self.good)
                self.assertEqual(struct.unpack_from('<I', data, self.cd[e] + 42)[0], self.infos[e].header_offset)
                struct.pack_into('<I', data, self.cd[e] + 42, garbage)
                rel = self.make(f'bad_lho_{e}.pt', bytes(data))
                self.check_input_fails(rel, self.cwd, r'local header', re.escape(name))
        with self.subTest(entry='offset past end of file'):
            data = bytearray(self.good)
            struct.pack_into('<I', data, self.cd[3] + 42, 0x7FFFFFF0)
            rel = self.make('bad_lho_past_end.pt', bytes(data))
            self.check_input_fails(rel, self.cwd, re.escape(self.infos[3].filename),
                                   r'past the end|truncat|end of (the )?file')

    def test_records_not_in_subdirectory(self):
        records, root = zip_records(cs.fixture_path('plain_state_dict.pt'))
        python_zip(self.abs('inputs/toplevel.pt'), records, root=None)
        self.check_input_fails('inputs/toplevel.pt', self.cwd, r'subdirectory|folder|root')
        python_zip(self.abs('inputs/control/toplevel.pt'), records, root='toplevel')
        self.assert_accepted('inputs/control/toplevel.pt', 'same records inside a root folder')


class StorageTest(BadInputTest):
    """Records and tensor views that do not fit the storages the pickle declares."""

    def test_record_shorter_than_storage(self):
        records, root = zip_records(cs.fixture_path('plain_state_dict.pt'))
        python_zip(self.abs('inputs/control.pt'), records, root)
        self.assert_accepted('inputs/control.pt', 'plain_state_dict re-zipped unchanged')
        sizes = dict(records)
        for key, cut in (('0', 4), ('7', 6), ('8', 12)):
            full = len(sizes[f'data/{key}'])
            short = full - cut
            with self.subTest(record=f'data/{key}', bytes=full, now=short):
                changed = [(n, d[:short] if n == f'data/{key}' else d) for n, d in records]
                rel = os.path.relpath(python_zip(self.abs(f'inputs/short_{key}.pt'), changed, root), self.cwd)
                self.check_input_fails(rel, self.cwd, rf"data/{key}\b|storage '{key}'",
                                       rf'\b{full}\b', rf'\b{short}\b')

    def test_tensor_view_past_storage_end(self):
        raw = struct.pack('<4f', 1.0, 2.0, 3.0, 4.0)
        # (label, offset, size, stride, fits in a 4-element storage?)
        views = [
            ('size 100', 0, (100,), (1,), False),
            ('size 4', 0, (4,), (1,), True),
            ('offset 2 size 3', 2, (3,), (1,), False),
            ('offset 2 size 2', 2, (2,), (1,), True),
            ('2x2 stride 3', 0, (2, 2), (3, 1), False),
            ('2x2 stride 2', 0, (2, 2), (2, 1), True),
            ('offset 5 size 0', 5, (0,), (1,), True),
        ]
        for label, offset, size, stride, fits in views:
            with self.subTest(view=label):
                name = f'view_{label.replace(" ", "_")}.pt'
                path = torch_zip(self.abs(f'inputs/{name}'), tensor_pickle('w', 4, offset, size, stride),
                                 [('data/0', raw)])
                rel = os.path.relpath(path, self.cwd)
                if fits:
                    self.assertTrue(torch_loads_ok(path), f'torch rejects the control {label}')
                    self.assert_accepted(rel, f'in-bounds view {label}')
                    continue
                self.assertFalse(torch_loads_ok(path), f'torch accepts {label}; the crafted view is not bad')
                self.check_input_fails(rel, self.cwd, r"key 'w'", r'storage', r'\b4\b')

    def test_missing_storage_record(self):
        records, root = zip_records(cs.fixture_path('plain_state_dict.pt'))
        for key in ('0', '3', '8'):
            with self.subTest(missing=f'data/{key}'):
                kept = [(n, d) for n, d in records if n != f'data/{key}']
                rel = os.path.relpath(python_zip(self.abs(f'inputs/missing_{key}.pt'), kept, root), self.cwd)
                self.check_input_fails(rel, self.cwd, rf'data/{key}\b', r'missing|not found|no record|absent')


class BadPickleTest(BadInputTest):
    """data.pkl itself is broken; the storage records are intact."""

    def setUp(self):
        super().setUp()
        records, _ = zip_records(cs.fixture_path('plain_state_dict.pt'))
        self.pkl = dict(records)['data.pkl']
        self.data = [(n, d) for n, d in records if n.startswith('data/')]

    def archive(self, name, pkl):
        path = torch_zip(self.abs(f'inputs/{name}.pt'), pkl, self.data)
        return os.path.relpath(path, self.cwd)

    def test_control(self):
        self.assert_accepted(self.archive('control', self.pkl), 'data.pkl rewritten unchanged by torch writer')

    def test_unknown_opcode(self):
        rel = self.archive('op_only', b'\x80\x02\xff')
        self.check_input_fails(rel, self.cwd, r'unknown pickle opcode 0xff', r'op_only/data\.pkl\+0x0*2\b')
        ops = opcode_positions(self.pkl)
        for index in (1, 5, len(ops) // 2, len(ops) - 1):
            opname, pos = ops[index]
            with self.subTest(replaced=opname, at=hex(pos)):
                patched = bytearray(self.pkl)
                patched[pos] = 0xFF
                rel = self.archive(f'op_{pos}', bytes(patched))
                self.check_input_fails(rel, self.cwd, r'unknown pickle opcode 0xff',
                                       rf'op_{pos}/data\.pkl\+0x0*{pos:x}\b')

    def test_truncated_pickle(self):
        n = len(self.pkl)
        self.assertEqual(self.pkl[-1:], b'.')
        for cut in (n - 1, n // 2, 3, 2):
            with self.subTest(cut=cut, of=n):
                rel = self.archive(f'pkl_cut_{cut}', self.pkl[:cut])
                self.check_input_fails(rel, self.cwd, rf'pkl_cut_{cut}/data\.pkl\b', r'truncat|STOP|end of')

    def test_empty_pickle(self):
        rel = self.archive('pkl_empty', b'')
        self.check_input_fails(rel, self.cwd, r'data\.pkl', r'empty|truncat|STOP|end of')

    def test_stack_underflow(self):
        for label, pkl in (('STOP', b'\x80\x02.'), ('REDUCE', b'\x80\x02R.'), ('SETITEM', b'\x80\x02}s.'),
                           ('TUPLE no MARK', b'\x80\x02t.')):
            with self.subTest(underflow=label):
                rel = self.archive(f'underflow_{label.split()[0]}', pkl)
                self.check_input_fails(rel, self.cwd, r'data\.pkl\+0x', r'underflow|empty stack|mark|stack')


class NotAFileTest(BadInputTest):

    def test_directory(self):
        os.makedirs(self.abs('a_directory.pt'))
        cs.write(self.abs('a_directory.pt/inner.pt'), cs.read(cs.fixture_path('plain_state_dict.pt')))
        for given in ('a_directory.pt', self.abs('a_directory.pt')):
            with self.subTest(given=given):
                msgs = self.check_input_fails(given, self.cwd, r'directory')
                # If the message recommends a flag, that flag must exist.
                for command, msg in msgs.items():
                    for flag in set(re.findall(r'(--[a-z][a-z-]*)', msg)):
                        help_proc = cs.run([command, '--help'], cwd=self.cwd)
                        self.assertIn(flag, help_proc.stdout,
                                      f'BUG: the `{command}` error recommends {flag}, but `ckptfix {command} '
                                      f'--help` has no such option (passing it is a usage error, exit 2): {msg!r}')

    def test_nonexistent_path(self):
        for given in ('no_such_file.pt', 'no_such_dir/x.pt', self.abs('missing.pt')):
            with self.subTest(given=given):
                self.check_input_fails(given, self.cwd, r'no such file|does not exist|not found|cannot open')
                self.assertFalse(os.path.exists(self.abs(given)))


class UsageTest(BadInputTest):
    """Bad command lines exit 2; an existing output needs --force."""

    def setUp(self):
        super().setUp()
        self.input = self.abs('in.pt')
        shutil.copy(cs.fixture_path('plain_state_dict.pt'), self.input)
        self.input_state = cs.file_state(self.input)

    def usage(self, args, *patterns):
        before = cs.tree(self.cwd)
        proc = cs.run(args, cwd=self.cwd)
        self.assert_usage_error(proc, *patterns)
        self.assert_tree_unchanged(self.cwd, before, proc)
        self.assert_untouched(self.input, self.input_state)
        return proc

    def test_unknown_subcommand(self):
        self.usage(['frobnicate', 'in.pt'])
        self.usage(['frobnicate'])

    def test_no_arguments(self):
        self.usage([])

    def test_unknown_flag(self):
        for args in (['inspect', '--bogus', 'in.pt'], ['inspect', 'in.pt', '--no-such-flag'],
                     ['convert', 'in.pt', '-o', 'out.pt', '--bogus'], ['--bogus', 'inspect', 'in.pt']):
            with self.subTest(args=args):
                self.usage(args, r'bogus|no-such-flag')
                self.assertFalse(os.path.exists(self.abs('out.pt')))

    def test_missing_arguments(self):
        with self.subTest('convert without -o'):
            self.usage(['convert', 'in.pt'], r'-o\b|--output')
        with self.subTest('convert -o without value'):
            self.usage(['convert', 'in.pt', '-o'])
        with self.subTest('inspect without files'):
            self.usage(['inspect'])
        with self.subTest('convert without input'):
            self.usage(['convert', '-o', 'out.pt'])

    def test_existing_output_without_force(self):
        out_dir = self.abs('out')
        old = cs.write(os.path.join(out_dir, 'existing.pt'), b'precious old content\n')
        old_state = cs.file_state(old)
        for given in ('out/existing.pt', old):
            with self.subTest(output=given):
                before = cs.tree(self.cwd)
                proc = cs.run(['convert', 'in.pt', '-o', given], cwd=self.cwd)
                # Exit 1: written and compared, it is not this run's output (issue 65).
                self.assert_error_line(proc, given, r'exist', r'--force')
                self.assert_untouched(old, old_state, what='existing output')
                self.assert_tree_unchanged(self.cwd, before, proc)
                self.assert_untouched(self.input, self.input_state)

    def test_existing_output_with_force(self):
        for flag in ('--force', '-f'):
            with self.subTest(flag=flag):
                out_dir = self.abs(f'out{flag}')
                old = cs.write(os.path.join(out_dir, 'existing.pt'), b'precious old content\n')
                proc = cs.run(['convert', 'in.pt', '-o', old, flag], cwd=self.cwd)
                self.assert_not_crashed(proc)
                self.assertEqual(proc.returncode, 0, 'convert --force onto an existing file failed' + cs.describe(proc))
                self.assertEqual(os.listdir(out_dir), ['existing.pt'], 'leftover files next to the output')
                new = cs.read(old)
                self.assertTrue(new.startswith(b'PK\x03\x04'), 'output was not replaced by a zip checkpoint')
                with zipfile.ZipFile(old) as z:
                    self.assertIsNone(z.testzip())
                check = cs.run(['inspect', old], cwd=self.cwd)
                self.assertEqual(check.returncode, 0, 'replaced output does not inspect' + cs.describe(check))
                self.assert_untouched(self.input, self.input_state)

    def test_an_output_that_is_not_a_regular_file_is_refused(self):
        """Renaming over a FIFO, device or socket replaces the node itself (as root, `-o /dev/null
        --force` replaced /dev/null with a checkpoint), and over a directory it fails only at the end:
        each is refused before any work, with or without --force. (/dev/null itself is tested in
        io_test.cc, where nothing is ever committed.)"""
        os.mkfifo(self.abs('fifo.pt'))
        os.makedirs(self.abs('dir.pt'))
        os.symlink('nowhere.pt', self.abs('dangling.pt'))
        os.symlink('fifo.pt', self.abs('to_fifo.pt'))
        for output, pattern in (('fifo.pt', r"'fifo\.pt': is a FIFO: an output must be a regular file"),
                                ('to_fifo.pt', r"'to_fifo\.pt': is a FIFO"),
                                ('dir.pt', r"'dir\.pt': is a directory"),
                                ('dangling.pt', r"'dangling\.pt': is a symbolic link that leads to no file")):
            for args in (['convert', 'in.pt', '-o', output], ['cast', 'in.pt', '--dtype', 'float16', '-o', output],
                         ['convert', 'in.pt', '--format', 'safetensors', '-o', output]):
                for force in ([], ['--force']):
                    with self.subTest(args=args + force):
                        self.usage(args + force, pattern)
        self.assertTrue(stat.S_ISFIFO(os.lstat(self.abs('fifo.pt')).st_mode))
        self.assertEqual(os.readlink(self.abs('dangling.pt')), 'nowhere.pt')
        # A name that can only be a directory: refused before one is created for it.
        for output in ('new_dir/', 'dir.pt/', '.', '..', 'new_dir/..'):
            with self.subTest(output=output):
                self.usage(['convert', 'in.pt', '-o', output], r'names a directory; -o takes a file name')

    def test_a_symbolic_link_is_written_through(self):
        """As torch.save and cp write through a link: the file it leads to is replaced and the link
        kept (a Hugging Face snapshot links each file to a blob)."""
        os.makedirs(self.abs('blobs'))
        os.makedirs(self.abs('snapshot'))
        shutil.copy(self.input, self.abs('blobs/abc'))
        os.symlink('../blobs/abc', self.abs('snapshot/model.pt'))
        os.symlink('../blobs/out', self.abs('snapshot/out.pt'))
        cs.write(self.abs('blobs/out'), b'old\n')
        for args in (['add-prefix', '--prefix', 'module.', '--in-place', 'snapshot/model.pt'],
                     ['add-prefix', '--prefix', 'module.', 'in.pt', '-o', 'snapshot/out.pt', '--force']):
            with self.subTest(args=args):
                proc = cs.run(args, cwd=self.cwd)
                self.assertEqual(proc.returncode, 0, cs.describe(proc))
        for link, blob in (('snapshot/model.pt', 'abc'), ('snapshot/out.pt', 'out')):
            self.assertEqual(os.readlink(self.abs(link)), '../blobs/' + blob)
            keys = list(torch.load(self.abs('blobs/' + blob)))  # the judge reads the file the link leads to
            self.assertTrue(keys and all(k.startswith('module.') for k in keys), keys)
        self.assertEqual(sorted(os.listdir(self.abs('blobs'))), ['abc', 'out'], 'a temporary file was left')
        self.assert_untouched(self.input, self.input_state)

    @unittest.skipUnless(os.geteuid() == 0, 'only root can make a file another user\'s')
    def test_in_place_keeps_the_files_owner_and_permissions(self):
        """`sudo ckptfix ... --in-place` on a user's checkpoint leaves it the user's, with its mode."""
        os.chown(self.input, 12345, 23456)
        os.chmod(self.input, 0o664)
        proc = cs.run(['add-prefix', '--prefix', 'module.', '--in-place', 'in.pt'], cwd=self.cwd)
        self.assertEqual(proc.returncode, 0, cs.describe(proc))
        st = os.stat(self.input)
        self.assertEqual((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)), (12345, 23456, 0o664))
        self.assertTrue(all(k.startswith('module.') for k in torch.load(self.input)))

    def test_failed_convert_with_force_keeps_existing_output(self):
        """A failing input must not clobber (or delete) an existing output, even with --force."""
        old = cs.write(self.abs('out/existing.pt'), b'precious old content\n')
        old_state = cs.file_state(old)
        for name in ('truncated_half.pt', 'legacy_truncated.pt', 'torchscript.pt'):
            with self.subTest(input=name):
                before = cs.tree(self.cwd)
                given = cs.fixture_path(name)
                proc = cs.run(['convert', given, '-o', 'out/existing.pt', '--force'], cwd=self.cwd)
                self.assert_error_line(proc, given)
                self.assert_untouched(old, old_state, what='existing output')
                self.assert_tree_unchanged(self.cwd, before, proc)


if __name__ == '__main__':
    cs.main()
