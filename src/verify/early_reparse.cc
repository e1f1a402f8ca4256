#include "verify/early_reparse.h"

#include <new>
#include <system_error>
#include <utility>
#include <vector>

#include "formats/torch_zip_parts.h"
#include "io/input_file.h"
#include "zip/crc32.h"

namespace ckptfix {

EarlyReparse::EarlyReparse(std::filesystem::path path, const ReadLimits& limits, size_t expected_values)
    : path_(std::move(path)), limits_(limits) {
  if (expected_values == 0) return;
  try {
    // Its future is not kept: the parse, queued after it, is what is waited for.
    thread_.run([this, expected_values] {
      try {
        while (room_.room() < expected_values && !started_.load(std::memory_order_relaxed)) room_.add_room();
      } catch (const std::bad_alloc&) {
        room_.release_room();  // the parse makes its values as it goes
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: nothing is made ahead, and start() finds none either.
  }
}

void EarlyReparse::start(const WrittenRecord& record) {
  if (parse_) return;  // one pickle per file
  started_.store(true, std::memory_order_relaxed);
  try {
    parse_ = thread_.run([this, record]() -> std::unique_ptr<PreparsedPickle> {
      try {
        // Through a descriptor of its own, so from the file (the page
        // cache), not from the writer's memory.
        const auto file = InputFile::open(path_);
        std::vector<std::byte> bytes(record.size);
        file->read(record.data_offset, bytes, "data.pkl");
        if (crc32_update(0, bytes) != record.crc32) return nullptr;
        return preparse_pickle(bytes, record.name, record.data_offset, record.crc32, limits_, file->size(),
                               std::move(room_));
      } catch (...) {
        return nullptr;  // the re-read parses the record and names what is wrong
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: the re-read parses it.
  }
}

std::unique_ptr<PreparsedPickle> EarlyReparse::take() {
  if (!parse_) return nullptr;
  std::unique_ptr<PreparsedPickle> parsed = parse_->get();
  parse_.reset();
  return parsed;
}

}  // namespace ckptfix
