#include "formats/zip_salvage.h"

#include <unordered_map>

#include "ckptfix/error.h"
#include "formats/torch_zip_parts.h"
#include "io/bytes.h"
#include "model/prune_lost.h"
#include "model/torch_objects.h"
#include "zip/zip_records.h"

namespace ckptfix {
namespace {

constexpr uint64_t kMaxSmallRecord = 4096;

// Bytes each storage key needs, from the persistent ids of the parsed pickle.
std::unordered_map<std::string, uint64_t> storage_sizes(CheckpointImpl& impl) {
  std::unordered_map<std::string, uint64_t> sizes;
  impl.graph.for_each([&](Value& v) {
    if (v.kind != ValueKind::kPersistentId || v.pid() == nullptr) return;
    const std::optional<StoragePid> pid = parse_storage_pid(*v.pid());
    if (!pid) return;
    if (const auto bytes = checked_mul(pid->numel, storage_element_size(*pid))) sizes.emplace(pid->key, *bytes);
  });
  return sizes;
}

std::string root_of(const std::string& record) {
  const auto slash = record.find('/');
  return slash == std::string::npos ? std::string() : record.substr(0, slash + 1);
}

}  // namespace

void salvage_zip_checkpoint(CheckpointImpl& impl) {
  SalvageLog& log = *impl.salvage;
  const InputFile& file = *impl.file;
  impl.format = CheckpointFormat::kZip;

  // The local-header scan needs the sizes torch writes only after the data:
  // data.pkl's is the length of the pickle up to its STOP (parsed here, as
  // it is met, never executed), a storage's is what its persistent id says.
  std::string root;
  bool pickle_parsed = false;
  std::string pickle_error;
  bool pickle_cut = false;  // data.pkl ran out of bytes where the file ends
  std::unordered_map<std::string, uint64_t> sizes;
  const auto parse_pickle = [&](const std::string& name, uint64_t offset, uint64_t length) -> std::optional<uint64_t> {
    pickle_parsed = true;
    const MappedRange mapped = file.map_range(offset, length, name);
    try {
      const uint64_t parsed = parse_object_pickle(impl, mapped.span(), name);
      mapped.check_intact();
      sizes = storage_sizes(impl);
      return parsed;
    } catch (const Error& e) {
      mapped.check_intact();  // a file that shrank meanwhile is not salvaged from zeros
      if (e.kind() != ErrorKind::kCorrupt) throw;  // a gadget, a limit: as when reading
      pickle_cut = is_truncated_pickle(e) && offset + length == file.size();
      pickle_error = e.location().empty() ? e.message() : e.location() + ": " + e.message();
      impl.root = nullptr;
      return std::nullopt;
    }
  };
  const auto size_of = [&](const std::string& name, uint64_t data_offset) -> std::optional<uint64_t> {
    if (root.empty()) root = root_of(name);
    if (root.empty()) return std::nullopt;
    if (name == root + "data.pkl" && !pickle_parsed) {
      return parse_pickle(name, data_offset, std::min(file.size() - data_offset, impl.limits.max_pickle_bytes));
    }
    if (name.compare(0, root.size() + 5, root + "data/") == 0) {
      const auto it = sizes.find(name.substr(root.size() + 5));
      if (it != sizes.end()) return it->second;
    }
    return std::nullopt;
  };
  const FoundRecords found = find_zip_records(impl.file, size_of, zip_limits_of(impl.limits));
  log.found_by = found.found_by;
  if (found.records.empty()) throw Error(ErrorKind::kCorrupt, "the zip archive holds no record that can be read");

  // The archive's root, as torch takes it: from the first record.
  root = root_of(found.records.front().name);
  if (root.empty()) {
    throw Error(ErrorKind::kNotCheckpoint, "zip archive's first record '" + found.records.front().name +
                                               "' is not in a subdirectory, so this is not a torch checkpoint");
  }
  impl.archive_root = root.substr(0, root.size() - 1);
  refuse_torchscript(
      [&](const std::string& prefix) {
        for (const FoundRecord& r : found.records) {
          if (r.name.compare(0, prefix.size(), prefix) == 0) return true;
        }
        return false;
      },
      root);

  const FoundRecord* pickle = found.find(root + "data.pkl");
  const std::string nothing = "nothing can be recovered: ";
  if (pickle == nullptr) {
    throw Error(ErrorKind::kCorrupt, nothing + "the archive has no intact record '" + root +
                                         "data.pkl', which describes every tensor");
  }
  if (!pickle->intact) {
    if (pickle_cut) {
      throw Error(ErrorKind::kCorrupt, nothing + "'" + pickle->name + "', which describes every tensor, is cut at offset " +
                                           hex_offset(file.size()) + " (the file ends inside it)");
    }
    const bool cut = pickle->problem.rfind("cut", 0) == 0;
    throw Error(ErrorKind::kCorrupt, nothing + "'" + pickle->name + "', which describes every tensor, is " +
                                         (cut ? pickle->problem : "damaged (" + (pickle_error.empty() ? pickle->problem : pickle_error) + ")"));
  }
  if (!pickle_parsed) {  // found in the central directory: parsed now, the record being intact
    if (pickle->method == 0) {
      if (pickle->size > impl.limits.max_pickle_bytes) {
        throw Error(ErrorKind::kLimit, "data.pkl is " + std::to_string(pickle->size) +
                                           " bytes (limit max_pickle_bytes = " +
                                           std::to_string(impl.limits.max_pickle_bytes) + ")")
            .at(pickle->name);
      }
      parse_pickle(pickle->name, pickle->data_offset, pickle->size);
    } else {
      const std::string bytes = read_found_record(file, *pickle, impl.limits.max_pickle_bytes);
      try {
        parse_object_pickle(impl, as_bytes(bytes), pickle->name);
        sizes = storage_sizes(impl);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kCorrupt) throw;
        pickle_error = e.message();
      }
    }
  }
  if (impl.root == nullptr) {
    throw Error(ErrorKind::kCorrupt, nothing + "'" + pickle->name + "', which describes every tensor, does not parse (" +
                                         pickle_error + ")");
  }

