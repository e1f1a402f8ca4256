// The parts of a torch zip checkpoint's reading that the reader of a sound
// archive (zip_format.cc) and the reader of a damaged one (zip_salvage.cc)
// share (formats/torch_zip_parts.h): neither calls into the other.
#include "formats/torch_zip_parts.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/torch_objects.h"
#include "pickle/global_policy.h"
#include "pickle/unpickler.h"
#include "pickle/value_room.h"

namespace ckptfix {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// What the reader keeps of a parse of the object pickle (in impl.graph).
void take_parse(CheckpointImpl& impl, const UnpickleResult& parsed) {
  impl.note_usages(parsed.globals, [&impl](uint64_t offset) { return impl.pickle_place(offset); });
  impl.root = parsed.root;
  impl.protocol = parsed.protocol;
  impl.opcodes |= parsed.opcodes;
  impl.pickle_bytes_held = parsed.held_bytes;
  impl.payloads_in_file = parsed.held_bytes != parsed.length;
}

}  // namespace

ZipLimits zip_limits_of(const ReadLimits& limits) {
  ZipLimits zip;
  zip.max_storages = limits.max_storages;
  zip.max_inflate_ratio = limits.max_inflate_ratio;
  zip.inflate_allowance_bytes = limits.inflate_allowance_bytes;
  zip.max_inflated_bytes = limits.max_inflated_bytes;
  return zip;
}

void read_torch_records(CheckpointImpl& impl, const std::string& root, const SmallRecordReader& small) {
  if (const auto order = small(root + "byteorder")) {
    const std::string value = trim(*order);
    if (value == "big") {
      impl.big_endian = true;
    } else if (value != "little") {
      throw Error(ErrorKind::kCorrupt, "byteorder record says '" + value + "', expected 'little' or 'big'")
          .at(root + "byteorder");
    }
  }
  // Only what torch's writer leaves behind is taken; anything else in these
  // records (which torch never writes) leaves the default, so the output's
  // records still describe the output.
  auto number = [](const std::string& text) -> std::optional<uint64_t> {
    if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    return std::stoull(text);
  };
  if (const auto version = small(root + ".format_version")) {
    const auto n = number(trim(*version));
    impl.style.format_version = n && *n >= 1;
  }
  if (const auto alignment = small(root + ".storage_alignment")) {
    const auto n = number(trim(*alignment));
    if (n && *n != 0 && *n % 64 == 0 && *n <= 65536) impl.style.storage_alignment = static_cast<uint32_t>(*n);
  }
  impl.style.serialization_id = small(root + ".data/serialization_id").has_value();
}


// Takes impl.preparsed as the parse of `pickle` when it is the parse of
// that very record (name, place, size and CRC-32 as the directory says),
// read as this reader would read it: stored, within max_pickle_bytes, no
// payload left in the file, and no known gadget among its globals (whose
// refusal the parse below words). False: parse as ever.
bool adopt_preparsed(CheckpointImpl& impl, const ZipEntry& pickle) {
  if (!impl.preparsed) return false;
  const std::unique_ptr<PreparsedPickle> pre = std::exchange(impl.preparsed, nullptr)();
  if (pre == nullptr || impl.leave_payloads_in_file || pickle.method != 0 || pickle.name != pre->record ||
      pickle.data_offset != pre->data_offset || pickle.size != pre->size || pickle.crc32 != pre->crc32 ||
      pickle.size > impl.limits.max_pickle_bytes) {
    return false;
  }
  for (const PreparsedPickle::Global& g : pre->globals) {
    if (classify_global(g.module, g.name).kind == GlobalKind::kGadget) return false;
  }
  impl.pickle_record = pickle.name;
  try {
    for (const PreparsedPickle::Global& g : pre->globals) {
      if (GlobalRef* first = impl.note_global(g.module, g.name)) first->where = impl.pickle_place(g.offset);
    }
    impl.graph = std::move(pre->graph);
    take_parse(impl, pre->parsed);
  } catch (Error& e) {
    e.within(pickle.name);
    throw;
  }
  return true;
}


uint64_t parse_object_pickle(CheckpointImpl& impl, std::span<const std::byte> bytes, const std::string& record,
                             UnpickleOptions options) {
  options.max_values = impl.pickle_values();
  options.max_name_bytes = impl.limits.max_name_bytes;
  impl.pickle_record = record;
  options.on_global = [&impl](const std::string& module, const std::string& name, uint64_t offset) {
    if (GlobalRef* first = impl.note_global(module, name)) first->where = impl.pickle_place(offset);
  };
  try {
    const UnpickleResult parsed = unpickle(bytes, impl.graph, options);
    take_parse(impl, parsed);
    return parsed.length;
  } catch (Error& e) {
    e.within(record);
    throw;
  }
}

std::unique_ptr<PreparsedPickle> preparse_pickle(std::span<const std::byte> bytes, const std::string& record,
                                                 uint64_t data_offset, uint32_t crc32, const ReadLimits& limits,
                                                 uint64_t file_size, ValueGraph graph) {
  auto pre = std::make_unique<PreparsedPickle>();
  pre->graph = std::move(graph);
  pre->record = record;
  pre->data_offset = data_offset;
  pre->size = bytes.size();
  pre->crc32 = crc32;
  UnpickleOptions options;  // as parse_object_pickle's for a stored data.pkl
  options.max_values = max_pickle_values(limits, file_size);
  options.max_name_bytes = limits.max_name_bytes;
  options.on_global = [&pre](const std::string& module, const std::string& name, uint64_t offset) {
    pre->globals.push_back({module, name, offset});
  };
  pre->parsed = unpickle(bytes, pre->graph, options);
  pre->graph.release_room();
  return pre;
}

void refuse_torchscript(const std::function<bool(const std::string& prefix)>& has_record, const std::string& root) {
  if (has_record(root + "constants.pkl") || has_record(root + "code/")) {
    throw Error(ErrorKind::kUnsupported,
                "this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint; load it with "
                "torch.jit.load, or save model.state_dict() with torch.save and run ckptfix on that");
  }
}

}  // namespace ckptfix
