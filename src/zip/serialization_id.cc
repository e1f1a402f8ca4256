#include "zip/serialization_id.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "zip/zip_signatures.h"

namespace ckptfix {
namespace {

// c10/util/hash.h
uint64_t hash_combine(uint64_t seed, uint64_t value) {
  return seed ^ (value + 0x9e3779b9 + (seed << 6u) + (seed >> 2u));
}

uint32_t le32(const std::byte* p) {
  return std::to_integer<uint32_t>(p[0]) | std::to_integer<uint32_t>(p[1]) << 8 |
         std::to_integer<uint32_t>(p[2]) << 16 | std::to_integer<uint32_t>(p[3]) << 24;
}

// A piece of the write stream that torch's ostream_write_func would take for
// a data descriptor: 8 bytes or more, starting with its signature.
void combine_if_descriptor_like(uint64_t& crc, const std::byte* head, size_t head_size, uint64_t size) {
  if (size >= 8 && head_size >= 8 && le32(head) == kZipDescriptorSig) crc = hash_combine(crc, le32(head + 4));
}

}  // namespace

std::string torch_serialization_id(const std::vector<WrittenRecord>& records, std::string_view root) {
  std::unordered_set<std::string> names;  // as torch's files_written_: the order matters
  uint64_t crc = 0;
  for (const WrittenRecord& r : records) {
    const std::string_view name = std::string_view(r.name).substr(root.size());
    combine_if_descriptor_like(crc, reinterpret_cast<const std::byte*>(r.name.data()), r.name.size(), r.name.size());
    combine_if_descriptor_like(crc, r.head.data(), r.head_size, r.size);
    if (r.size != 0) crc = hash_combine(crc, r.crc32);  // the data descriptor
    names.emplace(name);
  }
  uint64_t name_hash = 0;
  for (const std::string& name : names) name_hash = hash_combine(name_hash, std::hash<std::string>{}(name));
  char digits[41];
  std::snprintf(digits, sizeof digits, "%020llu%020llu", static_cast<unsigned long long>(name_hash),
                static_cast<unsigned long long>(crc));
  return digits;
}

}  // namespace ckptfix
