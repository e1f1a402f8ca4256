#include "verify/torch_offsets.h"
#include "model/checkpoint_impl.h"

#include <string>

#include "ckptfix/error.h"
#include "io/bytes.h"

namespace ckptfix {
namespace {

constexpr uint64_t k32 = 0xFFFFFFFF;
constexpr uint64_t kMaxSmallRecord = 64;

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool decimal(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// caffe2/serialize/inline_container.cc detail::getOffset: where the data of
// a record whose local header starts at `cursor` begins.
uint64_t data_offset_after(uint64_t cursor, uint64_t full_name_size, uint64_t size, uint64_t alignment) {
  uint64_t start = cursor + 30 + full_name_size + 4;  // local header, name, FB id and length
  if (size >= k32 || cursor >= k32) {
    start += 4;  // zip64 extra id and length
    if (size >= k32) start += 16;
    if (cursor >= k32) start += 8;
  }
  return (start + alignment - 1) / alignment * alignment;
}

}  // namespace

void check_torch_computed_offsets(const Checkpoint& checkpoint, const ZipReader& zip) {
  const std::string root = checkpoint.archive_root() + "/";
  const ZipEntry* version = zip.find(root + ".format_version");
  if (version == nullptr) return;
  const std::string value = trimmed(zip.read_all(*version, kMaxSmallRecord));
  if (!decimal(value) || std::stoull(value) < 1) return;  // torch compares bytes: b"0" < b"1"
  uint64_t alignment = 64;
  if (const ZipEntry* a = zip.find(root + ".storage_alignment")) {
    const std::string text = trimmed(zip.read_all(*a, kMaxSmallRecord));
    if (!decimal(text) || std::stoull(text) == 0) {
      throw Error(ErrorKind::kCorrupt, "'" + text + "' is not an alignment; torch's int() of it fails").at(a->name);
    }
    alignment = std::stoull(text);
  }
  // Storages are in the order the pickle first uses them: torch's load order.
  uint64_t cursor = 0;  // where torch expects the next local header
  bool first = true;
  for (const Storage& s : impl_of(checkpoint).storages) {
    const std::string name = root + "data/" + s.key;
    const ZipEntry* entry = zip.find(name);
    if (entry == nullptr) continue;  // the reader has already refused this
    uint64_t expected, header;
    if (first) {
      if (s.key != "0") {
        throw Error(ErrorKind::kCorrupt, "the first storage the pickle uses has key '" + s.key +
                                             "', and torch >= 2.7 fails on it (\"expected key '0'\")")
            .at(name);
      }
      expected = entry->data_offset;
      header = entry->header_offset;
      first = false;
    } else {
      expected = data_offset_after(cursor, name.size(), s.nbytes, alignment);
      header = cursor;
    }
    if (expected != entry->data_offset) {
      throw Error(ErrorKind::kCorrupt, "torch >= 2.7 computes this storage at " + hex_offset(expected) +
                                           " (`.format_version` with calculate_storage_offsets) but it is at " +
                                           hex_offset(entry->data_offset) + ", so torch would read the wrong bytes")
          .at(name);
    }
    cursor = expected + s.nbytes;
    if (s.nbytes > 0) cursor += (header >= k32 || s.nbytes >= k32) ? 24 : 16;
  }
}

}  // namespace ckptfix
