#include "ckptfix/weights_only.h"

#include "pickle/opcodes.h"

namespace ckptfix {
namespace {

// The first few items, then how many more: a file may name 200,000 globals,
// and a line for people names a few (the JSON reports list them all).
std::string joined(const std::vector<std::string>& items) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += " and " + std::to_string(items.size() - kShown) + " more";
  return out;
}

}  // namespace

WeightsOnlyVerdict weights_only_verdict(const Checkpoint& checkpoint, TorchVersion torch) {
  WeightsOnlyVerdict verdict;
  verdict.torch = modeled_torch_version(torch);
  for (const GlobalRef& g : checkpoint.globals()) {
    if (!g.default_load_accepts(torch)) verdict.globals.push_back(g.dotted());
  }
  // Before 2.6 the default load is pickle's own (weights_only=False): every opcode.
  const OpcodeSet& used = weights_only_by_default(torch) ? checkpoint.pickle_opcodes() : OpcodeSet{};
  for (unsigned code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    if (used.contains(c) && !op::in_torch_weights_only_subset(c)) {
      const char* name = op::name(c);
      verdict.opcodes.emplace_back(name != nullptr ? name : "opcode " + std::to_string(code));
    }
  }
  verdict.loads = verdict.globals.empty() && verdict.opcodes.empty();
  return verdict;
}

std::string_view global_kind_name(GlobalKind kind) {
  switch (kind) {
    case GlobalKind::kWeightsOnly: return "weights_only";
    case GlobalKind::kData: return "data";
    case GlobalKind::kUnknown: return "unknown";
    case GlobalKind::kGadget: return "gadget";
    case GlobalKind::kFunction: return "function";
  }
  return "unknown";
}

std::string_view global_use_name(GlobalUse use) {
  switch (use) {
    case GlobalUse::kReferenced: return "referenced";
    case GlobalUse::kInstantiated: return "instantiated";
    case GlobalUse::kCalled: return "called";
  }
  return "called";
}

std::vector<WeightsOnlyRange> weights_only_by_release(const Checkpoint& checkpoint) {
  std::vector<WeightsOnlyRange> out;
  for (const TorchVersion& v : modeled_torch_versions()) {
    WeightsOnlyVerdict verdict = weights_only_verdict(checkpoint, v);
    if (!out.empty() && out.back().verdict.globals == verdict.globals && out.back().verdict.opcodes == verdict.opcodes) {
      out.back().to = v;
      continue;
    }
    out.push_back({v, v, std::move(verdict)});
  }
  return out;
}

std::string describe_releases(const std::vector<WeightsOnlyRange>& ranges) {
  const auto span = [](const WeightsOnlyRange& r) {
    return r.from == r.to ? r.from.str() : r.from.str() + "-" + r.to.str();
  };
  std::string loads, refused;
  for (const WeightsOnlyRange& r : ranges) {
    if (r.verdict.loads) {
      loads = r.to == modeled_torch_versions().back() && r.from != r.to ? ">= " + r.from.str() : span(r);
      continue;
    }
    refused += (refused.empty() ? "" : "; ") + span(r) + ": " + describe(r.verdict).substr(std::string("refused: ").size());
  }
  if (refused.empty()) return "loads with torch " + ranges.front().from.str() + " to " + ranges.back().to.str();
  if (loads.empty()) return "refused by torch " + refused;
  return "loads with torch " + loads + "; refused by " + refused;
}

std::string describe(const WeightsOnlyVerdict& verdict) {
  if (verdict.loads) return "loads";
  std::string out = "refused:";
  if (!verdict.globals.empty()) out += " globals " + joined(verdict.globals);
  if (!verdict.opcodes.empty()) out += std::string(verdict.globals.empty() ? "" : ";") + " opcodes " + joined(verdict.opcodes);
  return out;
}

}  // namespace ckptfix
