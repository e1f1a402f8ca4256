// The source stage of the byte pipeline: one storage's bytes out of the
// input file (stored, deflated, latin-1 text, or held in memory), front to back.
// StorageReader also puts them in the byte order every writer uses
// (little-endian), for readers that want elements (diff, tensor values).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/checkpoint_impl.h"
#include "io/input_file.h"
#include "zip/record_reader.h"

namespace ckptfix {

class StorageReader {
 public:
  StorageReader(const InputFile& file, const Storage& storage);

  /// Fills `out` with the next bytes; returns how many (fewer only at the
  /// end). For big-endian inputs `out.size()` must be a multiple of the
  /// element size (whole elements are swapped).
  uint64_t read(std::span<std::byte> out);
  /// Skips n bytes (for big-endian inputs a multiple of the element size).
  void skip(uint64_t n);
  uint64_t remaining() const { return record_.remaining(); }

 private:
  const Storage& storage_;
  RecordReader record_;
};

/// A whole storage's little-endian bytes at once, for gathering a strided
/// view's elements: little-endian bytes held in memory as they are, stored
/// ones mapped where they lie (and unmapped when this goes), anything else
/// (deflated, big-endian) read whole into memory and put in little-endian
/// order, the one case where memory grows with a storage's size.
class WholeStorage {
 public:
  WholeStorage(const InputFile& file, const Storage& storage);
  std::span<const std::byte> bytes() const { return bytes_; }
  /// Throws Error(kIo) if the file shrank while its mapped bytes were read
  /// (MappedRange::check_intact): call it when done with bytes().
  void check_intact() const { mapped_.check_intact(); }

 private:
  std::vector<std::byte> whole_;
  MappedRange mapped_;
  std::span<const std::byte> bytes_;
};

/// The CRC-32 of a storage's bytes as its input record holds them (inflated
/// when deflated): what the input's archive records for it, if it is intact.
uint32_t input_record_crc(const InputFile& file, const Storage& storage);

/// Refuses to re-save bit rot: Error(kCorrupt) naming the input's record
/// when `actual` (input_record_crc) is not the CRC-32 its archive records.
/// Storages whose source records no CRC pass.
void check_input_record(const InputFile& file, const Storage& storage, uint32_t actual);

/// A reader of a storage's raw record (file bytes, inflated, decoded, or memory),
/// before any byte swapping.
RecordReader open_storage_record(const InputFile& file, const Storage& storage);

}  // namespace ckptfix