  // Records torch writes beside data.pkl, taken when intact; torch's
  // defaults when lost: little-endian, and the layout of the release that
  // wrote the file (a file with a byteorder record is from torch >= 2.1,
  // which also writes .data/serialization_id, at the very end, where a cut
  // loses it).
  read_torch_records(impl, root, [&](const std::string& name) -> std::optional<std::string> {
    const FoundRecord* r = found.find(name);
    if (r == nullptr) return std::nullopt;
    if (!r->intact) {
      log.notes.push_back("record '" + name + "' is damaged (" + r->problem + "); torch's default is used instead");
      return std::nullopt;
    }
    return read_found_record(file, *r, kMaxSmallRecord);
  });
  if (found.find(root + "byteorder") != nullptr) impl.style.serialization_id = true;

  // Each storage: kept only when its record is there, whole, of the size
  // the pickle says and matching its CRC-32.
  for (const auto& [key, bytes] : sizes) {
    const FoundRecord* r = found.find(root + "data/" + key);
    std::string reason;
    if (r == nullptr) {
      reason = found.found_by == "central directory" ? "its record '" + root + "data/" + key + "' is missing from the archive"
               : !found.stop_reason.empty()        ? found.stop_reason
                                                   : "cut at offset " + hex_offset(file.size()) +
                                                         " (the file ends before its record)";
    } else if (!r->intact) {
      reason = r->problem;
    } else if (r->uncompressed != bytes) {
      reason = "its record holds " + std::to_string(r->uncompressed) + " bytes, the storage needs " + std::to_string(bytes);
    }
    if (!reason.empty()) log.lost_storages.emplace(key, reason);
  }
  log.storage_record_prefix = root + "data/";
  prune_lost_tensors(impl);

  build_storage_table(impl, [&](const std::string& key) {
    const FoundRecord* found_record = found.find(root + "data/" + key);
    if (found_record == nullptr) {  // only a storage whose size overflows is not checked above
      throw Error(ErrorKind::kCorrupt, "storage '" + key + "' has no record in the archive");
    }
    const FoundRecord& r = *found_record;
    LocatedData located;
    located.source.encoding = r.method == 0 ? StorageSource::Encoding::kStored : StorageSource::Encoding::kDeflated;
    located.source.offset = r.data_offset;
    located.source.length = r.size;
    located.source.crc32 = r.crc;
    located.source.record = r.name;
    located.available = r.uncompressed;
    return located;
  });
  build_tensor_table(impl);
}

}  // namespace ckptfix
