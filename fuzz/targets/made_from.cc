// The rerun record (src/rerun/made_from.h): an output's extended attribute,
// which anyone who can write the output can set. Invariants: a record that
// parses names every written file by a plain name (never a path: a rerun
// stats them in the record's own directory only), and writing it out and
// parsing it again gives the same record.
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "rerun/made_from.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {

void made_from(const uint8_t* data, size_t size) {
  expect_clean([&] {
    const std::optional<MadeFromRecord> record =
        parse_record(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!record) return;
    for (const WroteStamp& w : record->wrote) {
      if (w.name.empty() || w.name == "." || w.name == ".." || w.name.find('/') != std::string::npos) std::abort();
    }
    const std::optional<MadeFromRecord> again = parse_record(record_text(*record));
    if (!again || again->recipe != record->recipe || again->input != record->input ||
        again->read.size() != record->read.size() || again->wrote.size() != record->wrote.size()) {
      std::abort();
    }
    for (size_t i = 0; i < record->read.size(); ++i) {
      const ReadStamp &a = record->read[i], &b = again->read[i];
      if (a.path != b.path || a.inode != b.inode || a.size != b.size || a.changed_ns != b.changed_ns) std::abort();
    }
    for (size_t i = 0; i < record->wrote.size(); ++i) {
      const WroteStamp &a = record->wrote[i], &b = again->wrote[i];
      if (a.name != b.name || a.inode != b.inode || a.size != b.size || a.modified_ns != b.modified_ns) std::abort();
    }
  });
}

}  // namespace ckptfix::fuzz
