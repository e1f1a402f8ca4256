#include "io/input_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfix/error.h"

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
    throw Error(ErrorKind::kIo, std::string("cannot open: ") + std::strerror(errno)).in_file(file->name_);
  }
  struct stat st {};
  if (::fstat(file->fd_, &st) != 0) {
    throw Error(ErrorKind::kIo, std::string("cannot stat: ") + std::strerror(errno)).in_file(file->name_);
  }
  if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::kNotCheckpoint, "is a directory, not a checkpoint file")
        .in_file(file->name_);
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kNotCheckpoint, "not a regular file").in_file(file->name_);
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  file->identity_ = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  if (file->size_ > 0 && file->size_ <= kReadWholeBelow) {
    // Small files are read: mapping and unmapping costs page-table work and,
    // in a process converting several files at once, TLB shootdowns that
    // stall every thread.
    file->memory_.resize(file->size_);
    file->read_fd(0, std::span(reinterpret_cast<std::byte*>(file->memory_.data()), file->size_), "file");
    file->base_ = reinterpret_cast<const std::byte*>(file->memory_.data());
  } else if (file->size_ > 0) {
    void* base = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, file->fd_, 0);
    if (base == MAP_FAILED) {
      throw Error(ErrorKind::kIo, std::string("cannot map: ") + std::strerror(errno)).in_file(file->name_);
    }
    file->base_ = static_cast<const std::byte*>(base);
  }
  return file;
}

std::shared_ptr<const InputFile> InputFile::slice(std::shared_ptr<const InputFile> whole, uint64_t offset,
                                                 uint64_t length, std::string name) {
  const std::span<const std::byte> bytes = whole->view(offset, length, name);
  std::shared_ptr<InputFile> file(new InputFile());
  file->name_ = std::move(name);
  file->path_ = whole->path_;
  file->size_ = length;
  file->base_ = bytes.data();
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
  if (base_ != nullptr && memory_.empty() && !whole_) ::munmap(const_cast<std::byte*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::span<const std::byte> InputFile::view(uint64_t offset, uint64_t length, std::string_view what) const {
  if (offset > size_ || length > size_ - offset) {
    throw Error(ErrorKind::kCorrupt, std::string(what) + " at offset " + hex_offset(offset) + " (" +
                                         std::to_string(length) + " bytes) extends past the end of the file (" +
                                         std::to_string(size_) + " bytes); the file is truncated or damaged")
        .in_file(name_);
  }
  return {base_ + offset, static_cast<size_t>(length)};
}

void InputFile::read(uint64_t offset, std::span<std::byte> out, std::string_view what) const {
  if (offset > size_ || out.size() > size_ - offset) {
    view(offset, out.size(), what);  // throws the truncation error
  }
  if (!memory_.empty() || fd_ < 0) {  // in memory
    std::memcpy(out.data(), base_ + offset, out.size());
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
      throw Error(ErrorKind::kIo, std::string("read failed: ") + std::strerror(errno))
          .in_file(name_)
          .at(std::string(what));
    }
    if (n == 0) {
      throw Error(ErrorKind::kCorrupt, "unexpected end of file (the file shrank while being read)")
          .in_file(name_)
          .at(std::string(what));
    }
    done += static_cast<size_t>(n);
  }
}

std::shared_ptr<std::byte> InputFile::private_mapping() const {
  if (fd_ < 0 || size_ == 0) return nullptr;
  std::lock_guard<std::mutex> lock(private_mutex_);
  if (std::shared_ptr<std::byte> existing = private_.lock()) return existing;
  void* base = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
  if (base == MAP_FAILED) throw Error(ErrorKind::kIo, std::string("cannot map: ") + std::strerror(errno)).in_file(name_);
  const size_t size = size_;
  std::shared_ptr<std::byte> mapping(static_cast<std::byte*>(base), [size](std::byte* p) { ::munmap(p, size); });
  private_ = mapping;
  return mapping;
}

void InputFile::advise_sequential(uint64_t offset, uint64_t length) const {
  if (fd_ < 0) return;
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_SEQUENTIAL);
}

}  // namespace ckptfix
