#include "bytes/gpu_driver.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace ckptfix {

std::string_view minimum_nvidia_driver(int cuda_major) {
  // NVIDIA's CUDA release notes, "CUDA Toolkit and Minimum Required Driver
  // Version for CUDA Minor Version Compatibility".
  switch (cuda_major) {
    case 12: return "525.60.13";
    case 13: return "580.65.06";
    default: return "";
  }
}

std::string nvidia_driver_version(std::string_view text) {
  // The version is the first word of digits and dots that has a dot, after
  // "Kernel Module" (or anywhere on the NVRM line, for other wordings).
  const size_t line_end = text.find('\n');
  std::string_view line = text.substr(0, line_end);
  if (const size_t at = line.find("Kernel Module"); at != std::string_view::npos) line.remove_prefix(at);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && !std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    size_t j = i;
    while (j < line.size() && (std::isdigit(static_cast<unsigned char>(line[j])) || line[j] == '.')) ++j;
    const std::string_view word = line.substr(i, j - i);
    const bool word_ends = j == line.size() || std::isspace(static_cast<unsigned char>(line[j]));
    if (word.find('.') != std::string_view::npos && word.back() != '.' && word_ends) return std::string(word);
    i = j + 1;
  }
  return "";
}

std::string installed_nvidia_driver() {
  std::ifstream in("/proc/driver/nvidia/version");
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return nvidia_driver_version(text.str());
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string insufficient_driver_reason(const std::string& driver, int driver_cuda, int runtime) {
  if (driver.empty() && driver_cuda == 0) return "no NVIDIA driver is installed";
  const std::string_view minimum = minimum_nvidia_driver(runtime / 1000);
  std::string reason = "NVIDIA driver " + (driver.empty() ? std::string("(version unknown)") : driver);
  if (driver_cuda > 0) reason += " supports CUDA " + cuda_version_text(driver_cuda) + ",";
  reason += " older than the CUDA " + cuda_version_text(runtime) + " this ckptfix was built with";
  if (!minimum.empty()) reason += ": the GPU load test needs driver " + std::string(minimum) + " or newer";
  return reason;
}

}  // namespace ckptfix
