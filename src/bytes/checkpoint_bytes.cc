// The members of Checkpoint that read a storage's bytes. They live here, in
// the byte layer, so that model/ knows nothing of how bytes are read
// (inflated, byte-swapped, mapped).
#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "bytes/storage_reader.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

void Checkpoint::read_storage(size_t storage, uint64_t offset, Span<std::byte> out) const {
  error_boundary(file_name(), [&] {
    if (storage >= impl_->storages.size()) throw Error(ErrorKind::kInvalidArgument, "no storage " + std::to_string(storage));
    const Storage& s = impl_->storages[storage];
    StorageReader reader(impl_->input_of(s), s);
    reader.skip(offset);
    if (reader.read(out) != out.size()) throw Error(ErrorKind::kInvalidArgument, "read past the end of storage '" + s.key + "'");
  });
}

Span<const std::byte> Checkpoint::map_storage(size_t storage) const {
  const Storage& s = impl_->storages.at(storage);
  if (s.source.encoding == StorageSource::Encoding::kMemory) return {s.source.memory, static_cast<size_t>(s.nbytes)};
  if (s.source.encoding != StorageSource::Encoding::kStored || s.big_endian) return {};
  return error_boundary(file_name(), [&]() -> std::span<const std::byte> {
    const InputFile& input = impl_->input_of(s);
    input.check_range(s.source.offset, s.nbytes, s.source.record);
    if (s.nbytes == 0) return {};
    // A whole-file mapping made for such views; only the pages the caller reads come in.
    return {input.shared_mapping() + s.source.offset, static_cast<size_t>(s.nbytes)};
  });
}

std::string Checkpoint::storage_file(size_t storage) const {
  const Storage& s = impl_->storages.at(storage);
  const StorageSource::Encoding e = s.source.encoding;
  if (e == StorageSource::Encoding::kMemory || e == StorageSource::Encoding::kGathered) return "";
  const InputFile& input = impl_->input_of(s);
  // Offsets are into a file of its own only when it has one: not for
  // in-memory inputs, nor slices (a zip inside a .distcp file).
  return input.fd() < 0 ? "" : input.path().string();
}

std::shared_ptr<const void> Checkpoint::mapping_owner() const {
  if (impl_->shards.empty()) return impl_->file;
  auto all = std::make_shared<std::vector<std::shared_ptr<const InputFile>>>(impl_->shards);
  all->push_back(impl_->file);
  return all;
}

Checkpoint::PrivateBytes Checkpoint::map_storage_private(size_t storage) const {
  const Storage& s = impl_->storages.at(storage);
  if (s.source.encoding != StorageSource::Encoding::kStored || s.big_endian || s.nbytes == 0) return {};
  return error_boundary(file_name(), [&]() -> PrivateBytes {
    const InputFile& input = impl_->input_of(s);
    input.check_range(s.source.offset, s.nbytes, s.source.record);
    std::shared_ptr<std::byte> mapping = input.private_mapping();
    if (!mapping) return {};
    return {std::span(mapping.get() + s.source.offset, static_cast<size_t>(s.nbytes)), mapping};
  });
}

}  // namespace ckptfix
