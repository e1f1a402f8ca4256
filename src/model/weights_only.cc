#include "ckptfix/weights_only.h"

#include "pickle/opcodes.h"

namespace ckptfix {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

WeightsOnlyVerdict weights_only_verdict(const Checkpoint& checkpoint) {
  WeightsOnlyVerdict verdict;
  for (const GlobalRef& g : checkpoint.globals()) {
    if (!g.weights_only()) verdict.globals.push_back(g.dotted());
  }
  const OpcodeSet& used = checkpoint.pickle_opcodes();
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

std::string describe(const WeightsOnlyVerdict& verdict) {
  if (verdict.loads) return "loads";
  std::string out = "refused:";
  if (!verdict.globals.empty()) out += " globals " + joined(verdict.globals);
  if (!verdict.opcodes.empty()) out += std::string(verdict.globals.empty() ? "" : ";") + " opcodes " + joined(verdict.opcodes);
  return out;
}

}  // namespace ckptfix
