// unpickle -> pickle -> unpickle. Whatever ckptfix's writer produces from a
// graph it read must read back: the second read never fails, pickling it
// again gives the same bytes (the graph survived, modulo the spellings
// protocol 2 needs), and the written pickle names no global the input did
// not, except the few calls the writer spells protocol-2-less values with.
#include <cstdlib>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "pickle/value.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"
#include "io/bytes.h"
#include "pickle/pickler.h"
#include "pickle/unpickler.h"

namespace {

using Names = std::set<std::pair<std::string, std::string>>;

// The writer spells builtins and copyreg the Python 2 way, as CPython does at protocol 2.
std::string canonical(const std::string& module) {
  if (module == "__builtin__") return "builtins";
  if (module == "copy_reg") return "copyreg";
  return module;
}

struct Parsed {
  ckptfix::ValueGraph graph;
  ckptfix::Value* root = nullptr;
  Names globals;
};

void parse(const std::string& bytes, Parsed& out) {
  ckptfix::UnpickleOptions options;
  options.on_global = [&out](const std::string& module, const std::string& name, uint64_t) {
    out.globals.emplace(canonical(module), name);
  };
  out.root = ckptfix::unpickle(ckptfix::as_bytes(bytes), out.graph, options).root;
}

std::string write(ckptfix::Value* root) {
  ckptfix::PickleWriterOptions options;
  options.persistent_id = [](const ckptfix::Value& pid, const std::function<void(ckptfix::Value*)>& save) {
    save(pid.pid());
  };
  return ckptfix::pickle_protocol2(root, options);
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "pickle round trip: %s\n", what);
  std::abort();
}

}  // namespace

namespace ckptfix::fuzz {

void pickle_roundtrip(const uint8_t* data, size_t size) {
  Parsed first;
  std::string written;
  try {
    parse(bytes_of(data, size), first);
    written = write(first.root);
  } catch (const ckptfix::Error&) {
    return;  // not a pickle, or a graph protocol 2 cannot express: refused cleanly
  }
  Parsed second, third;
  std::string rewritten;
  try {
    parse(written, second);
    rewritten = write(second.root);
    parse(rewritten, third);
  } catch (const ckptfix::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    finding("ckptfix cannot read back (or re-write) what it wrote");
  }
  if (write(third.root) != rewritten) finding("the graph read back differs from the graph written");
  static const Names kSpellings = {{"builtins", "bytes"},     {"_codecs", "encode"},  {"builtins", "bytearray"},
                                   {"builtins", "set"},       {"builtins", "frozenset"}, {"copyreg", "__newobj_ex__"}};
  for (const auto& g : second.globals) {
    if (!first.globals.count(g) && !kSpellings.count(g)) {
      std::fprintf(stderr, "new global %s.%s\n", g.first.c_str(), g.second.c_str());
      finding("the written pickle names a global the input did not");
    }
  }
}

}  // namespace ckptfix::fuzz
