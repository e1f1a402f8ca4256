#include "bytes/byte_checker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <xxhash.h>

#include "ckptfix/error.h"
#include "io/mapped_window.h"
#include "zip/crc32.h"

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

ByteChecker::ByteChecker(GpuMode mode, GpuReport& gpu, ProgressCallback progress, uint64_t total)
    : gpu_report_(gpu), buffer_(kChunk), progress_(std::move(progress)), total_(total) {
  gpu = plan_gpu(mode);
  if (gpu.status != GpuReport::Status::kOk) return;
  gpu_ = std::make_unique<GpuRoundTrip>(kChunk);
  returned_.resize(kChunk);
}

void expect_gpu_bytes(const Digest& d, ErrorKind kind, const std::string& where) {
  // The GPU's bytes must equal the bytes sent (whose CRC-32 the caller checks).
  if (d.through_gpu && d.gpu_hash != d.hash) {
    throw Error(kind, "the bytes that came back from GPU memory differ (XXH3 " + hex64(d.gpu_hash) + ", " +
                          hex64(d.hash) + " sent)")
        .at(where);
  }
}

// CRC-32 and XXH3 go over the same bytes one small piece at a time, so the
// second pass reads them from the cache, not from memory.
constexpr size_t kPiece = size_t{256} << 10;

struct ByteChecker::Running {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash{XXH3_createState(), XXH3_freeState};
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> gpu_hash{XXH3_createState(), XXH3_freeState};
  uint32_t crc = 0;
  bool through_gpu = false;
  bool hash_too = true;
};

ByteChecker::~ByteChecker() = default;

void ByteChecker::begin(bool through_gpu, bool hash) {
  running_ = std::make_unique<Running>();
  XXH3_64bits_reset(running_->hash.get());
  XXH3_64bits_reset(running_->gpu_hash.get());
  running_->through_gpu = through_gpu && gpu_ != nullptr;
  running_->hash_too = hash || running_->through_gpu;  // the GPU's bytes are compared by hash
}

void ByteChecker::update(std::span<const std::byte> bytes) {
  Running& r = *running_;
  for (size_t at = 0; at < bytes.size(); at += kPiece) {
    const auto piece = bytes.subspan(at, std::min(kPiece, bytes.size() - at));
    r.crc = crc32_update(r.crc, piece);
    if (r.hash_too) XXH3_64bits_update(r.hash.get(), piece.data(), piece.size());
  }
  if (r.through_gpu) {
    for (size_t at = 0; at < bytes.size(); at += kChunk) {
      const auto chunk = bytes.subspan(at, std::min(kChunk, bytes.size() - at));
      const auto start = std::chrono::steady_clock::now();
      gpu_->roundtrip(chunk, std::span(returned_).first(chunk.size()));
      gpu_report_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      gpu_report_.bytes += chunk.size();
      XXH3_64bits_update(r.gpu_hash.get(), returned_.data(), chunk.size());
    }
  }
  done_ += bytes.size();
  if (progress_) progress_("verifying", done_, total_);
}

Digest ByteChecker::finish() {
  Digest d;
  d.crc = running_->crc;
  d.hash = XXH3_64bits_digest(running_->hash.get());
  d.gpu_hash = XXH3_64bits_digest(running_->gpu_hash.get());
  d.through_gpu = running_->through_gpu;
  running_.reset();
  return d;
}

Digest ByteChecker::digest(uint64_t size, const std::function<void(std::span<std::byte>)>& read, bool through_gpu) {
  begin(through_gpu);
  for (uint64_t left = size; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer_.size()));
    std::span<std::byte> chunk(buffer_.data(), n);
    read(chunk);
    update(chunk);
    left -= n;
  }
  return finish();
}

ReadBack::ReadBack(const std::string& path, GpuMode gpu, ProgressCallback progress, uint64_t total)
    : path_(path), checker_(gpu, gpu_, std::move(progress), total) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(ErrorKind::kIo, std::string("cannot re-open for verification: ") + std::strerror(errno)).in_file(path);
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
                     std::optional<uint64_t> hash, bool through_gpu) {
  // A mapping past the end of the file would fault (SIGBUS): check first.
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < offset + size) {
    throw Error(ErrorKind::kVerification, "the record cannot be read back: the file ends at " +
                                              std::to_string(st.st_size) + " bytes, before its end at " +
                                              std::to_string(offset + size))
        .at(record);
  }
  // Large records through a mapping of the file's pages (what the disk will
  // get, no copy); small ones by pread, cheaper than a mapping each.
  Digest d;
  if (size >= kMapped) {
    checker_.begin(through_gpu, hash.has_value());
    for_each_mapped(fd_, offset, size, record, [&](std::span<const std::byte> view) { checker_.update(view); });
    d = checker_.finish();
  } else {
    uint64_t at = offset;
    d = checker_.digest(size, [&](std::span<std::byte> out) { read_exactly(out, at, record), at += out.size(); },
                        through_gpu);
  }
  if (crc && d.crc != *crc) {
    throw Error(ErrorKind::kVerification, "the bytes read back have CRC-32 " + hex32(d.crc) + " but " + hex32(*crc) +
                                              " was written")
        .at(record);
  }
  if (hash && d.hash != *hash) {
    throw Error(ErrorKind::kVerification, "the bytes read back differ from the bytes meant to be written (XXH3 " +
                                              hex64(d.hash) + " read, " + hex64(*hash) + " expected)")
        .at(record);
  }
  expect_gpu_bytes(d, ErrorKind::kVerification, record);
  bytes_ += size;
}

}  // namespace ckptfix
