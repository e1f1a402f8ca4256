#include "io/mapped_window.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ckptfix/error.h"
#include "io/mapping_guard.h"
#include "io/system_calls.h"

namespace ckptfix {

void for_each_mapped(int fd, const std::string& file, uint64_t offset, uint64_t size, const std::string& what,
                     const std::function<void(std::span<const std::byte>)>& visit) {
  auto fail = [&](Error e) {
    if (!file.empty()) e.in_file(file);
    return e.at(what);
  };
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (uint64_t done = 0; done < size;) {
    const uint64_t start = offset + done;
    const uint64_t aligned = start / page * page;
    const uint64_t length = std::min(kMappedWindow, size - done);
    const uint64_t mapped = start - aligned + length;
    // Not MAP_POPULATE: the first touches fault the pages in instead, a large
    // folio (or 64 KiB) a fault, under the mapping's own lock. Populating took
    // the process's mmap lock for the whole window, which a second thread's
    // mmap or munmap then waited for; an unverified cast was 8 % slower
    // with it (docs/performance.md).
    void* base = ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(aligned));
    if (base == MAP_FAILED) {
      throw fail(system_error("cannot map for reading"));
    }
    MappingGuard guard(base, mapped);
    // Unguards and unmaps the window; throws if the file lost bytes of it
    // meanwhile (that, not what a visit made of the zeros, is the error).
    auto unmap = [&] {
      const bool lost = guard.lost();
      guard = MappingGuard();  // unguarded before the range is unmapped
      ::munmap(base, mapped);
      if (lost) throw fail(file_shrank_while_read());
    };
    try {
      visit({static_cast<const std::byte*>(base) + (start - aligned), static_cast<size_t>(length)});
    } catch (...) {
      unmap();
      throw;
    }
    unmap();
    done += length;
  }
}

}  // namespace ckptfix
