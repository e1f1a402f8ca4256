#include "bytes/byte_checker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "bytes/load_test_opening.h"
#include "bytes/xxh3.h"
#include "io/interrupt.h"
#include "ckptfix/error.h"
#include "zip/crc32.h"
#include "io/system_calls.h"

namespace ckptfix {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

ByteChecker::ByteChecker(GpuMode mode, GpuReport& gpu, ProgressCallback progress, uint64_t total,
                         bool inject_gpu_fault)
    : gpu_report_(gpu), buffer_(kChunk), progress_(std::move(progress)), total_(total) {
  gpu = plan_gpu(mode);
  if (gpu.status != GpuReport::Status::kOk) return;
  // Opened beside the caller, which goes on writing: its first storage waits for it.
  load_test_ = std::make_unique<LoadTest>(
      open_in_background([inject_gpu_fault] { return open_cuda_load_test(LoadTest::kSlotBytes, inject_gpu_fault); }));
}

ByteChecker::ByteChecker(std::unique_ptr<LoadTestDevice> device, const std::string& name, GpuReport& gpu)
    : gpu_report_(gpu), buffer_(kChunk), total_(0) {
  gpu = GpuReport{};
  gpu.status = GpuReport::Status::kOk;
  gpu.device = name;
  load_test_ = std::make_unique<LoadTest>(std::move(device));
}

// The sum and the device's staging go over the same bytes one small piece at
// a time, so the second pass reads them from the cache, not from memory.
constexpr size_t kPiece = size_t{256} << 10;

struct ByteChecker::Running {
  RecordHash hash;
  uint32_t crc = 0;
  Sum sum = Sum::kCrc32;
  std::optional<OnDevice> device;  // when the load test runs on these bytes
  WordChecksum expected;           // what the device must read
};

// A storage loaded on the device, and the checksum the CPU computed for it.
struct ByteChecker::Expected {
  uint64_t ticket = 0;
  LoadCheck cpu;
  OnDevice device;
  bool abandoned = false;  // left part-way by an error: nothing to compare
};

ByteChecker::~ByteChecker() = default;

void ByteChecker::begin(const std::optional<OnDevice>& device, Sum sum) {
  if (running_active_ && running_->device) {  // a storage an error left part-way (a read failed)
    expected_.push_back({load_test_->end(), {}, std::move(*running_->device), true});
  }
  // One Running for every record (its hash states are 1.3 KB; a file may have 100,000 records).
  if (!running_) running_ = std::make_unique<Running>();
  running_active_ = true;
  if (sum == Sum::kXxh3) running_->hash.reset();
  running_->crc = 0;
  running_->device.reset();
  running_->expected = WordChecksum();
  running_->sum = sum;
  if (device && load_test_) {
    running_->device = device;
    load_test_->begin(float_coding(device->dtype));
  }
}

void ByteChecker::update(std::span<const std::byte> bytes) {
  for (size_t at = 0; at < bytes.size(); at += kPiece) {
    const auto piece = bytes.subspan(at, std::min(kPiece, bytes.size() - at));
    sum_piece(piece);
    if (running_->device) load_test_->add(piece);  // copied into pinned staging; launched when a slot is full
  }
  updated(bytes.size());
}

void ByteChecker::sum_piece(std::span<const std::byte> piece) {
  Running& r = *running_;
  if (r.sum == Sum::kXxh3) {
    r.hash.update(piece);
  } else if (r.sum == Sum::kCrc32) {
    r.crc = crc32_update(r.crc, piece);
  }
  if (r.device) {
    const auto began = std::chrono::steady_clock::now();
    r.expected.update(piece);
    checksum_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  }
}

void ByteChecker::updated(uint64_t bytes) {
  stop_point();  // every piece read back passes here
  if (running_->device) compare(false);
  done_ += bytes;
  if (progress_) progress_("verifying", done_, total_);
}

Digest ByteChecker::finish() {
  Digest d;
  if (running_->sum == Sum::kXxh3) {
    d.hash = running_->hash.digest();
  } else {
    d.crc = running_->crc;
  }
  if (running_->device) {
    const uint64_t ticket = load_test_->end();
    expected_.push_back({ticket, running_->expected.finish(), std::move(*running_->device)});
    compare(false);
  }
  running_active_ = false;
  return d;
}

void ByteChecker::compare(bool wait) {
  for (const LoadTest::Result& r : load_test_->results(wait)) {
    if (expected_.empty() || expected_.front().ticket != r.ticket) {
      throw Error(ErrorKind::kInternal, "GPU load test: a result for storage " + std::to_string(r.ticket) +
                                            " that was not expected");
    }
    const Expected e = std::move(expected_.front());
    expected_.pop_front();
    if (e.abandoned) continue;
    if (!r.device.same_bytes(e.cpu)) {
      throw Error(e.device.kind, "the bytes loaded on " + gpu_report_.device +
                                     " differ from the bytes read on the CPU (device checksum " + hex64(r.device.sum) +
                                     "/" + hex64(r.device.weighted) + ", CPU " + hex64(e.cpu.sum) + "/" +
                                     hex64(e.cpu.weighted) + ")")
          .at(e.device.where);
    }
    ++gpu_report_.storages;
    gpu_report_.bytes += r.bytes;
    gpu_report_.nan += r.device.nan;
    gpu_report_.inf += r.device.posinf + r.device.neginf;
  }
}

void ByteChecker::finish_device() {
  if (!load_test_) return;
  compare(true);
  gpu_report_.seconds = load_test_->device_seconds();
  GpuReport::Phases& phases = gpu_report_.phases;
  phases.open = load_test_->open_seconds();
  phases.open_waited = load_test_->open_waited_seconds();
  phases.host_copy = read_seconds_ + load_test_->copy_seconds();
  phases.checksum = checksum_seconds_;
  phases.device_waited = load_test_->device_waited_seconds();
}

Digest ByteChecker::digest(uint64_t size, const std::function<void(std::span<std::byte>)>& read,
                           const std::optional<OnDevice>& device, Sum sum) {
  begin(device, sum);
  for (uint64_t left = size; left > 0;) {
    if (running_->device) {
      // Read straight into the device's staging memory and summed there: a
      // copy of every byte fewer (for 4 GiB, an estimated 0.4-0.5 s of one
      // core; not yet measured on a GPU: docs/performance.md).
      const std::span<std::byte> into = load_test_->room(std::min<uint64_t>(left, kPiece));
      const auto began = std::chrono::steady_clock::now();
      read(into);
      read_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      sum_piece(into);
      load_test_->commit(into.size());
      updated(into.size());
      left -= into.size();
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer_.size()));
    std::span<std::byte> chunk(buffer_.data(), n);
    read(chunk);
    update(chunk);
    left -= n;
  }
  return finish();
}

