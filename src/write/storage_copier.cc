#include "write/storage_copier.h"

#include <algorithm>
#include <xxhash.h>

#include "ckptfix/error.h"
#include "storage/storage_reader.h"
#include "zip/crc32.h"
#include "zip/record_reader.h"

namespace ckptfix {

StorageCopier::StorageCopier(std::shared_ptr<const InputFile> input)
    : input_(std::move(input)), in_(kChunkBytes), out_(kChunkBytes * 4) {}

StorageCopier::Copied StorageCopier::copy(const Storage& storage, const std::function<void(std::span<const std::byte>)>& emit) {
  // The raw record is read here (not through StorageReader) so its CRC-32 can
  // be checked against the archive's even when the bytes are then swapped or cast.
  RecordReader reader = open_storage_record(*input_, storage);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset(hash.get());
  const DType from = storage.dtype;
  const DType to = storage.output_dtype();
  const bool convert = from != to;
  // Whole elements per chunk, so conversion and byte swapping never split one.
  const size_t in_size = element_size(from);
  const size_t out_size = element_size(to);
  const size_t chunk = kChunkBytes / 16 * 16;
  Copied copied;
  const uint64_t total = storage.nbytes / in_size;
  uint64_t first = 0;
  while (reader.remaining() > 0) {
    const uint64_t n = reader.read(std::span(in_).first(std::min<uint64_t>(chunk, reader.remaining())));
    const bool transformed = convert || storage.big_endian;
    if (transformed) copied.source_crc32 = crc32_update(copied.source_crc32, std::span(in_).first(n));
    if (storage.big_endian) byteswap_in_place(std::span(in_).first(n), swap_unit(storage.dtype));
    std::span<const std::byte> bytes(in_.data(), n);
    if (convert) {
      const size_t count = n / in_size;
      copied.stats += convert_elements(from, to, in_.data(), out_.data(), count, {first, total});
      first += count;
      bytes = std::span<const std::byte>(out_.data(), count * out_size);
    }
    XXH3_64bits_update(hash.get(), bytes.data(), bytes.size());
    emit(bytes);
  }
  copied.hash = XXH3_64bits_digest(hash.get());
  return copied;
}

}  // namespace ckptfix
