#include "io/input_file.h"

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <utility>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfix/error.h"
#include "io/system_calls.h"

namespace ckptfix {
namespace {

constexpr uint64_t kReadWholeBelow = uint64_t{8} << 20;

}  // namespace

std::shared_ptr<const InputFile> InputFile::open(const std::filesystem::path& path) {
  std::shared_ptr<InputFile> file(new InputFile());
  file->path_ = path;
  file->name_ = path.string();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer forever; it is refused below as not a regular file. (The flag
  // changes nothing for reads of a regular file.)
  file->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file->fd_ < 0) {
    throw system_error("cannot open").in_file(file->name_);
  }
  struct stat st {};
  if (::fstat(file->fd_, &st) != 0) {
    throw system_error("cannot stat").in_file(file->name_);
  }
  if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::kNotCheckpoint, "is a directory, not a checkpoint file")
        .in_file(file->name_);
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kNotCheckpoint, "not a regular file").in_file(file->name_);
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  file->stamp_ = stamp_of(st);
  if (file->size_ > 0 && file->size_ <= kReadWholeBelow) {
    // Small files are read: mapping and unmapping costs page-table work and,
    // in a process converting several files at once, TLB shootdowns that
    // stall every thread. Larger ones are read in windows (see the header).
    file->memory_.resize(file->size_);
    file->read_fd(0, std::span(reinterpret_cast<std::byte*>(file->memory_.data()), file->size_), "file");
    file->base_ = reinterpret_cast<const std::byte*>(file->memory_.data());
  }
  return file;
}

std::shared_ptr<const InputFile> InputFile::slice(std::shared_ptr<const InputFile> whole, uint64_t offset,
                                                 uint64_t length, std::string name) {
  whole->check_range(offset, length, name);
  std::shared_ptr<InputFile> file(new InputFile());
  file->name_ = std::move(name);
  file->path_ = whole->path_;
  file->size_ = length;
  if (whole->memory() != nullptr) file->base_ = whole->memory() + offset;
  file->slice_offset_ = offset;
  file->whole_ = std::move(whole);
  return file;
}

std::shared_ptr<const InputFile> InputFile::from_memory(std::string bytes, std::string name) {
  std::shared_ptr<InputFile> file(new InputFile());
  file->memory_ = std::move(bytes);
  file->name_ = std::move(name);
  file->path_ = file->name_;
  file->size_ = file->memory_.size();
  file->base_ = reinterpret_cast<const std::byte*>(file->memory_.data());
  return file;
}

InputFile::~InputFile() {
  if (shared_ != nullptr && !whole_) ::munmap(const_cast<std::byte*>(shared_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::check_range(uint64_t offset, uint64_t length, std::string_view what) const {
  if (offset > size_ || length > size_ - offset) {
    throw Error(ErrorKind::kCorrupt, std::string(what) + " at offset " + hex_offset(offset) + " (" +
                                         std::to_string(length) + " bytes) extends past the end of the file (" +
                                         std::to_string(size_) + " bytes); the file is truncated or damaged")
        .in_file(name_);
  }
}

FileBytes InputFile::read_bytes(uint64_t offset, uint64_t length, std::string_view what) const {
  check_range(offset, length, what);
  if (memory() != nullptr) return FileBytes::view({memory() + offset, static_cast<size_t>(length)});
  std::vector<std::byte> out(static_cast<size_t>(length));
  read(offset, out, what);
  return FileBytes::owned(std::move(out));
}

FileBytes InputFile::head(uint64_t n) const { return read_bytes(0, std::min(n, size_), "file start"); }

MappedRange InputFile::map_range(uint64_t offset, uint64_t length, std::string_view what) const {
  check_range(offset, length, what);
  MappedRange out;
  if (memory() != nullptr || length == 0) {
    out.span_ = {memory() != nullptr ? memory() + offset : nullptr, static_cast<size_t>(length)};
    return out;
  }
  if (whole_) return whole_->map_range(slice_offset_ + offset, length, what);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t mapped = static_cast<size_t>(offset - start + length);
  void* base = ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, fd_, static_cast<off_t>(start));
  if (base == MAP_FAILED) {
    throw system_error("cannot map").in_file(name_).at(std::string(what));
  }
  out.mapping_ = base;
  out.mapped_size_ = mapped;
  out.span_ = {static_cast<const std::byte*>(base) + (offset - start), static_cast<size_t>(length)};
  out.guard_ = MappingGuard(base, mapped);
  out.file_ = name_;
  out.what_ = what;
  return out;
}

void InputFile::read(uint64_t offset, std::span<std::byte> out, std::string_view what) const {
  check_range(offset, out.size(), what);
  if (memory() != nullptr) {
    std::memcpy(out.data(), memory() + offset, out.size());
    return;
  }
  if (whole_) {
    whole_->read(slice_offset_ + offset, out, what);
    return;
  }
  read_fd(offset, out, what);
}

void InputFile::read_fd(uint64_t offset, std::span<std::byte> out, std::string_view what) const {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error("read failed")
          .in_file(name_)
          .at(std::string(what));
    }
    if (n == 0) throw file_shrank_while_read().in_file(name_).at(std::string(what));  // the range was checked
    done += static_cast<size_t>(n);
  }
}