ReadBack::ReadBack(const std::string& path, GpuMode gpu, ProgressCallback progress, uint64_t total,
                   bool inject_gpu_fault)
    : path_(path), checker_(gpu, gpu_, std::move(progress), total, inject_gpu_fault) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw system_error("cannot re-open for verification").in_file(path);
}

ReadBack::ReadBack(const std::string& path, std::unique_ptr<LoadTestDevice> device, const std::string& name)
    : path_(path), checker_(std::move(device), name, gpu_) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw system_error("cannot re-open for verification").in_file(path);
}

ReadBack::~ReadBack() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadBack::read_exactly(std::span<std::byte> out, uint64_t offset, const std::string& record) const {
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(ErrorKind::kIo, std::string("cannot read back: ") + (n < 0 ? std::strerror(errno) : "end of file"))
          .at(record);
    }
    done += static_cast<size_t>(n);
  }
}

void ReadBack::check(const std::string& record, uint64_t offset, uint64_t size, std::optional<uint32_t> crc,
                     std::optional<uint64_t> hash, std::optional<DType> device_dtype) {
  // A record that no longer fits in the file is named as such, not as a
  // short read. The size is asked again only past where the file was seen
  // to end (a file of 100,000 records: one fstat, not 100,000); a file cut
  // after that still fails, as a short read.
  if (offset + size > seen_size_) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < offset + size) {
      throw Error(ErrorKind::kVerification, "the record cannot be read back: the file ends at " +
                                                std::to_string(st.st_size) + " bytes, before its end at " +
                                                std::to_string(offset + size))
          .at(record);
    }
    seen_size_ = static_cast<uint64_t>(st.st_size);
  }
  // By pread into the checker's buffer (with the load test, straight into
  // the device's staging slot), which stays in this core's cache while it
  // is hashed. A mapping of the file's pages would spare the copy,
  // but costs as much in the kernel (each page mapped and unmapped), and it
  // holds the process's mmap lock, which the converting thread's mappings of
  // the input then wait for: a verified cast took 0.194 s that way, 0.171 s
  // by pread (docs/performance.md).
  std::optional<OnDevice> device;
  if (device_dtype && checker_.gpu_enabled()) device = OnDevice{*device_dtype, ErrorKind::kVerification, record};
  // One capture (a std::function keeps it without allocating; a file may have 100,000 records).
  struct Reading {
    const ReadBack& back;
    const std::string& record;
    uint64_t start;
    uint64_t at;
    std::span<const std::byte> window;  // the record's bytes, where a window holds them
  } reading{*this, record, offset, offset, {}};
  if (windows_ && ReadWindow::takes(size)) {
    reading.window = window_.bytes(this, offset, size, seen_size_, [&](uint64_t at, std::span<std::byte> out) {
      read_exactly(out, at, record);
    });
  }
  const Digest d = checker_.digest(
      size,
      [r = &reading](std::span<std::byte> out) {
        if (!r->window.empty()) {
          std::memcpy(out.data(), r->window.data() + (r->at - r->start), out.size());
        } else {
          r->back.read_exactly(out, r->at, r->record);
        }
        r->at += out.size();
      },
      device, hash ? Sum::kXxh3 : Sum::kCrc32);
  if (!hash && crc) check_crc(record, d.crc, *crc);
  if (hash && d.hash != *hash) {
    throw Error(ErrorKind::kVerification, "the bytes read back differ from the bytes meant to be written (XXH3 " +
                                              hex64(d.hash) + " read, " + hex64(*hash) + " expected)")
        .at(record);
  }
  bytes_ += size;
}

