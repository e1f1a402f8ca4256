// The call analysis behind the rule that a rewrite never carries a call the
// user did not allow (pickle/call_analysis.h, issue 33), on hostile pickles.
// Three readings of one pickle must agree:
//
//   read      the analysis made while the pickle is read (every opcode, what
//             it discards included): what inspect and check report;
//   judged    the analysis of the finished graph from its root: what save()
//             judges before it writes;
//   written   the analysis made while the pickle ckptfix writes from that
//             graph is read back: what the output really asks of its loader.
//
// Each global's use in `judged` is at most its use in `read` (the graph is
// part of what was read), and its use in `written` is at most its use in
// `judged` (ckptfix never writes a pickle that calls more than it judged).
// Globals ckptfix knows as data are left out: the writer spells some values
// with calls of them (bytes as _codecs.encode, sets as builtins.set, ...),
// and the rule is about the others.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/bytes.h"
#include "pickle/call_analysis.h"
#include "pickle/global_policy.h"
#include "pickle/pickler.h"
#include "pickle/unpickler.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace {

using Uses = std::map<std::pair<std::string, std::string>, ckptfix::GlobalUse>;

// The writer spells builtins and copyreg the Python 2 way, as CPython does at protocol 2.
std::string canonical(const std::string& module) {
  if (module == "__builtin__") return "builtins";
  if (module == "copy_reg") return "copyreg";
  return module;
}

Uses uses_of(const std::vector<ckptfix::GlobalUsage>& usages) {
  Uses out;
  for (const ckptfix::GlobalUsage& u : usages) {
    const ckptfix::GlobalKind kind = ckptfix::classify_global(u.module, u.name).kind;
    if (kind == ckptfix::GlobalKind::kWeightsOnly || kind == ckptfix::GlobalKind::kData) continue;
    ckptfix::GlobalUse& use = out[{canonical(u.module), u.name}];
    if (u.use > use) use = u.use;
  }
  return out;
}

// Every global `more` uses beyond referencing must be used at least as much in `bound`.
void expect_within(const Uses& more, const Uses& bound, const char* what) {
  for (const auto& [name, use] : more) {
    if (use == ckptfix::GlobalUse::kReferenced) continue;
    const auto it = bound.find(name);
    if (it == bound.end() || it->second < use) {
      std::fprintf(stderr, "call analysis: %s.%s is used more (%d) %s\n", name.first.c_str(), name.second.c_str(),
                   static_cast<int>(use), what);
      std::abort();
    }
  }
}

}  // namespace

namespace ckptfix::fuzz {

void call_policy(const uint8_t* data, size_t size) {
  ValueGraph graph;
  UnpickleResult read;
  std::string written;
  try {
    read = unpickle(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), graph);
    PickleWriterOptions options;
    options.persistent_id = [](const Value& pid, const std::function<void(Value*)>& save) { save(pid.pid()); };
    written = pickle_protocol2(read.root, options);
  } catch (const Error&) {
    return;  // not a pickle, a refused one, or a graph protocol 2 cannot express
  }
  const Uses judged = uses_of(reachable_global_usages(read.root));
  expect_within(judged, uses_of(read.globals), "in the finished graph than while it was read");
  ValueGraph again;
  UnpickleResult back;
  try {
    back = unpickle(as_bytes(written), again);
  } catch (const Error& e) {
    return;  // pickle_roundtrip's finding, not this target's
  }
  expect_within(uses_of(back.globals), judged, "in the pickle written than in the graph judged");
}

}  // namespace ckptfix::fuzz
