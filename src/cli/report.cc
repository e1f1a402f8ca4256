#include "cli/report.h"

#include <cstdio>
#include <iostream>

namespace ckptfix::cli {

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  }
  return buf;
}

void print_error(const std::exception& e) { std::cerr << "ckptfix: error: " << e.what() << std::endl; }

void print_warning(const std::string& message) { std::cerr << "ckptfix: warning: " << message << std::endl; }

int exit_code_for(const Error& e) {
  // Both are fixed by changing the command line, not the input.
  const bool usage = e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kExists;
  return usage ? kExitUsage : kExitFailed;
}

nlohmann::json path_to_json(const Path& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const PathElement& p : path) {
    if (const auto* s = std::get_if<std::string>(&p)) {
      out.push_back(*s);
    } else {
      out.push_back(std::get<int64_t>(p));
    }
  }
  return out;
}

nlohmann::json verification_json(const SaveResult& saved) {
  if (!saved.verification) return {{"status", "skipped"}, {"reason", "--no-verify"}};
  const VerifyReport& v = *saved.verification;
  return {{"status", "ok"},
          {"records", v.records},
          {"records_crc_checked", v.records_crc_checked},
          {"records_copied", v.records_copied},
          {"storages", v.storages},
          {"tensors", v.tensors},
          {"bytes", v.bytes},
          {"seconds", v.seconds},
          {"gpu", gpu_json(v.gpu)}};
}

nlohmann::json gpu_json(const GpuReport& gpu) {
  nlohmann::json out = {{"status", gpu.status}};
  if (!gpu.reason.empty()) out["reason"] = gpu.reason;
  if (gpu.status == "ok") {
    out["device"] = gpu.device;
    out["bytes"] = gpu.bytes;
    out["seconds"] = gpu.seconds;
  }
  return out;
}

std::string global_kind_text(GlobalKind kind) {
  switch (kind) {
    case GlobalKind::kWeightsOnly: return "weights_only allowlist";
    case GlobalKind::kData: return "known data";
    case GlobalKind::kUnknown: return "unknown: may run its own code when loaded";
    case GlobalKind::kGadget: return "gadget";
  }
  return "unknown";
}

nlohmann::json weights_only_json(const WeightsOnlyVerdict& verdict) {
  return {{"loads", verdict.loads}, {"globals", verdict.globals}, {"opcodes", verdict.opcodes}};
}

const char* version() {
#ifdef CKPTFIX_VERSION
  return CKPTFIX_VERSION;
#else
  return "unknown";
#endif
}

}  // namespace ckptfix::cli
