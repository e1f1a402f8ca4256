#!/usr/bin/python3
"""Every command that reads a file survives every hostile file of tests/attacks/.

Run:  /usr/bin/python3 tests/cli/test_attacks.py [--ckptfix PATH] [unittest args]
      (or set CKPTFIX_BIN; default <repo>/build/ckptfix)

tests/attacks/make_attacks.py writes the files (deterministically, without
torch) into a temporary directory. On each of them this runs inspect,
inspect --json, verify, check, convert, strip-prefix, remap, cast, diff
(against a sound file), fix, add-prefix and weights-only, and checks:

  * hostile files: exactly the expected one-line error (golden text, file
    and place included), exit 1 (diff: 2, GNU diff's "trouble"), nothing on
    stdout but check's violation line and inspect --json's report, no
    output file;
  * files that are sound however odd (terminal escapes and bytes that are
    not UTF-8 in keys, 200k globals, a 200k-entry _metadata): success, and
    nothing from the file reaches the terminal unescaped;
  * every run: no crash, under 20 s of CPU time and under 1 GiB peak RSS
    (256 MiB for the graphs of shared values, the billion laughs)
    (the child's own, from wait4; CPU time rather than wall-clock time, as
    the machines running this are shared). A run still going after 90 s of
    wall-clock time is killed (a hang fails as a crash). Runs are capped at
    4 GiB of address space, so a regression fails here instead of
    exhausting the machine.
  * diff of a file with itself where views repeat (a stride-0 tensor of 2^40
    elements, 20k views at the end of one deflated storage): the comparison
    limit's error, not hours of work.

Under a sanitizer build (the binary carries __asan_init, or
CKPTFIX_SANITIZED=1) time and memory are not asserted (ASan's shadow
memory and slowdown), and no address-space cap is set; everything else is.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'attacks'))
import cli_support as cs  # noqa: E402
import make_attacks  # noqa: E402

TIME_LIMIT = 20.0                  # seconds of CPU time, per run
WALL_LIMIT = 90.0                  # seconds of wall-clock time before a run is killed
RSS_LIMIT = 1 << 30                # bytes of peak RSS, per run
SHARING_RSS_LIMIT = 256 << 20      # ... for the graphs of shared values (issue 22)
SANITIZED_TIMEOUT = 300.0          # a sanitizer build is slow; only hangs count

GOOD = 'good.pt'
OUT = 'out.pt'


# -- the commands ------------------------------------------------------------

# (label, arguments for input F; OUT is the output where there is one)
COMMANDS = cs.unless_sanitized([
    ('inspect', lambda f: ['inspect', f]),
    ('inspect --json', lambda f: ['inspect', '--json', f]),
    ('verify', lambda f: ['verify', '--gpu', 'off', f]),
    # The globals of many_globals.pt are a project's own (`mypackage.layers`):
    # trusted here, so that check judges the rest (see test_check_gates_unknown_globals).
    ('check', lambda f: ['check', '--allow-global', 'mypackage.*', f]),
    ('convert', lambda f: ['convert', f, '-o', OUT]),
    ('strip-prefix', lambda f: ['strip-prefix', '--auto', f, '-o', OUT]),
    ('remap', lambda f: ['remap', '--to', 'cpu', f, '-o', OUT]),
    ('cast', lambda f: ['cast', '--dtype', 'fp16', f, '-o', OUT]),
    ('diff', lambda f: ['diff', f, GOOD]),
    ('fix', lambda f: ['fix', '--auto-prefix', '--to', 'cpu', f, '-o', OUT]),
    ('add-prefix', lambda f: ['add-prefix', '--prefix', 'm.', f, '-o', OUT]),
    ('weights-only', lambda f: ['weights-only', f, '-o', OUT]),
])
WRITES = {'convert', 'strip-prefix', 'remap', 'cast', 'fix', 'add-prefix', 'weights-only'}

CALLS_GELU = ("refusing to load: the pickle calls 'torch._C._nn.gelu' while it is loaded; a checkpoint may hold "
              "such a function as a value (an activation kept by a module), never call it")

# Hostile files: (error kind, place, message) of the one error line every
# command prints, "ckptfix: error: 'FILE': PLACE: MESSAGE".
REFUSED = {
    # injection: names are dotted ASCII identifiers, or nothing
    'stack_global_injection.pt': (
        'corrupt', 'archive/data.pkl+0x6a',
        "global name 'OrderedDict\\x0a0cposix\\x0asystem\\x0a(Vtouch ckptfix-pwned-injection\\x0atR0ccollections"
        "\\x0aOrderedDict' is not a dotted Python identifier"),
    'module_newline_injection.pt': (
        'corrupt', 'archive/data.pkl+0x6a',
        "global module 'collections\\x0aOrderedDict\\x0a0cposix\\x0asystem\\x0a(Vtouch ckptfix-pwned-module"
        "\\x0atR0ccollections' is not a dotted Python identifier"),
    'inst_bad_name.pt': (
        'corrupt', 'archive/data.pkl+0x3', "global name 'Ordered Dict' is not a dotted Python identifier"),
    'global_not_identifier.pt': (
        'corrupt', 'archive/data.pkl+0x2', "global module 'torch..nn' is not a dotted Python identifier"),
    'non_utf8_global.pt': (
        'unsupported', 'archive/data.pkl+0x2',
        "global module 'collections\\xff' is not ASCII; ckptfix reads only ASCII global names, the only ones "
        "pickle protocol 2 (torch.save's) can write"),
    # depth: every walk is iterative and counts depth
    'deep_build_chain.pt': (
        'limit', 'archive/data.pkl', 'the object graph is nested more than 1000 levels deep (limit max_depth = 1000)'),
    'deep_namespace_chain.pt': (
        'limit', 'archive/data.pkl', 'the object graph is nested more than 1000 levels deep (limit max_depth = 1000)'),
    'deep_list.pt': (
        'limit', 'archive/data.pkl', 'the object graph is nested more than 1000 levels deep (limit max_depth = 1000)'),
    'many_dots_global.pt': (
        'limit', 'archive/data.pkl+0x2', 'global name is 400001 bytes long (limit max_name_bytes = 1024)'),
    # sharing: walks are bounded in steps (2^21 + 16 per value), a visit charged
    # what a visitor may keep of it (its path, its children), so memory too
    'shared_dag.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2098192 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2098192)'),
    'deep_shared_key.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2111584 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2111584)'),
    'laughs_tensors.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2098480 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2098480)'),
    'laughs_dicts.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2100592 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2100592)'),
    'laughs_long_key.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2098544 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2098544)'),
    'laughs_wide.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2097712 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2097712)'),
    'laughs_deep.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2140656 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2140656)'),
    'laughs_objects.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 2104624 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 2104624)'),
    'laughs_padded.pt': (
        'limit', 'archive/data.pkl',
        'walking the object graph takes more than 3729184 steps: it reaches values through very many or very '
        'long paths (limit max_walk_steps = 3729184)'),
    # calls: a function a model may hold as a value, called while loading (issue 23)
    'calls_function.pt': ('unsafe', 'archive/data.pkl+0x139', CALLS_GELU),
    'calls_function_via_memo.pt': ('unsafe', 'archive/data.pkl+0xc2', CALLS_GELU),
    'calls_partial.pt': ('unsafe', 'archive/data.pkl+0xd6', CALLS_GELU),
    'calls_partial_after_call.pt': ('unsafe', 'archive/data.pkl+0x7f', CALLS_GELU),
    'calls_partial_set_by_state.pt': ('unsafe', 'archive/data.pkl+0xf5', CALLS_GELU),
    'calls_via_inst.pt': ('unsafe', 'archive/data.pkl+0xa8', CALLS_GELU),
    'calls_via_newobj.pt': ('unsafe', 'archive/data.pkl+0xbb', CALLS_GELU),
    'calls_via_obj.pt': ('unsafe', 'archive/data.pkl+0xbb', CALLS_GELU),
    'calls_via_rebuild_from_type.pt': ('unsafe', 'archive/data.pkl+0x16f', CALLS_GELU),
    'calls_via_reconstructor.pt': ('unsafe', 'archive/data.pkl+0xe6', CALLS_GELU),
    'calls_via_unknown_class.pt': ('unsafe', 'archive/data.pkl+0xde', CALLS_GELU),
    'function_module_attribute.pt': ('unsafe', 'archive/data.pkl+0xa7', "refusing to load: the pickle references the dangerous global 'torch.nn.functional.os' (os), which would run code or touch files when loaded"),
    'function_reading_files.pt': ('unsafe', 'archive/data.pkl+0xa7', "refusing to load: the pickle references the dangerous global 'torch._C._nn.from_file' (the method from_file), which would run code or touch files when loaded"),
    # a str CPython cannot decode (issue 66: refused as CPython refuses it)
    'non_utf8_str_key.pt': ('corrupt', 'archive/data.pkl+0x1e', 'a str that is not UTF-8 (CPython refuses to load it)'),
    # the stack: MARK fences it as in CPython
    'pop_below_mark.pt': (
        'corrupt', 'archive/data.pkl+0x6', 'pickle opcode needs a MARK but none is set (damaged pickle)'),
    # memory
    'zip_declares_4gib_pickle.pt': (
        'limit', 'archive/data.pkl',
        "the archive's deflated records declare 4294967296 bytes inflated, more than 100 times the file's 402 "
        "bytes: a zip bomb? (limit max_inflate_ratio = 100)"),
    'deflate_bomb_pickle.pt': (
        'limit', 'archive/data.pkl',
        "the archive's deflated records declare 536871075 bytes inflated, more than 100 times the file's 533488 "
        "bytes: a zip bomb? (limit max_inflate_ratio = 100)"),
    'deflate_bomb_storage.pt': (
        'limit', 'archive/data/0',
        "the archive's deflated records declare 10737418240 bytes inflated, more than 100 times the file's "
        "10619437 bytes: a zip bomb? (limit max_inflate_ratio = 100)"),
    # 30M times NONE POP: read to the end (no STOP) in constant memory
    'none_pop_loop.pt': (
        'corrupt', 'archive/data.pkl+0x3c00002', 'pickle data ends before its STOP opcode (truncated)'),
    'many_live_values.pt': (
        'limit', 'archive/data.pkl+0x228e9d',
        'the pickle holds more than 1132368 values, stack entries, marks and memo entries at once '
        '(limit max_pickle_values = 1132368)'),
    'many_tiny_storages.pt': (
        'limit', 'central directory',
        'the archive has 1000002 records, more than 262144 storages and 16 others (limit max_storages = 262144)'),
    # time
    'long_decimal.pt': (
        'unsupported', 'archive/data.pkl+0x2',
        'integer literal of 1000000 digits; Python reads at most 4300 (sys.int_info.default_max_str_digits)'),
    # tensors torch refuses, or whose size ckptfix cannot count
    'huge_shape_stride0.pt': (
        'corrupt', "key 'w'",
        'tensor of shape [4294967296,4294967296] has more elements than fit in 64 bits (torch refuses it)'),
    'huge_nbytes.pt': (
        'corrupt', "key 'w'",
        'tensor of shape [4611686018427387904] has 4611686018427387904 elements of 4 bytes, more bytes than fit '
        'in 64 bits'),
}

# Graphs of shared values (billion laughs): their walks keep at most what the
# step limit allows, so every command stays under SHARING_RSS_LIMIT.
SHARING = ['shared_dag.pt', 'deep_shared_key.pt', 'laughs_tensors.pt', 'laughs_dicts.pt', 'laughs_long_key.pt',
           'laughs_wide.pt', 'laughs_deep.pt', 'laughs_objects.pt', 'laughs_padded.pt']

# Sound files however odd: every command succeeds (diff: they differ from good.pt).
SOUND = ['good.pt', 'held_functions.pt', 'non_utf8_key.pt', 'terminal_escapes.pt', 'many_globals.pt', 'big_metadata.pt',
         'expanded_huge.pt', 'deflated_views.pt']

# Sound files that check fails (torch's default load refuses them): a line of its report.
CHECK_FAILS = {
    'held_functions.pt': "held_functions.pt: 2 globals are outside the weights_only allowlist of torch.load (a "
                         "function held as a value, never called): 'torch._C._nn.gelu', 'torch.nn.functional.silu'\n",
    # A deflated storage record: torch.load(mmap=True) reads its compressed bytes (issue 66).
    'deflated_views.pt': "deflated_views.pt: record 'archive/data/0': is deflated: torch.load(mmap=True) reads a "
                         "deflated record's compressed bytes as its tensor's data",
}

# Sound files in which a rewrite finds a dict of tensors that is no state dict (functions held beside
# the weight) and would have edited it: it says so and writes nothing, rather than "nothing to change"
# (issue 50). (command, file) -> the end of its one error line.
NOT_A_STATE_DICT = ("the checkpoint holds no state dict; the dict '<root>' holds tensors but is not one: its entry "
                    "'act' is the global 'torch._C._nn.gelu', not a tensor, so nothing was done; --key='' edits it "
                    "anyway\n")
REWRITE_REFUSED = {('cast', 'held_functions.pt'): NOT_A_STATE_DICT,
                   ('add-prefix', 'held_functions.pt'): NOT_A_STATE_DICT}

# Sound files that weights-only refuses (with --drop-unknown it would not): the line it prints.
WEIGHTS_ONLY_REFUSED = {
    'many_globals.pt': r"^ckptfix: error: 'many_globals.pt': values of classes outside torch's weights_only allowlist "
                       r"that no rewrite rule knows: mypackage\.layers\.Layer0 \(at '0'\), .* and 199990 more; "
                       r"--drop-unknown replaces them with None\n$",
}

# What may reach a terminal: no C0/C1 control but newline, no bidi or line separators.
FORBIDDEN = [chr(c) for c in range(0x20) if c != 0x0A] + [chr(c) for c in range(0x7F, 0xA0)] + [
    '\u2028', '\u2029', '\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e',
    '\u2066', '\u2067', '\u2068', '\u2069', '\ufeff']


class AttackBase(cs.CliTestCase):
    """The attack files and what every test of them shares (no tests of its own)."""
    files = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = cs.TempDir(prefix='ckptfix-attacks-')
        cls.dir = cls.tmp.join('attacks')
        make_attacks.make(cls.dir)
        cls.sanitized = cs.sanitized()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_in_fresh_dir(self, args):
        """Runs in a new directory holding links to the attack files; returns
        (Run, the directory's new entries)."""
        cwd = tempfile.mkdtemp(dir=self.tmp.path)
        for name in os.listdir(self.dir):
            os.symlink(os.path.join(self.dir, name), os.path.join(cwd, name))
        before = set(os.listdir(cwd))
        limit = SANITIZED_TIMEOUT if self.sanitized else WALL_LIMIT
        r = cs.run_measured(args, cwd, guard=not self.sanitized, timeout=limit)
        r.cwd = cwd
        return r, sorted(set(os.listdir(cwd)) - before)

    def assert_bounded(self, r):
        self.assertGreaterEqual(r.returncode, 0, 'ckptfix was killed by a signal (crash or hang)' + r.describe())
        for bad in ('terminate called', 'AddressSanitizer', 'runtime error:', 'LeakSanitizer', 'Segmentation'):
            self.assertNotIn(bad, r.stderr, 'ckptfix crashed' + r.describe())
        if self.sanitized:
            return
        self.assertLess(r.cpu, TIME_LIMIT, f'ckptfix took {r.cpu:.1f} s of CPU time' + r.describe())
        limit = SHARING_RSS_LIMIT if any(n in r.args for n in SHARING) else RSS_LIMIT
        self.assertLess(r.max_rss, limit, f'ckptfix peaked at {r.max_rss / 2**20:.0f} MiB RSS' + r.describe())

    def assert_printable(self, text, r):
        for c in FORBIDDEN:
            self.assertNotIn(c, text, f'unescaped {c!r} from the file reached the terminal' + r.describe())

    # -- hostile files --------------------------------------------------------

    def check_refused(self, name):
        kind, place, message = REFUSED[name]
        line = f"'{name}': {place}: {message}"
        for label, argv in COMMANDS:
            with self.subTest(file=name, command=label):
                r, new = self.run_in_fresh_dir(argv(name))
                self.assert_bounded(r)
                self.assertEqual(r.returncode, 2 if label == 'diff' else 1, 'wrong exit code' + r.describe())
                if label == 'check':
                    # A violation of the gate, said once, on stdout as FILE: WHERE: WHAT (issue 65).
                    self.assertEqual(r.stdout, f'{name}: {place}: {message}\n', 'not the expected violation' + r.describe())
                    self.assertEqual(r.stderr, '', 'check printed the violation on stderr too' + r.describe())
                    self.assertEqual(new, [], 'a failed command left files behind' + r.describe())
                    continue
                self.assertEqual(r.stderr, f'ckptfix: error: {line}\n', 'not the expected error line' + r.describe())
                if label == 'inspect --json':
                    entry = json.loads(r.stdout)['inputs'][0]
                    self.assertEqual((entry['status'], entry['error'], entry['error_kind']), ('failed', line, kind),
                                     r.describe())
                else:
                    self.assertEqual(r.stdout, '', 'a failed command printed on stdout' + r.describe())
                self.assertEqual(new, [], 'a failed command left files behind' + r.describe())
        # salvage trusts nothing the readers refuse: the same refusal (for a
        # damaged file, saying nothing can be recovered), nothing written.
        with self.subTest(file=name, command='salvage'):
            r, new = self.run_in_fresh_dir(['salvage', name, '-o', OUT])
            self.assert_bounded(r)
            self.assertEqual(r.returncode, 1, 'wrong exit code' + r.describe())
            self.assertEqual(len(r.stderr.splitlines()), 1, 'one error line' + r.describe())
            self.assertTrue(r.stderr.startswith(f"ckptfix: error: '{name}': "), r.describe())
            self.assertIn(message, r.stderr, 'not the readers\' refusal' + r.describe())
            self.assertEqual(new, [], 'a failed salvage left files behind' + r.describe())

    # -- sound files ------------------------------------------------------------

    def check_sound(self, name):
        for label, argv in COMMANDS:
            with self.subTest(file=name, command=label):
                r, new = self.run_in_fresh_dir(argv(name))
                self.assert_bounded(r)
                if label == 'check' and name in CHECK_FAILS:
                    # Sound, but outside torch's weights_only allowlist: the gate says so, naming the kind.
                    self.assertEqual((r.returncode, new), (1, []), r.describe())
                    self.assertIn(CHECK_FAILS[name], r.stdout, r.describe())
                    self.assertNotIn('gadget', r.stdout, r.describe())
                    continue
                if (label, name) in REWRITE_REFUSED:
                    self.assertEqual((r.returncode, new), (1, []), r.describe())
                    self.assertEqual(r.stderr, f"ckptfix: error: '{name}': " + REWRITE_REFUSED[(label, name)],
                                     r.describe())
                    continue
                if label == 'weights-only' and name in WEIGHTS_ONLY_REFUSED:
                    # 200k classes no rule knows: refused, naming a few, on one short line.
                    self.assertEqual((r.returncode, new), (1, []), r.describe())
                    self.assertRegex(r.stderr, WEIGHTS_ONLY_REFUSED[name], r.describe())
                    self.assertLess(len(r.stderr), 2000, r.describe())
                    continue
                expected = 1 if label == 'diff' and name != GOOD else 0
                self.assertEqual(r.returncode, expected, 'wrong exit code' + r.describe())
                self.assertEqual(new, [OUT] if label in WRITES else [], 'unexpected files' + r.describe())
                if label != 'inspect --json':
                    self.assert_printable(r.stdout + r.stderr, r)
                if label == 'check':
                    self.assertEqual(r.stdout, f'{name}: ok\n', r.describe())


class AttackTest(AttackBase):
    """Every attack but LARGE's, and the checks beyond the common contract."""

    # -- checks beyond the common contract -------------------------------------------

    def test_check_gates_unknown_globals(self):
        # Without --allow-global, 200k globals outside the weights_only
        # allowlist fail the gate: one line for them all, in bounded time.
        r, _ = self.run_in_fresh_dir(['check', 'many_globals.pt'])
        self.assert_bounded(r)
        self.assertEqual(r.returncode, 1, r.describe())
        self.assertIn("many_globals.pt: 200000 globals are outside the weights_only allowlist of torch.load (unknown: may run "
                      "its own code when loaded): 'mypackage.layers.Layer0', 'mypackage.layers.Layer1', "
                      "'mypackage.layers.Layer2' and 199997 more (--all lists them)\n", r.stdout, r.describe())
        self.assertEqual(r.stdout.count('\n'), 1, r.describe())  # one line; --all a line each

    def test_terminal_escapes_are_shown_escaped(self):
        r, _ = self.run_in_fresh_dir(['inspect', 'terminal_escapes.pt'])
        self.assertEqual(r.returncode, 0, r.describe())
        for shown in ('\\x1b[2J\\x1b[31mred', 'w\\x0amodel.pt: ok', '\\u202eevil'):
            self.assertIn(shown, r.stdout, r.describe())
        # check cannot be made to print a line of its own ("model.pt: ok")
        r, _ = self.run_in_fresh_dir(['check', '--no-prefix', 'w', 'terminal_escapes.pt'])
        self.assertEqual(r.returncode, 1, r.describe())
        self.assertEqual(r.stdout, "terminal_escapes.pt: key 'w\\x0amodel.pt: ok': starts with 'w'\n", r.describe())
        # JSON keeps the real keys, escaped as JSON escapes them
        r, _ = self.run_in_fresh_dir(['inspect', '--json', 'terminal_escapes.pt'])
        paths = [t['path'] for t in json.loads(r.stdout)['tensors']]
        self.assertEqual(paths, [['\x1b[2J\x1b[31mred'], ['w\nmodel.pt: ok'], ['\u202eevil']], r.describe())
        self.assertNotIn('\x1b', r.stdout, r.describe())

    def test_non_utf8_key_is_replaced_in_json_and_escaped_for_people(self):
        r, _ = self.run_in_fresh_dir(['inspect', '--json', 'non_utf8_key.pt'])
        self.assertEqual(r.returncode, 0, r.describe())
        doc = json.loads(r.stdout)
        self.assertIs(doc.get('invalid_utf8_replaced'), True, r.describe())
        self.assertEqual(doc['tensors'][0]['path'], ['w\ufffd\ufffd'], r.describe())
        r, _ = self.run_in_fresh_dir(['inspect', 'non_utf8_key.pt'])
        self.assertIn('w\\xff\\xfe', r.stdout, r.describe())
        r, _ = self.run_in_fresh_dir(['inspect', '--json', 'good.pt'])
        self.assertNotIn('invalid_utf8_replaced', json.loads(r.stdout), r.describe())

    def test_diff_of_repeating_views_is_bounded(self):
        expected = {
            'expanded_huge.pt': "key 'w': comparing the tensors reads more than 67108872 elements: the files' views "
                                "repeat or overlap (limit max_compared_elements = 67108872)",
            'deflated_views.pt': "key 't6': comparing the tensors reads more than 201326592 elements: the files' "
                                 "views repeat or overlap (limit max_compared_elements = 201326592)",
        }
        for name, message in expected.items():
            with self.subTest(file=name):
                r, new = self.run_in_fresh_dir(['diff', name, name])
                self.assert_bounded(r)
                self.assertEqual((r.returncode, r.stdout, new), (2, '', []), r.describe())
                self.assertEqual(r.stderr, f"ckptfix: error: '{name}': {message}\n", r.describe())
        # The limit is the comparison's own: --limit sets it, and a sound diff is untouched by it.
        r, _ = self.run_in_fresh_dir(['diff', '--limit', 'max_compared_elements=10', 'good.pt', 'good.pt'])
        self.assertEqual(r.returncode, 0, r.describe())
        r, _ = self.run_in_fresh_dir(['diff', '--limit', 'max_compared_elements=7', 'good.pt', 'good.pt'])
        self.assertEqual(r.returncode, 2, r.describe())
        self.assertIn('(limit max_compared_elements = 7)', r.stderr, r.describe())

    def test_declared_size_is_not_allocated_when_the_ratio_limit_is_lifted(self):
        # Inflating into a growing buffer: the 4 GiB the directory declares is never allocated.
        r, _ = self.run_in_fresh_dir(['inspect', '--limit', 'max_inflate_ratio=0', '--limit', 'max_pickle_bytes=8G',
                                      'zip_declares_4gib_pickle.pt'])
        self.assert_bounded(r)
        self.assertEqual(r.returncode, 1, r.describe())
        self.assertEqual(r.stderr, "ckptfix: error: 'zip_declares_4gib_pickle.pt': archive/data.pkl: deflated data "
                                   "ends after 163 bytes, short of the declared size 4294967296\n", r.describe())

    def test_raised_depth_limit_writes_what_torch_reads(self):
        # Nothing recurses on the file's depth: with the limits raised, a
        # chain 100k deep converts, and torch (whose unpickler does not
        # recurse either) reads it back whole.
        r, new = self.run_in_fresh_dir(['convert', '--limit', 'max_depth=200000', '--limit', 'max_walk_steps=10G',
                                        'deep_namespace_chain.pt', '-o', OUT])
        self.assert_bounded(r)
        self.assertEqual((r.returncode, new), (0, [OUT]), r.describe())
        code = ('import sys, torch\n'
                'r = torch.load(sys.argv[1], weights_only=False)\n'  # made by make_attacks: trusted
                'depth = 0\n'
                'while hasattr(r, "next"):\n'
                '    r, depth = r.next, depth + 1\n'
                'print(depth)\n')
        proc = subprocess.run([sys.executable, '-c', code, os.path.join(r.cwd, OUT)], capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        self.assertEqual(proc.stdout.strip(), '99999', proc.stderr[-2000:])

    def test_fixtures_are_deterministic(self):
        small = [n for n in make_attacks.ATTACKS if os.path.getsize(os.path.join(self.dir, n)) < (1 << 20)]
        again = make_attacks.make(self.tmp.join('again'), small)
        for name, path in again.items():
            self.assertEqual(cs.read(path), cs.read(os.path.join(self.dir, name)), f'{name} differs between runs')

    def test_every_attack_is_covered(self):
        self.assertEqual(sorted(make_attacks.ATTACKS), sorted(list(REFUSED) + SOUND))


# The files whose every command takes seconds (minutes under the sanitizers):
# a test case of their own, which ctest runs beside the other
# (tests/CMakeLists.txt: cli_attacks and cli_attacks_large).
LARGE = {'many_globals.pt', 'none_pop_loop.pt'}


class LargeAttackTest(AttackBase):
    """The attacks of LARGE (their tests are added below)."""


def _add_tests():
    for name in REFUSED:
        setattr(LargeAttackTest if name in LARGE else AttackTest, f'test_refused_{name[:-3]}',
                lambda self, n=name: self.check_refused(n))
    for name in SOUND:
        setattr(LargeAttackTest if name in LARGE else AttackTest, f'test_sound_{name[:-3]}',
                lambda self, n=name: self.check_sound(n))


_add_tests()

if __name__ == '__main__':
    cs.main()
