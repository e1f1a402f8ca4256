// A mapped file can shrink while it is read: another program truncates or
// rewrites it (a training run's torch.save opens its file with "wb", which
// truncates it first). Reading a mapped page past the file's new end then
// raises SIGBUS, and by default the process dies of it ("Bus error"),
// leaving its temporary output behind.
//
// ckptfix's own short-lived mappings of files (bounded windows of bulk bytes,
// a pickle parsed where it lies) are guarded: a SIGBUS inside a guarded range
// maps a page of zeros where the lost page was, so that the read goes on,
// and marks the range. Whoever reads the range asks lost() when done and
// reports the file as changed; nothing read from it after the fault is used.
// A fault anywhere else goes to the handler that was installed before the
// first guard (by default the process dies, as it would without ckptfix).
// The zero-copy mappings a caller keeps (Checkpoint::map_storage, the
// LibTorch loader's tensors) are not guarded: like torch.load(mmap=True),
// they are only as stable as the file.
//
// The handler is installed once, with the first guard. At most kMaxGuarded
// ranges are guarded at a time (one per thread reading is the usual
// number); a range beyond that is read unguarded, as before.
#pragma once

#include <cstddef>

namespace ckptfix {

class MappingGuard {
 public:
  static constexpr size_t kMaxGuarded = 256;

  /// Guards nothing.
  MappingGuard() = default;
  /// Guards the page-aligned mapping [base, base + length) until the guard goes.
  MappingGuard(const void* base, size_t length);
  ~MappingGuard();
  MappingGuard(MappingGuard&& other) noexcept;
  MappingGuard& operator=(MappingGuard&& other) noexcept;
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  /// True once a read of the range found a page past the file's end (or one
  /// the kernel could not read): zeros were read there instead.
  bool lost() const;
  /// Whether the range is guarded (false when kMaxGuarded were in use).
  bool guarding() const { return slot_ >= 0; }

 private:
  void release();
  int slot_ = -1;
};

}  // namespace ckptfix
