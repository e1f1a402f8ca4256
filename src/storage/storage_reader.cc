#include "storage/storage_reader.h"

#include <algorithm>
#include <vector>

#include "ckptfix/error.h"

namespace ckptfix {

void byteswap_in_place(std::span<std::byte> data, uint32_t unit) {
  if (unit <= 1) return;
  for (size_t i = 0; i + unit <= data.size(); i += unit) std::reverse(data.begin() + i, data.begin() + i + unit);
}

StorageReader::StorageReader(const InputFile& file, const Storage& storage) : file_(file), storage_(storage) {
  if (storage.source.encoding == StorageSource::Encoding::kDeflated) {
    inflater_ = std::make_unique<Inflater>(file.view(storage.source.offset, storage.source.length, storage.source.record));
  }
}

uint64_t StorageReader::read(std::span<std::byte> out) {
  const uint64_t n = std::min<uint64_t>(out.size(), remaining());
  if (n == 0) return 0;
  auto dst = out.first(n);
  try {
    if (inflater_) {
      if (inflater_->read(dst) != n) {
        throw Error(ErrorKind::kCorrupt, "deflated data is shorter than the storage's " +
                                             std::to_string(storage_.nbytes) + " bytes");
      }
    } else {
      file_.read(storage_.source.offset + position_, dst, storage_.source.record);
    }
  } catch (Error& e) {
    e.in_file(file_.name()).at(storage_.source.record);
    throw;
  }
  if (storage_.big_endian) byteswap_in_place(dst, swap_unit(storage_.dtype));
  position_ += n;
  return n;
}

void StorageReader::skip(uint64_t n) {
  n = std::min(n, remaining());
  if (!inflater_) {
    position_ += n;
    return;
  }
  std::vector<std::byte> scratch(std::min<uint64_t>(n, 1 << 20));
  while (n > 0) {
    const uint64_t step = std::min<uint64_t>(n, scratch.size());
    const uint64_t got = read(std::span(scratch).first(step));
    if (got == 0) break;
    n -= got;
  }
}

}  // namespace ckptfix
