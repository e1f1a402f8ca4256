// `.data/serialization_id`: the 40 digits torch >= 2.1 writes as the last
// record of every archive, computed the way its writer computes them
// (caffe2/serialize/inline_container.cc, PyTorchStreamWriter::
// writeSerializationId), so that an unchanged checkpoint keeps its id and a
// changed one gets the id torch would give the same bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zip/zip_writer.h"

namespace ckptfix {

/// The id of an archive whose records (all but the id itself, in the order
/// written) are `records`, named "<root>/<name>"; `root` is "<root>/".
///
/// torch's id is two 20-digit numbers:
///  1. c10::hash_combine over std::hash of every record name (without the
///     root), in the iteration order of the std::unordered_set<std::string>
///     the writer inserted them into, in writing order;
///  2. c10::hash_combine over the CRC-32 of every data descriptor written,
///     in order. torch picks descriptors out of the write stream by their
///     signature, so a record whose name or data (written in one piece)
///     starts with "PK\7\8" and has 8 bytes or more contributes the 4 bytes
///     after that signature too; records of 0 bytes have no descriptor.
/// Part 1 depends on libstdc++'s std::hash and hash table, which torch's
/// Linux builds and ckptfix share; ckptfix built on another standard library
/// would compute different digits (torch's loaders never check them).
std::string torch_serialization_id(const std::vector<WrittenRecord>& records, std::string_view root);

}  // namespace ckptfix
