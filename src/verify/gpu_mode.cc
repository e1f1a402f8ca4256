// GpuMode and GpuReport: what was asked of the GPU load test and what it did.
#include "ckptfix/error.h"
#include "ckptfix/verify.h"
#include "bytes/gpu.h"
#include "bytes/gpu_driver.h"

namespace ckptfix {

GpuMode parse_gpu_mode(const std::string& text) {
  if (text == "auto") return GpuMode::kAuto;
  if (text == "require") return GpuMode::kRequire;
  if (text == "off") return GpuMode::kOff;
  throw Error(ErrorKind::kInvalidArgument, "`gpu` '" + text + "': expected auto, require or off");
}

std::string_view gpu_status_name(GpuReport::Status status) {
  switch (status) {
    case GpuReport::Status::kOk: return "ok";
    case GpuReport::Status::kSkipped: return "skipped";
    case GpuReport::Status::kOff: return "off";
  }
  return "off";
}

GpuReport plan_gpu(GpuMode mode) {
  GpuReport report;
  if (mode == GpuMode::kOff) return report;  // Status::kOff
  const GpuStatus& status = gpu_status();
  if (!status.usable) {
    if (mode == GpuMode::kRequire) {
      throw Error(ErrorKind::kGpu, "GPU load test required but it cannot run: " + status.reason);
    }
    report.status = GpuReport::Status::kSkipped;
    report.reason = status.reason;
    return report;
  }
  report.status = GpuReport::Status::kOk;
  report.device = status.device;
  return report;
}

void require_gpu_if_asked(GpuMode mode) { plan_gpu(mode); }

GpuSupport gpu_support() {
  const GpuStatus& status = gpu_status();
  GpuSupport s;
  s.built_in = gpu_support_built();
  s.cuda_runtime = status.runtime;
  if (s.built_in) s.minimum_driver = minimum_nvidia_driver(std::stoi(status.runtime));
  s.usable = status.usable;
  s.device = status.device;
  s.reason = status.reason;
  return s;
}

void GpuReport::add(const GpuReport& other) {
  storages += other.storages;
  bytes += other.bytes;
  nan += other.nan;
  inf += other.inf;
  seconds += other.seconds;
  phases.open += other.phases.open;
  phases.open_waited += other.phases.open_waited;
  phases.host_copy += other.phases.host_copy;
  phases.checksum += other.phases.checksum;
  phases.device_waited += other.phases.device_waited;
  phases.writer_waited += other.phases.writer_waited;
}

}  // namespace ckptfix
