#include "pickle/global_lists.h"


namespace ckptfix::global_lists {
namespace {

// What torch.load(weights_only=True) accepts right after `import torch` in
// torch 2.14.1: the keys of torch._weights_only_unpickler._get_allowed_globals(),
// then what `import torch` adds with torch.serialization.add_safe_globals.
// torch 2.6 lacks torch.bcomplex32, float4_e2m1fn_x2, float8_e8m0fnu,
// int1-7/uint1-7 and all the additions but the nested tensor pair; torch
// 1.13 allows far less (no builtins, Counter, device, _rebuild_tensor_v3,
// bfloat16, bool, uint8, ...).
constexpr const char* kTorchAllowlist[] = {
    "_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set", "collections.Counter",
    "collections.OrderedDict", "torch.BFloat16Storage", "torch.BFloat16Tensor", "torch.BoolStorage",
    "torch.BoolTensor", "torch.ByteStorage", "torch.ByteTensor", "torch.CharStorage", "torch.CharTensor",
    "torch.ComplexDoubleStorage", "torch.ComplexFloatStorage", "torch.DoubleStorage", "torch.DoubleTensor",
    "torch.FloatStorage", "torch.FloatTensor", "torch.HalfStorage", "torch.HalfTensor", "torch.IntStorage",
    "torch.IntTensor", "torch.LongStorage", "torch.LongTensor", "torch.QInt32Storage", "torch.QInt8Storage",
    "torch.QUInt2x4Storage", "torch.QUInt4x2Storage", "torch.QUInt8Storage", "torch.ShortStorage",
    "torch.ShortTensor", "torch.Size", "torch.Tensor", "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor", "torch._utils._rebuild_device_tensor_from_numpy",
    "torch._utils._rebuild_meta_tensor_no_storage", "torch._utils._rebuild_nested_tensor",
    "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
    "torch._utils._rebuild_qtensor", "torch._utils._rebuild_sparse_tensor", "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_wrapper_subclass", "torch.bcomplex32", "torch.bfloat16", "torch.bits16",
    "torch.bits1x8", "torch.bits2x4", "torch.bits4x2", "torch.bits8", "torch.bool", "torch.complex128",
    "torch.complex32", "torch.complex64", "torch.cuda.BFloat16Storage", "torch.cuda.BFloat16Tensor",
    "torch.cuda.BoolStorage", "torch.cuda.BoolTensor", "torch.cuda.ByteStorage", "torch.cuda.ByteTensor",
    "torch.cuda.CharStorage", "torch.cuda.CharTensor", "torch.cuda.ComplexDoubleStorage",
    "torch.cuda.ComplexFloatStorage", "torch.cuda.DoubleStorage", "torch.cuda.DoubleTensor",
    "torch.cuda.FloatStorage", "torch.cuda.FloatTensor", "torch.cuda.HalfStorage", "torch.cuda.HalfTensor",
    "torch.cuda.IntStorage", "torch.cuda.IntTensor", "torch.cuda.LongStorage", "torch.cuda.LongTensor",
    "torch.cuda.ShortStorage", "torch.cuda.ShortTensor", "torch.cuda.sparse.BFloat16Tensor",
    "torch.cuda.sparse.ByteTensor", "torch.cuda.sparse.CharTensor", "torch.cuda.sparse.DoubleTensor",
    "torch.cuda.sparse.FloatTensor", "torch.cuda.sparse.HalfTensor", "torch.cuda.sparse.IntTensor",
    "torch.cuda.sparse.LongTensor", "torch.cuda.sparse.ShortTensor", "torch.device", "torch.float16",
    "torch.float32", "torch.float4_e2m1fn_x2", "torch.float64", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz",
    "torch.float8_e5m2", "torch.float8_e5m2fnuz", "torch.float8_e8m0fnu", "torch.int1", "torch.int16",
    "torch.int2", "torch.int3", "torch.int32", "torch.int4", "torch.int5", "torch.int6", "torch.int64",
    "torch.int7", "torch.int8", "torch.nn.parameter.Parameter", "torch.per_channel_affine",
    "torch.per_channel_affine_float_qparams", "torch.per_channel_symmetric", "torch.per_tensor_affine",
    "torch.per_tensor_symmetric", "torch.qint32", "torch.qint8", "torch.quint2x4", "torch.quint4x2",
    "torch.quint8", "torch.serialization._get_layout", "torch.sparse.BFloat16Tensor", "torch.sparse.ByteTensor",
    "torch.sparse.CharTensor", "torch.sparse.DoubleTensor", "torch.sparse.FloatTensor",
    "torch.sparse.HalfTensor", "torch.sparse.IntTensor", "torch.sparse.LongTensor", "torch.sparse.ShortTensor",
    "torch.storage.TypedStorage", "torch.storage.UntypedStorage", "torch.uint1", "torch.uint16", "torch.uint2",
    "torch.uint3", "torch.uint32", "torch.uint4", "torch.uint5", "torch.uint6", "torch.uint64", "torch.uint7",
    "torch.uint8",
    // import torch: torch/distributed/distributed_c10d.py allows every builtin exception class and
    // traceback's summaries (for error propagation), device_mesh.py its layouts, torch/nested the
    // jagged nested tensor.
    "builtins.ArithmeticError", "builtins.AssertionError", "builtins.AttributeError", "builtins.BaseException",
    "builtins.BaseExceptionGroup", "builtins.BlockingIOError", "builtins.BrokenPipeError",
    "builtins.BufferError", "builtins.BytesWarning", "builtins.ChildProcessError",
    "builtins.ConnectionAbortedError", "builtins.ConnectionError", "builtins.ConnectionRefusedError",
    "builtins.ConnectionResetError", "builtins.DeprecationWarning", "builtins.EOFError",
    "builtins.EncodingWarning", "builtins.Exception", "builtins.ExceptionGroup", "builtins.FileExistsError",
    "builtins.FileNotFoundError", "builtins.FloatingPointError", "builtins.FutureWarning",
    "builtins.GeneratorExit", "builtins.ImportError", "builtins.ImportWarning", "builtins.IndentationError",
    "builtins.IndexError", "builtins.InterruptedError", "builtins.IsADirectoryError", "builtins.KeyError",
    "builtins.KeyboardInterrupt", "builtins.LookupError", "builtins.MemoryError",
    "builtins.ModuleNotFoundError", "builtins.NameError", "builtins.NotADirectoryError",
    "builtins.NotImplementedError", "builtins.OSError", "builtins.OverflowError",
    "builtins.PendingDeprecationWarning", "builtins.PermissionError", "builtins.ProcessLookupError",
    "builtins.PythonFinalizationError", "builtins.RecursionError", "builtins.ReferenceError",
    "builtins.ResourceWarning", "builtins.RuntimeError", "builtins.RuntimeWarning",
    "builtins.StopAsyncIteration", "builtins.StopIteration", "builtins.SyntaxError", "builtins.SyntaxWarning",
    "builtins.SystemError", "builtins.SystemExit", "builtins.TabError", "builtins.TimeoutError",
    "builtins.TypeError", "builtins.UnboundLocalError", "builtins.UnicodeDecodeError",
    "builtins.UnicodeEncodeError", "builtins.UnicodeError", "builtins.UnicodeTranslateError",
    "builtins.UnicodeWarning", "builtins.UserWarning", "builtins.ValueError", "builtins.Warning",
    "builtins.ZeroDivisionError", "builtins._IncompleteInputError",
    "torch.distributed._mesh_layout._FlatLayout", "torch.distributed._mesh_layout._MeshLayout",
    "torch.nested._internal.nested_tensor.NestedTensor", "torch.nested._internal.nested_tensor._rebuild_njt",
    "traceback.FrameSummary", "traceback.StackSummary",
};

// The entries of kTorchAllowlist that torch 2.6 lacks, with the first
// release that has them (docs/format.md, "What differs between torch
// versions", gives the evidence); every other entry is in 2.6 and later.
// Read off torch's sources and history, and checked against torch 2.6
// (Debian trixie) and 2.14 (sid) by tests/cli/test_globals.py.
constexpr AllowlistAddition kAllowlistAdditions[] = {
    // PR #147500 "Support serialization for uintx/intx in weights_only" (merged 2025-02-21).
    {"torch.int1", {2, 7}}, {"torch.int2", {2, 7}}, {"torch.int3", {2, 7}}, {"torch.int4", {2, 7}},
    {"torch.int5", {2, 7}}, {"torch.int6", {2, 7}}, {"torch.int7", {2, 7}},
    {"torch.uint1", {2, 7}}, {"torch.uint2", {2, 7}}, {"torch.uint3", {2, 7}}, {"torch.uint4", {2, 7}},
    {"torch.uint5", {2, 7}}, {"torch.uint6", {2, 7}}, {"torch.uint7", {2, 7}},
    // PR #147466: the float8_e8m0fnu dtype, in torch.storage._new_dtypes.
    {"torch.float8_e8m0fnu", {2, 7}},
    // PR #148791: the float4_e2m1fn_x2 dtype (after the 2.7 branch cut).
    {"torch.float4_e2m1fn_x2", {2, 8}},
    // PR #186928: the bcomplex32 dtype (landed after the 2.13 branch cut).
    {"torch.bcomplex32", {2, 14}},
    // torch/distributed/distributed_c10d.py allows every builtin exception
    // class and traceback's summaries at import (with PR #189353, "[c10d] Add
    // weights_only parameter to object collectives", 2026-07-09; 2.14).
    {"traceback.FrameSummary", {2, 14}}, {"traceback.StackSummary", {2, 14}},
    // torch/distributed/device_mesh.py's layouts. _MeshLayout was in main by
    // late 2025 and pip's torch 2.11.0 allows it (seen on the GPU machine);
    // whether 2.10 did is not established, so ckptfix says 2.11. 2.11 lacks
    // _FlatLayout (seen), which 2.14 has.
    {"torch.distributed._mesh_layout._FlatLayout", {2, 14}},
    {"torch.distributed._mesh_layout._MeshLayout", {2, 11}},
};
// Besides: every builtins entry but bytearray, complex and set (2.6's) is an
// exception class, 2.14's (see above).
constexpr TorchVersion kBuiltinExceptionsSince = {2, 14};

// Made by importing every torch.* entry of kTorchAllowlist in Debian 12's
// torch 1.13.1 (importlib.import_module and getattr, as pickle's find_class).
constexpr const char* kMissingInTorch1_13[] = {
    "torch._utils._rebuild_device_tensor_from_cpu_tensor", "torch._utils._rebuild_nested_tensor",
    "torch._utils._rebuild_parameter_with_state", "torch._utils._rebuild_tensor_v3", "torch.bcomplex32",
    "torch.bits16", "torch.bits1x8", "torch.bits2x4", "torch.bits4x2", "torch.bits8", "torch.float4_e2m1fn_x2",
    "torch.float8_e4m3fn", "torch.float8_e4m3fnuz", "torch.float8_e5m2", "torch.float8_e5m2fnuz",
    "torch.float8_e8m0fnu", "torch.int1", "torch.int2", "torch.int3", "torch.int4", "torch.int5", "torch.int6",
    "torch.int7", "torch.uint1", "torch.uint16", "torch.uint2", "torch.uint3", "torch.uint32", "torch.uint4",
    "torch.uint5", "torch.uint6", "torch.uint64", "torch.uint7", "torch.distributed._mesh_layout._FlatLayout",
    "torch.distributed._mesh_layout._MeshLayout", "torch.nested._internal.nested_tensor.NestedTensor",
    "torch.nested._internal.nested_tensor._rebuild_njt",
};

constexpr const char* kKnownData[] = {
    // Plain containers and scalars CPython's pickler names (__builtin__ and
    // exceptions are read as builtins, as pickle and torch do).
    "builtins.frozenset", "builtins.slice", "builtins.range", "builtins.xrange", "builtins.bytes", "builtins.str",
    "builtins.unicode", "builtins.int", "builtins.long", "builtins.float", "builtins.bool", "builtins.list",
    "builtins.dict", "builtins.tuple", "builtins.object", "builtins.Ellipsis", "builtins.NotImplemented",
    // copyreg's object builders: cls.__new__(cls, ...) and base.__init__ of a
    // class the pickle names (itself judged).
    "copyreg._reconstructor", "copyreg.__newobj__", "copyreg.__newobj_ex__",
    // functools.partial(f, *args) only binds f (nn.LayerNorm with eps, a
    // norm layer's constructor kept by torchvision's ViT); calling the
    // partial calls f, which the call analysis sees (unpickler.h).
    "functools.partial",
    "collections.defaultdict", "collections.deque", "collections.ChainMap", "collections.UserDict",
    "collections.UserList", "collections.UserString",
    "argparse.Namespace", "types.SimpleNamespace",
    // Python < 3.13 and >= 3.14 pickle paths as pathlib.X, 3.13 as pathlib._local.X.
    "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath", "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath", "pathlib._local.Path", "pathlib._local.PosixPath", "pathlib._local.WindowsPath",
    "pathlib._local.PurePath", "pathlib._local.PurePosixPath", "pathlib._local.PureWindowsPath",
    // An in-memory buffer of bytes (Transformer Engine's older extra state):
    // it opens no file; what it holds is read as a nested pickle (docs/security.md).
    "_io.BytesIO", "io.BytesIO",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta", "datetime.timezone",
    "datetime.tzinfo", "decimal.Decimal", "fractions.Fraction", "uuid.UUID", "uuid.SafeUUID",
    // numpy arrays, scalars and dtypes (numpy < 2 spells numpy.core, numpy 2 numpy._core).
    "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray.scalar", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray.scalar", "numpy._core.multiarray._reconstruct", "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer", "numpy.bool_", "numpy.int8", "numpy.int16", "numpy.int32", "numpy.int64",
    "numpy.uint8", "numpy.uint16", "numpy.uint32", "numpy.uint64", "numpy.float16", "numpy.float32",
    "numpy.float64", "numpy.complex64", "numpy.complex128", "numpy.str_", "numpy.bytes_",
    // omegaconf DictConfig/ListConfig as omegaconf 2.x pickles them (their
    // __setstate__ only restores fields; interpolations resolve on access).
    "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.base.Metadata",
    "omegaconf.base.ContainerMetadata", "omegaconf.base.UnionNode", "omegaconf.nodes.ValueNode",
    "omegaconf.nodes.AnyNode", "omegaconf.nodes.StringNode", "omegaconf.nodes.PathNode",
    "omegaconf.nodes.IntegerNode", "omegaconf.nodes.BytesNode", "omegaconf.nodes.FloatNode",
    "omegaconf.nodes.BooleanNode", "omegaconf.nodes.EnumNode",
    // Type annotations omegaconf stores in its metadata (typing.List[int]
    // itself pickles through operator.getitem, a gadget).
    "typing.Any", "typing.Union", "typing.Optional", "typing.List", "typing.Dict", "typing.Tuple", "typing.Set",
    "typing.FrozenSet", "typing.Type", "typing.Sequence", "typing.Mapping", "typing.Callable",
    // torch classes and rebuild functions torch wrote but 2.14's allowlist
    // lacks (torch.UntypedStorage is refused by torch >= 2.6; the canonical
    // name is torch.storage.UntypedStorage).
    "torch.UntypedStorage", "torch.TypedStorage", "torch._utils._rebuild_sparse_csr_tensor",
};

// Gadgets. Whole modules where a pickle has no business (every attribute
// below them is refused), then single attributes of otherwise ordinary
// modules. Python 2 spellings are listed too: pickle maps them at load time.
constexpr const char* kGadgets[] = {
    // processes, the interpreter, native code
    "os", "posix", "nt", "_posixsubprocess", "subprocess", "commands", "popen2", "sys", "runpy", "pty", "tty",
    "termios", "fcntl", "resource", "signal", "_signal", "ctypes", "_ctypes", "cffi", "gc", "site", "sysconfig",
    "atexit", "faulthandler", "_winapi", "msvcrt", "winreg", "_winreg", "posixpath", "ntpath", "genericpath",
    "pwd", "grp", "spwd", "crypt", "getpass", "syslog", "mmap", "platform", "multiprocessing",
    // private helpers that run commands or load code (_osx_support._read_output runs a shell command)
    "_osx_support", "_aix_support", "_bootsubprocess", "_multiprocessing", "_posixshmem", "_pyrepl", "_imp",
    "_frozen_importlib", "_frozen_importlib_external", "_sitebuiltins", "_tkinter", "_xxsubinterpreters",
    "_interpreters", "_interpqueues", "_testcapi", "_testinternalcapi", "_testmultiphase", "_ctypes_test",
    "concurrent", "threading", "_thread", "thread", "dummy_thread", "_dummy_thread", "asyncio",
    // code execution, importing, attribute traversal
    "builtins.eval", "builtins.exec", "builtins.execfile", "builtins.compile", "builtins.getattr",
    "builtins.setattr", "builtins.delattr", "builtins.__import__", "builtins.open", "builtins.apply",
    "builtins.breakpoint", "builtins.input", "builtins.raw_input", "builtins.globals", "builtins.locals",
    "builtins.vars", "builtins.reload", "builtins.file", "builtins.help", "builtins.exit", "builtins.quit",
    "builtins.copyright", "builtins.credits", "builtins.license", "builtins.print", "builtins.type",
    "builtins.memoryview", "builtins.super", "builtins.dir", "builtins.hasattr", "builtins.intern",
    "builtins.reduce", "builtins.map", "builtins.filter", "builtins.sorted", "builtins.min", "builtins.max",
    "builtins.iter", "builtins.next", "builtins.callable", "builtins.format", "builtins.classmethod",
    "builtins.staticmethod", "builtins.property",
    "importlib", "imp", "zipimport", "pkgutil", "pkg_resources", "modulefinder", "encodings", "code", "codeop",
    "pydoc", "pydoc_data", "doctest", "unittest", "inspect", "functools", "operator", "_operator", "types",
    "typing", "copyreg", "copy_reg", "timeit", "pdb",
    "bdb", "trace", "profile", "cProfile", "_lsprof", "pstats", "tracemalloc", "dis", "idlelib", "lib2to3",
    "turtle", "turtledemo", "tkinter", "Tkinter", "curses", "readline", "rlcompleter", "sched", "ensurepip",
    "venv", "pip", "setuptools", "distutils", "compileall", "py_compile", "zipapp", "cgi", "cgitb", "IPython",
    "jinja2", "yaml", "sympy.sympify", "sympy.core.sympify", "sympy.parsing",
    // other picklers and serializers that load code
    "pickle", "_pickle", "cPickle", "pickletools", "_compat_pickle", "marshal", "shelve", "dbm", "anydbm",
    "dill", "cloudpickle", "joblib",
    // files, archives, databases
    "io", "_io", "_pyio", "codecs", "_codecs", "fileinput", "tempfile", "glob", "filecmp",
    "linecache", "tokenize", "mimetypes", "netrc", "mailbox", "mailcap", "shutil", "zipfile", "tarfile", "gzip",
    "bz2", "lzma", "sqlite3", "_sqlite3", "logging", "wave", "aifc", "sunau", "chunk", "sndhdr", "imghdr",
    "plistlib", "xml", "pathlib", "uuid", "argparse.FileType", "configparser",
    // network
    "socket", "_socket", "ssl", "_ssl", "select", "selectors", "http", "httplib", "urllib", "urllib2",
    "urllib3", "requests", "aiohttp", "ftplib", "smtplib", "poplib", "imaplib", "nntplib", "telnetlib",
    "xmlrpc", "xmlrpclib", "SimpleXMLRPCServer", "socketserver", "SocketServer", "BaseHTTPServer",
    "SimpleHTTPServer", "CGIHTTPServer", "wsgiref", "webbrowser", "huggingface_hub", "datasets.load_dataset",
    "datasets.load_from_disk",
    // torch: loaders, compilers, code generators, subprocesses
    "torch.load", "torch.save", "torch.from_file", "torch.serialization.load", "torch.serialization._load",
    "torch.serialization._legacy_load", "torch.serialization.save", "torch.serialization._save",
    "torch.storage._load_from_bytes", "torch.hub", "torch.jit", "torch._jit_internal", "torch._inductor",
    "torch._dynamo", "torch.fx", "torch.package", "torch._C", "torch.ops", "torch._ops", "torch.classes",
    "torch._classes", "torch.library", "torch._library", "torch.compile", "torch._export", "torch.export",
    "torch.onnx", "torch.testing", "torch.multiprocessing", "torch.distributed", "torch.profiler",
    "torch.autograd.profiler", "torch.cuda.memory", "torch.utils.cpp_extension", "torch.utils.bottleneck",
    "torch.utils.collect_env", "torch.utils.tensorboard", "torch.utils.benchmark", "torch.utils.model_zoo",
    "torch.utils.data.datapipes",
    // numpy: loaders, file writers, code runners, importers
    "numpy.load", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "numpy.loadtxt",
    "numpy.genfromtxt", "numpy.fromfile", "numpy.fromregex", "numpy.memmap", "numpy.DataSource",
    "numpy.core.memmap", "numpy._core.memmap", "numpy.core.records", "numpy._core.records", "numpy.rec",
    "numpy.core._internal", "numpy._core._internal", "numpy.core._ufunc_reconstruct",
    "numpy._core._ufunc_reconstruct", "numpy.core.multiarray._ufunc_reconstruct", "numpy.lib.npyio",
    "numpy.lib._npyio_impl", "numpy.lib.format", "numpy.lib._datasource", "numpy.lib.utils",
    "numpy.lib._utils_impl", "numpy.testing", "numpy.f2py", "numpy.distutils", "numpy.ctypeslib",
    // pandas readers (read_clipboard runs a program, read_html fetches URLs)
    "pandas.io", "pandas.read_pickle", "pandas.read_csv", "pandas.read_table", "pandas.read_json",
    "pandas.read_parquet", "pandas.read_feather", "pandas.read_hdf", "pandas.read_sql", "pandas.read_excel",
    "pandas.read_html", "pandas.read_xml", "pandas.read_orc", "pandas.read_stata", "pandas.read_sas",
    "pandas.read_spss", "pandas.read_fwf", "pandas.read_clipboard", "pandas.eval",
};

// Modules whose plain functions a model may hold as values: torch's tensor
// functions, as pickle spells them (nn.functional's C functions live in
// torch._C._nn, torch.special's in torch._C._special, torch.linalg's in
// torch._C._linalg, ...). Only attributes directly in the module, never a
// gadget method, and never a name that is a gadget itself
// (torch.nn.functional.os would be the os module).
constexpr const char* kFunctionModules[] = {
    "torch.nn.functional", "torch._C._nn", "torch._C._special", "torch._C._linalg", "torch._C._fft",
    "torch._C._nested", "torch._C._sparse",
};

// Callables that call what they are given (beyond building a value from it):
// the globals and objects in their arguments count as called. Unknown
// callables (a project's own classes) are treated so too.
constexpr const char* kCallsItsArguments[] = {
    "torch._tensor._rebuild_from_type_v2",      // func(*args), then new_type
    "torch._utils._rebuild_wrapper_subclass",   // makes an instance of cls
    // cls.__new__(cls, *args), base.__new__(cls, state) and base.__init__(obj, state): the call
    // analysis reads the well-formed calls for what they do (pickle/call_analysis.cc); these
    // entries judge the others.
    "copyreg._reconstructor", "copyreg.__newobj__", "copyreg.__newobj_ex__",
    "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",  // subtype.__new__
};

// Callables ckptfix knows as data that look up methods of their argument
// (issue 66): dict(x), OrderedDict(x) and their kin call x.keys() and
// x[key] when x is no dict, set(x) and list(x) iterate it, codecs call
// x.encode: where x is an object (a SimpleNamespace given a `keys` by its
// BUILD, an instance of a class ckptfix does not know), what it holds is
// called, as its class's own methods are. (docs/security.md, "Implicit calls".)
constexpr const char* kCallsMethodsOfItsArguments[] = {
    "builtins.dict", "builtins.set", "builtins.frozenset", "builtins.list", "builtins.tuple",
    "builtins.bytearray", "builtins.bytes", "builtins.str", "builtins.int", "builtins.float", "builtins.complex",
    "builtins.bool", "builtins.slice", "builtins.range", "builtins.enumerate", "builtins.zip", "builtins.reversed",
    "collections.OrderedDict", "collections.UserDict", "collections.UserList", "collections.UserString",
    "collections.defaultdict", "collections.Counter", "collections.ChainMap", "collections.deque",
    "_codecs.encode", "_codecs.decode", "copyreg._reconstructor", "_io.BytesIO", "io.BytesIO",
    "types.SimpleNamespace", "argparse.Namespace",
};

constexpr const char* kGadgetMethods[] = {
    "from_pretrained", "from_file", "fromfile", "load", "loads", "load_file", "save", "save_pretrained",
    "system", "popen", "spawn", "exec", "eval", "run_path", "run_module", "write_text", "write_bytes",
    "unlink", "rmtree", "tofile", "dump", "dumps",
};

}  // namespace

std::span<const char* const> torch_allowlist() { return kTorchAllowlist; }
std::span<const char* const> missing_in_torch_1_13() { return kMissingInTorch1_13; }

std::span<const AllowlistAddition> allowlist_additions() { return kAllowlistAdditions; }
TorchVersion builtin_exceptions_since() { return kBuiltinExceptionsSince; }
std::span<const char* const> known_data() { return kKnownData; }
std::span<const char* const> gadgets() { return kGadgets; }
std::span<const char* const> gadget_methods() { return kGadgetMethods; }
std::span<const char* const> function_modules() { return kFunctionModules; }
std::span<const char* const> calls_its_arguments() { return kCallsItsArguments; }
std::span<const char* const> calls_methods_of_its_arguments() { return kCallsMethodsOfItsArguments; }

}  // namespace ckptfix::global_lists
