#include "verify/early_reparse.h"

#include <system_error>
#include <utility>
#include <vector>

#include "formats/torch_zip_parts.h"
#include "io/input_file.h"
#include "zip/crc32.h"

namespace ckptfix {

EarlyReparse::EarlyReparse(std::filesystem::path path, const ReadLimits& limits)
    : path_(std::move(path)), limits_(limits) {}

void EarlyReparse::start(const WrittenRecord& record) {
  if (parse_) return;  // one pickle per file
  try {
    parse_ = thread_.run([this, record]() -> std::unique_ptr<PreparsedPickle> {
      try {
        // Through a descriptor of its own, so from the file (the page
        // cache), not from the writer's memory.
        const auto file = InputFile::open(path_);
        std::vector<std::byte> bytes(record.size);
        file->read(record.data_offset, bytes, "data.pkl");
        if (crc32_update(0, bytes) != record.crc32) return nullptr;
        return preparse_pickle(bytes, record.name, record.data_offset, record.crc32, limits_, file->size());
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
