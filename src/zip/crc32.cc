#include "zip/crc32.h"

#include <libdeflate.h>

namespace ckptfix {

uint32_t crc32_update(uint32_t crc, std::span<const std::byte> data) {
  return libdeflate_crc32(crc, data.data(), data.size());
}

}  // namespace ckptfix
