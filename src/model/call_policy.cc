// The rule every write follows: a file ckptfix writes never calls a global
// ckptfix does not know as data unless the caller trusts it (issue 33;
// docs/security.md, "What a pickle calls").
#include <algorithm>

#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "ckptfix/passes.h"
#include "ckptfix/save.h"
#include "model/checkpoint_impl.h"
#include "pickle/call_analysis.h"

namespace ckptfix {
namespace {

bool matches_any(const std::vector<std::string>& patterns, const std::string& dotted) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, dotted); });
}

// "'mypkg.evil' (REDUCE at archive/data.pkl+0x1a3)", or without the place.
std::string described(const GlobalRef& g, bool with_place) {
  std::string s(1, '\'');  // appended piece by piece: g++ 12 warns (-Wrestrict) at "'" + std::string
  s += g.dotted();
  s += "' (";
  s += g.how;
  if (with_place && !g.where.empty()) s += " at " + g.where;
  return s + ")";
}

}  // namespace

UnknownCalls unknown_calls(const Checkpoint& checkpoint, const std::vector<std::string>& allow_globals) {
  for (const std::string& p : allow_globals) {
    if (p.empty()) throw Error(ErrorKind::kInvalidArgument, "`allow_globals` needs a non-empty pattern");
  }
  UnknownCalls out;
  out.nested = nested_violations(nested_pickles(checkpoint), allow_globals);
  // Only an unknown class or a function is ever reported: a graph with
  // neither (every state dict) needs no walk, which for 100,000 tensors
  // took a twentieth of a rewrite, once here and once in the save.
  if (!may_name_code(impl_of(checkpoint).graph)) return out;
  for (GlobalRef& g : checkpoint.reachable_globals()) {
    // A function held as a value that is called never opens (the unpickler
    // refuses it); one a pass moved into a call would be refused here.
    if (g.kind == GlobalKind::kUnknown) out.unknown.push_back(g);
    const bool not_data = g.kind == GlobalKind::kUnknown || g.kind == GlobalKind::kFunction;
    if (!not_data || g.use != GlobalUse::kCalled) continue;
    (matches_any(allow_globals, g.dotted()) ? out.trusted : out.refused).push_back(std::move(g));
  }
  return out;
}

void refuse_unknown_calls(const Checkpoint& checkpoint, const std::vector<std::string>& allow_globals) {
  refuse_calls(checkpoint, unknown_calls(checkpoint, allow_globals));
}

void refuse_nested_calls(const Checkpoint& checkpoint, const std::vector<NestedViolation>& nested) {
  if (nested.empty()) return;
  const NestedViolation& first = nested.front();
  std::string message = "refusing to carry key '" + first.key + "': " + first.what +
                        "; the model's load_state_dict would run it (its set_extra_state unpickles it after "
                        "torch.load, whatever weights_only says)";
  if (nested.size() > 1) message += ", and " + std::to_string(nested.size() - 1) + " more such";
  message += "; the weights-only repair with `drop_unknown` replaces it with None";
  message += first.trustable ? ", or `allow_globals` trusts the global it calls"
                             : " (a known gadget, or bytes ckptfix cannot judge: no `allow_globals` pattern trusts it)";
  throw Error(ErrorKind::kUnsafe, message).in_file(checkpoint.file_name());
}

void refuse_calls(const Checkpoint& checkpoint, const UnknownCalls& calls) {
  refuse_nested_calls(checkpoint, calls.nested);
  const std::vector<GlobalRef>& refused = calls.refused;
  if (refused.empty()) return;
  const bool one = refused.size() == 1;
  std::string message = "refusing to write a pickle that calls ";
  if (one) {
    message += described(refused[0], false) + ", a global";
  } else {
    message += std::to_string(refused.size()) + " globals";
  }
  message += " ckptfix does not know as data";
  if (!one) {
    message += ": ";
    for (size_t i = 0; i < refused.size(); ++i) message += (i ? ", " : "") + described(refused[i], true);
  }
  message += std::string("; loading the output with weights_only=False would run ") + (one ? "it" : "them") +
             "; the weights-only repair (`weights_only`) turns " + (one ? "it" : "them") +
             " into plain data, or `allow_globals` trusts " + (one ? "it" : "them");
  const bool enum_shape = std::any_of(refused.begin(), refused.end(), [](const GlobalRef& g) {
    return g.how.find(kEnumShape) != std::string::npos;
  });
  if (enum_shape) {
    message += " (an Enum member is pickled as a call of its class, Class(value), which a pickle cannot tell "
               "from a function: trust the class with `allow_globals`)";
  }
  Error e(ErrorKind::kUnsafe, message);
  if (!refused[0].where.empty() && one) e.at(refused[0].where);
  throw e.in_file(checkpoint.file_name());
}

}  // namespace ckptfix
