// torch zip checkpoints: <root>/data.pkl, <root>/data/<key>, <root>/version,
// since torch 2.1 <root>/byteorder and <root>/.data/serialization_id, since
// torch 2.7 <root>/.format_version and <root>/.storage_alignment. See
// docs/format.md.
#include <algorithm>
#include <optional>
#include <utility>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "formats/torch_zip_parts.h"
#include "formats/zip_salvage.h"
#include "io/bytes.h"
#include "model/torch_objects.h"
#include "pickle/global_policy.h"
#include "pickle/unpickler.h"
#include "pickle/value_room.h"

namespace ckptfix {
namespace {

constexpr uint64_t kMaxSmallRecord = 4096;
// A str or bytes this large is left in the file when the caller asks for it
// (OpenOptions::leave_payloads_in_file): numpy arrays' bytes, not names.
constexpr uint64_t kPayloadInFileFrom = uint64_t{1} << 20;

// Whether a record's name starts with `prefix`, ignoring ASCII case as
// torch's reader finds records.
bool has_record_with_prefix(const ZipReader& zip, const std::string& prefix) {
  return std::any_of(zip.entries().begin(), zip.entries().end(), [&](const ZipEntry& e) {
    return e.name.size() >= prefix.size() && FoldedNameEqual{}(std::string_view(e.name).substr(0, prefix.size()), prefix);
  });
}

}  // namespace

namespace {

// A data.pkl this large (100,000 values or so) has the memory of its values
// made on a second thread; a smaller one is read before that would pay.
constexpr uint64_t kValuesAheadFrom = uint64_t{1} << 20;

// A stored data.pkl (torch never deflates it) is parsed where it lies in
// the file mapping, so only the pages of its opcodes are touched; with
// leave_payloads_in_file its large str and bytes are not read at all, and
// only the rest counts against max_pickle_bytes. A deflated one is
// inflated into memory.
void parse_data_pickle(CheckpointImpl& impl, const ZipReader& zip, const ZipEntry& pickle) {
  UnpickleOptions unpickle_options;
  std::string inflated;
  MappedRange mapped;  // the stored data.pkl, unmapped once it is parsed
  std::span<const std::byte> pickle_bytes;
  if (pickle.method == 0 && impl.leave_payloads_in_file) {
    mapped = zip.map_stored(pickle);
    pickle_bytes = mapped.span();
    unpickle_options.leave_in_file_from = kPayloadInFileFrom;
    unpickle_options.file_offset = pickle.data_offset;
    unpickle_options.max_held_bytes = impl.limits.max_pickle_bytes;
  } else if (pickle.method == 0) {
    mapped = zip.map_stored(pickle, impl.limits.max_pickle_bytes, "max_pickle_bytes");
    pickle_bytes = mapped.span();
  } else {
    inflated = zip.read_all(pickle, impl.limits.max_pickle_bytes, "max_pickle_bytes");
    pickle_bytes = as_bytes(inflated);
  }
  try {
    // A large pickle's values have their memory made on a second thread
    // meanwhile (pickle/value_room.h; OpenOptions::make_values_ahead).
    std::optional<ValueRoom> room;
    if (impl.make_values_ahead && pickle_bytes.size() >= kValuesAheadFrom) room.emplace(impl.graph);
    parse_object_pickle(impl, pickle_bytes, pickle.name, unpickle_options);
  } catch (...) {
    mapped.check_intact();  // lost bytes read as zeros: that is the error, not what the parser made of them
    throw;
  }
  mapped.check_intact();
}

}  // namespace

void read_zip_checkpoint(CheckpointImpl& impl) {
  if (impl.salvage != nullptr) return salvage_zip_checkpoint(impl);  // records found however they still can be
  impl.format = CheckpointFormat::kZip;
  impl.zip = std::make_unique<ZipReader>(impl.file, zip_limits_of(impl.limits));
  const ZipReader& zip = *impl.zip;
  if (zip.entries().empty()) throw Error(ErrorKind::kCorrupt, "zip archive has no records");

  // torch's reader takes the root from the first central directory entry.
  const std::string& first = zip.entries().front().name;
  const auto slash = first.find('/');
  if (slash == std::string::npos) {
    throw Error(ErrorKind::kNotCheckpoint, "zip archive's first record '" + first +
                                               "' is not in a subdirectory, so this is not a torch checkpoint");
  }
  impl.archive_root = first.substr(0, slash);
  const std::string root = impl.archive_root + "/";

  refuse_torchscript([&](const std::string& prefix) { return has_record_with_prefix(zip, prefix); }, root);
  const ZipEntry* pickle = zip.find(root + "data.pkl");
  if (pickle == nullptr) {
    throw Error(ErrorKind::kNotCheckpoint, "zip archive has no record '" + root +
                                               "data.pkl', so it is not a torch.save checkpoint");
  }
  read_torch_records(impl, root, [&](const std::string& name) -> std::optional<std::string> {
    const ZipEntry* e = zip.find(name);
    if (e == nullptr) return std::nullopt;
    return zip.read_all(*e, kMaxSmallRecord);
  });

  // A save's verification parsed its data.pkl as it was written; any other
  // reader parses it here.
  if (!adopt_preparsed(impl, *pickle)) parse_data_pickle(impl, zip, *pickle);

  // torch's storage records are data/0, data/1, ...: found by number, as
  // the storage table finds its keys (a hash lookup each was a fifth of
  // opening an archive of 100,000 records); any other name by name.
  const std::string data_dir = root + "data/";
  std::vector<const ZipEntry*> numbered(zip.entries().size(), nullptr);
  for (const ZipEntry& e : zip.entries()) {
    if (e.name.size() <= data_dir.size() || e.name.compare(0, data_dir.size(), data_dir) != 0) continue;
    const std::optional<uint32_t> number =
        storage_number(std::string_view(e.name).substr(data_dir.size()), numbered.size());
    if (number) numbered[*number] = &e;  // names are unique (ZipReader checks)
  }
  std::string name;  // one buffer for every storage's record name
  build_storage_table(impl, [&](const std::string& key) {
    const ZipEntry* entry = nullptr;
    if (const std::optional<uint32_t> number = storage_number(key, numbered.size())) entry = numbered[*number];
    if (entry == nullptr) {
      name.assign(data_dir).append(key);
      entry = zip.find(name);
    }
    if (entry == nullptr) {
      throw Error(ErrorKind::kCorrupt, "storage '" + key + "' is used by the pickle but record '" + name +
                                           "' is missing from the archive");
    }
    LocatedData located;
    located.source.encoding = entry->method == 0 ? StorageSource::Encoding::kStored : StorageSource::Encoding::kDeflated;
    located.source.offset = entry->data_offset;
    located.source.length = entry->compressed_size;
    located.source.crc32 = entry->crc32;
    located.source.record = entry->name;
    located.available = entry->size;
    return located;
  });
  build_tensor_table(impl);
}

}  // namespace ckptfix
