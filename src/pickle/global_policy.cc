#include "pickle/global_policy.h"

#include <array>
#include <string>

namespace ckptfix {
namespace {

bool module_within(std::string_view module, std::string_view root) {
  return module == root || (module.size() > root.size() && module.substr(0, root.size()) == root &&
                            module[root.size()] == '.');
}

// Whole modules whose every attribute is treated as dangerous: process and
// code execution, file and network access, and other picklers.
constexpr std::array kDangerousModules = {
    "os", "posix", "nt", "subprocess", "sys", "socket", "runpy", "shutil", "pty", "pickle", "_pickle",
    "cPickle", "pickletools", "importlib", "ctypes", "webbrowser", "pip", "code", "codeop", "commands",
    "popen2", "multiprocessing", "asyncio", "http", "httplib", "urllib", "urllib2", "urllib3", "requests",
    "aiohttp", "ftplib", "smtplib", "telnetlib", "platform", "timeit", "pdb", "bdb", "trace", "profile",
    "cProfile", "dill", "marshal", "shelve", "io", "_io", "codecs", "pathlib", "fileinput", "tempfile",
    "functools", "operator", "_operator", "inspect", "threading", "_thread", "signal", "zipimport",
    "tarfile", "zipfile", "gc", "imp", "site", "sysconfig", "distutils", "setuptools", "_posixsubprocess",
    "torch.hub", "numpy.distutils", "numpy.f2py", "numpy.testing", "numpy.ctypeslib", "numpy.lib.npyio",
    "joblib", "cloudpickle",
};

// Single attributes that are dangerous in otherwise-innocent modules.
constexpr std::array<std::pair<const char*, const char*>, 13> kDangerousAttributes = {{
    {"types", "FunctionType"},
    {"types", "LambdaType"},
    {"types", "CodeType"},
    {"types", "MethodType"},
    {"types", "ModuleType"},
    {"torch", "load"},
    {"torch.serialization", "load"},
    {"torch.serialization", "_load"},
    {"torch.serialization", "_legacy_load"},
    {"torch.storage", "_load_from_bytes"},
    {"torch.jit", "load"},
    {"numpy", "load"},
    {"numpy", "fromfile"},
}};

constexpr std::array kDangerousBuiltins = {
    "eval", "exec", "execfile", "compile", "getattr", "setattr", "delattr", "__import__", "open", "apply",
    "breakpoint", "input", "raw_input", "globals", "locals", "vars", "reload", "file", "help", "exit", "quit",
};

// torch 2.x weights_only allowlist, outside the families handled below.
constexpr std::array<std::pair<const char*, const char*>, 16> kSafeGlobals = {{
    {"collections", "OrderedDict"},
    {"collections", "Counter"},
    {"torch.nn.parameter", "Parameter"},
    {"torch.serialization", "_get_layout"},
    {"torch", "Size"},
    {"torch", "Tensor"},
    {"torch", "device"},
    {"_codecs", "encode"},
    {"builtins", "bytearray"},
    {"builtins", "set"},
    {"builtins", "complex"},
    {"__builtin__", "bytearray"},
    {"__builtin__", "set"},
    {"__builtin__", "complex"},
    {"torch._tensor", "_rebuild_from_type_v2"},
    {"torch._utils", "_rebuild_tensor"},
}};

constexpr std::array kSafeRebuilds = {
    "_rebuild_tensor_v2",         "_rebuild_tensor_v3",        "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor",       "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
    "_rebuild_xla_tensor",        "_rebuild_nested_tensor",    "_rebuild_device_tensor_from_cpu_tensor",
    "_rebuild_sparse_csr_tensor", "_rebuild_mps_tensor",
};

constexpr std::array kDtypeNames = {
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "complex32", "chalf",
    "complex64", "cfloat", "complex128", "cdouble", "uint8", "int8", "int16", "short", "int32", "int",
    "int64", "long", "bool", "quint8", "qint8", "qint32", "quint4x2", "quint2x4", "uint16", "uint32",
    "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "uint1", "uint2", "uint3",
    "uint4", "uint5", "uint6", "uint7", "int1", "int2", "int3", "int4", "int5", "int6", "int7",
    "per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
    "per_channel_affine_float_qparams",
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

namespace {

// The checks that make module.name dangerous by itself, without looking at
// the longer paths a dotted name also reaches.
bool dangerous_path(std::string_view module, std::string_view name) {
  for (const char* m : kDangerousModules) {
    if (module_within(module, m)) return true;
  }
  if (module == "builtins" || module == "__builtin__") {
    for (const char* b : kDangerousBuiltins) {
      if (name == b) return true;
    }
  }
  for (const auto& [m, a] : kDangerousAttributes) {
    if (module == m && name == a) return true;
  }
  return false;
}

}  // namespace

GlobalSafety classify_global(std::string_view module, std::string_view name) {
  // Attribute traversal through dunders (torch.__builtins__, X.__globals__,
  // obj.__class__.__subclasses__ ...) reaches anything; pickle's own
  // copyreg helpers are the legitimate exception (but not their attributes).
  const bool copyreg = module == "copyreg" || module == "copy_reg";
  const auto first_dot = name.find('.');
  const std::string_view checked = !copyreg ? name : first_dot == std::string_view::npos ? std::string_view()
                                                                                        : name.substr(first_dot + 1);
  if (checked.find("__") != std::string_view::npos) return GlobalSafety::kDangerous;
  // A dotted qualified name (protocol 4) is a getattr chain: judge every
  // path along it (module.a + b.c, module.a.b + c), one after the other, in
  // time linear in the name's length.
  std::string path(module);
  std::string_view rest = name;
  while (true) {
    if (dangerous_path(path, rest)) return GlobalSafety::kDangerous;
    const auto dot = rest.find('.');
    if (dot == std::string_view::npos) break;
    path += '.';
    path.append(rest.substr(0, dot));
    rest = rest.substr(dot + 1);
  }

  for (const auto& [m, a] : kSafeGlobals) {
    if (module == m && name == a) return GlobalSafety::kSafe;
  }
  if (module == "torch._utils") {
    for (const char* r : kSafeRebuilds) {
      if (name == r) return GlobalSafety::kSafe;
    }
  }
  if (module == "torch") {
    if (ends_with(name, "Storage") || ends_with(name, "Tensor")) return GlobalSafety::kSafe;
    for (const char* d : kDtypeNames) {
      if (name == d) return GlobalSafety::kSafe;
    }
  }
  return GlobalSafety::kUnknown;
}

}  // namespace ckptfix
