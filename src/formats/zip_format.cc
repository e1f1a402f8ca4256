// torch zip checkpoints: <root>/data.pkl, <root>/data/<key>, <root>/version,
// since torch 2.1 <root>/byteorder and <root>/.data/serialization_id, since
// torch 2.7 <root>/.format_version and <root>/.storage_alignment. See
// docs/format.md.
#include <algorithm>
#include <optional>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/torch_objects.h"
#include "pickle/unpickler.h"

namespace ckptfix {
namespace {

constexpr uint64_t kMaxSmallRecord = 4096;
// A str or bytes this large is left in the file when the caller asks for it
// (OpenOptions::leave_payloads_in_file): numpy arrays' bytes, not names.
constexpr uint64_t kPayloadInFileFrom = uint64_t{1} << 20;

bool has_record_with_prefix(const ZipReader& zip, const std::string& prefix) {
  return std::any_of(zip.entries().begin(), zip.entries().end(),
                     [&](const ZipEntry& e) { return e.name.compare(0, prefix.size(), prefix) == 0; });
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Only what torch's writer leaves behind is taken; anything else in these
// records (which torch never writes) leaves the default, so the output's
// records still describe the output.
void read_archive_style(const ZipReader& zip, const std::string& root, ArchiveStyle& style) {
  auto small = [&](const std::string& name) -> std::optional<std::string> {
    const ZipEntry* e = zip.find(root + name);
    if (e == nullptr) return std::nullopt;
    return trim(zip.read_all(*e, kMaxSmallRecord));
  };
  auto number = [](const std::string& text) -> std::optional<uint64_t> {
    if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    return std::stoull(text);
  };
  if (const auto version = small(".format_version")) {
    const auto n = number(*version);
    style.format_version = n && *n >= 1;
  }
  if (const auto alignment = small(".storage_alignment")) {
    const auto n = number(*alignment);
    if (n && *n != 0 && *n % 64 == 0 && *n <= 65536) style.storage_alignment = static_cast<uint32_t>(*n);
  }
  style.serialization_id = zip.find(root + ".data/serialization_id") != nullptr;
}

}  // namespace

void read_zip_checkpoint(CheckpointImpl& impl) {
  impl.format = CheckpointFormat::kZip;
  ZipLimits zip_limits;
  zip_limits.max_storages = impl.limits.max_storages;
  zip_limits.max_inflate_ratio = impl.limits.max_inflate_ratio;
  zip_limits.inflate_allowance_bytes = impl.limits.inflate_allowance_bytes;
  zip_limits.max_inflated_bytes = impl.limits.max_inflated_bytes;
  impl.zip = std::make_unique<ZipReader>(impl.file, zip_limits);
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

  if (zip.find(root + "constants.pkl") || has_record_with_prefix(zip, root + "code/")) {
    throw Error(ErrorKind::kUnsupported,
                "this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint; load it with "
                "torch.jit.load, or save model.state_dict() with torch.save and run ckptfix on that");
  }
  const ZipEntry* pickle = zip.find(root + "data.pkl");
  if (pickle == nullptr) {
    throw Error(ErrorKind::kNotCheckpoint, "zip archive has no record '" + root +
                                               "data.pkl', so it is not a torch.save checkpoint");
  }
  if (const ZipEntry* order = zip.find(root + "byteorder")) {
    const std::string value = trim(zip.read_all(*order, kMaxSmallRecord));
    if (value == "big") {
      impl.big_endian = true;
    } else if (value != "little") {
      throw Error(ErrorKind::kCorrupt, "byteorder record says '" + value + "', expected 'little' or 'big'")
          .at(order->name);
    }
  }

  read_archive_style(zip, root, impl.style);

  // A stored data.pkl (torch never deflates it) is parsed where it lies in
  // the file mapping, so only the pages of its opcodes are touched; with
  // leave_payloads_in_file its large str and bytes are not read at all, and
  // only the rest counts against max_pickle_bytes. A deflated one is
  // inflated into memory.
  UnpickleOptions unpickle_options;
  std::string inflated;
  MappedRange mapped;  // the stored data.pkl, unmapped once it is parsed
  std::span<const std::byte> pickle_bytes;
  if (pickle->method == 0 && impl.leave_payloads_in_file) {
    mapped = zip.map_stored(*pickle);
    pickle_bytes = mapped.span();
    unpickle_options.leave_in_file_from = kPayloadInFileFrom;
    unpickle_options.file_offset = pickle->data_offset;
    unpickle_options.max_held_bytes = impl.limits.max_pickle_bytes;
  } else if (pickle->method == 0) {
    mapped = zip.map_stored(*pickle, impl.limits.max_pickle_bytes, "max_pickle_bytes");
    pickle_bytes = mapped.span();
  } else {
    inflated = zip.read_all(*pickle, impl.limits.max_pickle_bytes, "max_pickle_bytes");
    pickle_bytes = as_bytes(inflated);
  }
  unpickle_options.max_values = impl.pickle_values();
  unpickle_options.max_name_bytes = impl.limits.max_name_bytes;
  unpickle_options.on_global = [&impl](const std::string& module, const std::string& name) {
    impl.note_global(module, name);
  };
  try {
    const UnpickleResult parsed = unpickle(pickle_bytes, impl.graph, unpickle_options);
    impl.root = parsed.root;
    impl.protocol = parsed.protocol;
    impl.opcodes |= parsed.opcodes;
    impl.pickle_bytes_held = parsed.held_bytes;
    impl.payloads_in_file = parsed.held_bytes != parsed.length;
  } catch (Error& e) {
    e.within(pickle->name);
    throw;
  }

  build_storage_table(impl, [&](const std::string& key) {
    const std::string name = root + "data/" + key;
    const ZipEntry* entry = zip.find(name);
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
