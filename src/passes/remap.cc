// Retagging storage locations: what `torch.load(map_location=...)` would do
// on every load, done once in the file so plain torch.load works.
#include <map>
#include <regex>
#include <set>

#include "ckptfix/error.h"
#include "model/checkpoint_impl.h"
#include "passes/passes_internal.h"

namespace ckptfix {
namespace {

// Device types torch writes as location tags (location_tag and the 2.x
// backend registry), with whether they carry an index.
struct Backend {
  const char* name;
  bool indexed;  // written as name:N
};
constexpr Backend kBackends[] = {
    {"cpu", false}, {"mps", false}, {"meta", false}, {"cuda", true}, {"xpu", true}, {"hpu", true},
    {"mtia", true}, {"npu", true},  {"xla", true},   {"ipu", true},  {"hip", true}, {"maia", true},
    {"privateuseone", true},
};

}  // namespace

void validate_device(const std::string& device) {
  static const std::regex shape(R"(([a-z][a-z0-9_]*)(?::(\d+))?)");
  std::smatch m;
  std::string known;
  for (const Backend& b : kBackends) known += std::string(known.empty() ? "" : ", ") + b.name + (b.indexed ? "[:N]" : "");
  if (!std::regex_match(device, m, shape)) {
    throw Error(ErrorKind::kInvalidArgument, "invalid device '" + device + "': expected one of " + known);
  }
  const std::string type = m[1];
  for (const Backend& b : kBackends) {
    if (type != b.name) continue;
    if (m[2].matched && !b.indexed) {
      throw Error(ErrorKind::kInvalidArgument, "invalid device '" + device + "': torch saves '" + type +
                                                   "' without an index, and torch.load does not recognise '" +
                                                   device + "'; use '" + type + "'");
    }
    return;
  }
  throw Error(ErrorKind::kInvalidArgument, "unknown device type '" + type + "' in '" + device + "': expected one of " + known);
}

void remap_devices(Checkpoint& checkpoint, const std::vector<size_t>& storages, const PassOptions& options,
                   PassReport& report) {
  std::map<std::string, uint64_t> moves;
  for (size_t index : storages) {
    Storage& s = impl_of(checkpoint).storages[index];
    std::string to = s.location;
    for (const auto& [from, target] : options.device_map) {
      if (s.location == from) {
        to = target;
        break;
      }
    }
    if (options.to_device) to = *options.to_device;
    if (to == s.location) continue;
    ++moves[s.location + " -> " + to];
    s.location = to;
    ++report.storages_retagged;
  }
  report.retagged.assign(moves.begin(), moves.end());
}

}  // namespace ckptfix
