// The signatures of zip's structures (APPNOTE.TXT 4.3), and the fixed size
// of a local header, as every reader and writer of zips here spells them.
#pragma once

#include <cstdint>

namespace ckptfix {

constexpr uint32_t kZipLocalHeaderSig = 0x04034b50;
constexpr uint32_t kZipDescriptorSig = 0x08074b50;
constexpr uint32_t kZipCentralHeaderSig = 0x02014b50;
constexpr uint32_t kZipEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;

/// A local header's fixed part, before its name and extra field.
constexpr uint64_t kZipLocalHeaderSize = 30;

}  // namespace ckptfix
