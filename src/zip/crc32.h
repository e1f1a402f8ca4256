// CRC-32 (zip's polynomial). libdeflate's implementation uses PCLMULQDQ/AVX
// and runs at about 14 GB/s here against zlib's 4 GB/s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ckptfix {

/// Continues a CRC-32 over `data` (start with 0).
uint32_t crc32_update(uint32_t crc, std::span<const std::byte> data);

}  // namespace ckptfix