const std::byte* InputFile::shared_mapping() const {
  if (memory() != nullptr) return memory();
  if (size_ == 0) return nullptr;
  if (whole_) return whole_->shared_mapping() + slice_offset_;
  std::lock_guard<std::mutex> lock(mapping_mutex_);
  if (shared_ == nullptr) {
    void* base = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) throw system_error("cannot map").in_file(name_);
    shared_ = static_cast<const std::byte*>(base);
  }
  return shared_;
}

std::shared_ptr<std::byte> InputFile::private_mapping() const {
  if (fd_ < 0 || size_ == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mapping_mutex_);
  if (std::shared_ptr<std::byte> existing = private_.lock()) return existing;
  void* base = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
  if (base == MAP_FAILED) throw system_error("cannot map").in_file(name_);
  const size_t size = size_;
  std::shared_ptr<std::byte> mapping(static_cast<std::byte*>(base), [size](std::byte* p) { ::munmap(p, size); });
  private_ = mapping;
  return mapping;
}

void InputFile::advise_sequential(uint64_t offset, uint64_t length) const {
  if (whole_) {
    whole_->advise_sequential(slice_offset_ + offset, length);
    return;
  }
  if (fd_ < 0) return;
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_SEQUENTIAL);
}

FileBytes FileBytes::view(std::span<const std::byte> bytes) {
  FileBytes out;
  out.span_ = bytes;
  return out;
}

FileBytes FileBytes::owned(std::vector<std::byte> bytes) {
  FileBytes out;
  out.owned_ = std::move(bytes);
  out.span_ = out.owned_;
  return out;
}

MappedRange::~MappedRange() { unmap(); }

MappedRange::MappedRange(MappedRange&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_size_(std::exchange(other.mapped_size_, 0)),
      span_(std::exchange(other.span_, {})),
      guard_(std::move(other.guard_)),
      file_(std::move(other.file_)),
      what_(std::move(other.what_)) {}

MappedRange& MappedRange::operator=(MappedRange&& other) noexcept {
  if (this != &other) {
    unmap();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_size_ = std::exchange(other.mapped_size_, 0);
    span_ = std::exchange(other.span_, {});
    guard_ = std::move(other.guard_);
    file_ = std::move(other.file_);
    what_ = std::move(other.what_);
  }
  return *this;
}

void MappedRange::unmap() {
  guard_ = MappingGuard();  // unguarded before the range is unmapped
  if (mapping_ != nullptr) ::munmap(mapping_, mapped_size_);
  mapping_ = nullptr;
}

void MappedRange::check_intact() const {
  if (guard_.lost()) throw file_shrank_while_read().in_file(file_).at(what_);
}

}  // namespace ckptfix
