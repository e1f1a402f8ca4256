// The parts of reading a torch zip checkpoint that do not depend on how its
// records were found: shared by the reader (formats/zip_format.cc), which
// finds them in the central directory, and salvage (salvage/salvage.cc),
// which may find them from their local headers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "model/checkpoint_impl.h"
#include "pickle/unpickler.h"

namespace ckptfix {

/// The limits a torch zip is read with (impl.limits, as ZipReader takes them).
ZipLimits zip_limits_of(const ReadLimits& limits);

/// A small record's bytes (at most 4 KiB), or nullopt when the archive has
/// no such record (or, for salvage, none that is intact).
using SmallRecordReader = std::function<std::optional<std::string>(const std::string& name)>;

/// Takes byteorder, .format_version, .storage_alignment and
/// .data/serialization_id of the archive under `root` ("archive/") into
/// impl.big_endian and impl.style. Throws Error(kCorrupt) for a byteorder
/// that is neither little nor big.
void read_torch_records(CheckpointImpl& impl, const std::string& root, const SmallRecordReader& small);

/// Parses data.pkl (`bytes`, of record `record`) into impl's graph, root,
/// protocol and opcodes, with impl's limits and global checks; errors name
/// the record. Returns the pickle's length (up to its STOP).
uint64_t parse_object_pickle(CheckpointImpl& impl, std::span<const std::byte> bytes, const std::string& record,
                             UnpickleOptions options = {});

/// Parses the bytes of a data.pkl just written (`record` as the zip writer
/// wrote it) as parse_object_pickle would within `limits` for a file of
/// `file_size` bytes, keeping the parse and the globals met for the re-read
/// of the finished file (model/preparsed_pickle.h), in `graph` (empty, or
/// given room ahead: ValueGraph::add_room; what room is left is freed).
/// Throws as unpickle.
std::unique_ptr<PreparsedPickle> preparse_pickle(std::span<const std::byte> bytes, const std::string& record,
                                                 uint64_t data_offset, uint32_t crc32, const ReadLimits& limits,
                                                 uint64_t file_size, ValueGraph graph = ValueGraph());

/// Takes impl.preparsed as the parse of `pickle` when it is the parse of
/// that very record, read as the reader would read it; false: parse it.
bool adopt_preparsed(CheckpointImpl& impl, const ZipEntry& pickle);

/// Throws Error(kUnsupported) for a TorchScript archive: one with a record
/// named `root`constants.pkl or under `root`code/ (`has_record(prefix)`).
void refuse_torchscript(const std::function<bool(const std::string& prefix)>& has_record, const std::string& root);

}  // namespace ckptfix