void ReadBack::check_crc(const std::string& record, uint32_t read, uint32_t written) {
  if (read != written) {
    throw Error(ErrorKind::kVerification, "the bytes read back have CRC-32 " + hex32(read) + " but " + hex32(written) +
                                              " was written")
        .at(record);
  }
}

void ReadBack::load_on_device(const std::string& record, uint64_t offset, uint64_t size, DType device_dtype) {
  if (!checker_.gpu_enabled()) return;
  uint64_t at = offset;
  checker_.digest(size, [&](std::span<std::byte> out) { read_exactly(out, at, record), at += out.size(); },
                  OnDevice{device_dtype, ErrorKind::kVerification, record}, Sum::kNone);
}

void ReadBack::check_part(const std::string& record, uint64_t record_offset, uint64_t offset,
                          std::span<std::byte> buffer, uint64_t hash) const {
  read_exactly(buffer, offset, record);
  const uint64_t read = xxh3_64(buffer);
  if (read != hash) {
    const uint64_t from = offset - record_offset;
    throw Error(ErrorKind::kVerification, "the bytes read back differ from the bytes meant to be written in its bytes [" +
                                              std::to_string(from) + ", " + std::to_string(from + buffer.size()) +
                                              ") (XXH3 " + hex64(read) + " read, " + hex64(hash) + " expected)")
        .at(record);
  }
}

}  // namespace ckptfix
