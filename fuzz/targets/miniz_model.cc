#include "targets/miniz_model.h"

#include <algorithm>
#include <cstring>

namespace ckptfix::fuzz {
namespace {

uint64_t le(std::string_view b, uint64_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<uint64_t>(i)]);
  return v;
}

}  // namespace

std::optional<std::vector<ModelEntry>> miniz_read(std::string_view b) {
  const uint64_t size = b.size();
  if (size < 22) return std::nullopt;
  constexpr uint64_t kEndSearch = 4096 + 16 * 4093;
  const uint64_t from = size > kEndSearch ? size - kEndSearch : 0;
  uint64_t eocd = UINT64_MAX;
  for (uint64_t i = size - 22 + 1; i-- > from;) {
    if (le(b, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == UINT64_MAX) return std::nullopt;
  uint64_t count = le(b, eocd + 10, 2), cd_size = le(b, eocd + 12, 4), cd_offset = le(b, eocd + 16, 4);
  if (eocd >= 20 + 56 && le(b, eocd - 20, 4) == 0x07064b50) {
    const uint64_t z64 = le(b, eocd - 20 + 8, 8);
    if (z64 <= size - 56 && le(b, z64, 4) == 0x06064b50) {
      count = le(b, z64 + 32, 8);
      cd_size = le(b, z64 + 40, 8);
      cd_offset = le(b, z64 + 48, 8);
    }
  }
  if (cd_offset > size || cd_size > size - cd_offset) return std::nullopt;
  std::vector<ModelEntry> out;
  uint64_t pos = cd_offset;
  for (uint64_t k = 0; k < count; ++k) {
    if (pos + 46 > cd_offset + cd_size || le(b, pos, 4) != 0x02014b50) return std::nullopt;
    ModelEntry e;
    e.compressed_size = le(b, pos + 20, 4);
    e.size = le(b, pos + 24, 4);
    e.header_offset = le(b, pos + 42, 4);
    const uint64_t name_len = le(b, pos + 28, 2), extra_len = le(b, pos + 30, 2), comment_len = le(b, pos + 32, 2);
    const uint64_t total = 46 + name_len + extra_len + comment_len;
    if (pos + total > cd_offset + cd_size) return std::nullopt;
    e.name.assign(b.substr(pos + 46, name_len));
    const bool need_size = e.size == 0xFFFFFFFF, need_csize = e.compressed_size == 0xFFFFFFFF,
               need_offset = e.header_offset == 0xFFFFFFFF;
    if (need_size || need_csize || need_offset) {
      for (uint64_t x = 0; x + 4 <= extra_len;) {  // the first zip64 field, its members bounded by its size
        const uint64_t at = pos + 46 + name_len + x;
        const uint64_t id = le(b, at, 2), len = le(b, at + 2, 2);
        if (x + 4 + len > extra_len) return std::nullopt;
        if (id == 1) {
          uint64_t used = 0;
          auto next = [&](uint64_t& field) {
            if (used + 8 > len) return false;
            field = le(b, at + 4 + used, 8);
            used += 8;
            return true;
          };
          if (need_size && !next(e.size)) return std::nullopt;
          if (need_csize && !next(e.compressed_size)) return std::nullopt;
          if (need_offset && !next(e.header_offset)) return std::nullopt;
          break;
        }
        x += 4 + len;
      }
    }
    if (e.header_offset <= size - 30 && le(b, e.header_offset, 4) == 0x04034b50) {
      e.data_offset = e.header_offset + 30 + le(b, e.header_offset + 26, 2) + le(b, e.header_offset + 28, 2);
      e.data_known = true;
    }
    out.push_back(std::move(e));
    pos += total;
  }
  return out;
}

}  // namespace ckptfix::fuzz
