#include "write/checkpoint_writer.h"

#include <memory>
#include <unordered_map>
#include <xxhash.h>

#include "ckptfix/error.h"
#include "io/atomic_file.h"
#include "io/bytes.h"
#include "model/checkpoint_impl.h"
#include "pickle/pickler.h"
#include "storage/storage_reader.h"
#include "write/storage_copier.h"
#include "zip/zip_writer.h"

namespace ckptfix {

PickledObject pickle_checkpoint(const Checkpoint& checkpoint) {
  PickledObject out;
  const auto& storages = checkpoint.storages();
  std::vector<int64_t> output_key(storages.size(), -1);
  // Values built for persistent ids live here, apart from the input graph.
  // Reusing one Value per distinct string or class lets the pickler refer
  // back to it (BINGET), as CPython does for torch's interned strings.
  ValueGraph scratch;
  Value* storage_tag = scratch.make_str("storage");
  std::unordered_map<std::string, Value*> classes, locations;
  std::vector<Value*> keys(storages.size(), nullptr);
  auto cached = [&](std::unordered_map<std::string, Value*>& cache, const std::string& text, auto make) {
    auto it = cache.find(text);
    if (it == cache.end()) it = cache.emplace(text, make()).first;
    return it->second;
  };

  PickleWriterOptions options;
  options.persistent_id = [&](const Value& v, const std::function<void(Value*)>& save) {
    if (v.storage < 0) {
      throw Error(ErrorKind::kUnsupported,
                  "the pickle has a persistent id that is not a torch storage; torch's zip loader cannot read it");
    }
    const size_t index = static_cast<size_t>(v.storage);
    if (output_key[index] < 0) {
      output_key[index] = static_cast<int64_t>(out.storage_order.size());
      out.storage_order.push_back(index);
    }
    const Storage& s = storages[index];
    const DType dtype = s.output_dtype();
    const auto class_name = s.untyped ? std::optional<std::string_view>("UntypedStorage") : storage_class_name(dtype);
    if (!class_name) {
      throw Error(ErrorKind::kUnsupported, "storage '" + s.key + "' of type " + std::string(dtype_name(dtype)) +
                                               " has no typed storage class to write");
    }
    const uint64_t numel = s.untyped ? s.output_nbytes() : s.output_nbytes() / element_size(dtype);
    if (keys[index] == nullptr) keys[index] = scratch.make_str(std::to_string(output_key[index]));
    const std::string cls(*class_name);
    Value* pid = scratch.make_tuple(
        {storage_tag, cached(classes, cls, [&] { return scratch.make_global("torch", cls); }), keys[index],
         cached(locations, s.location, [&] { return scratch.make_str(s.location); }),
         scratch.make_int(static_cast<int64_t>(numel))});
    save(pid);
  };
  out.bytes = pickle_protocol2(checkpoint.root(), options);
  return out;
}

SaveResult write_checkpoint(const Checkpoint& checkpoint, ByteSink& sink, const SaveOptions& options) {
  SaveResult result;
  result.archive_root = !options.archive_root.empty() ? options.archive_root
                        : !checkpoint.archive_root().empty() ? checkpoint.archive_root()
                                                             : std::string("archive");
  const std::string root = result.archive_root + "/";
  const PickledObject pickled = pickle_checkpoint(checkpoint);
  const auto& storages = checkpoint.storages();

  uint64_t total = 0;
  for (size_t index : pickled.storage_order) total += storages[index].output_nbytes();

  ZipWriter zip(sink);
  zip.add(root + "data.pkl", as_bytes(pickled.bytes));
  zip.add(root + "byteorder", as_bytes("little"));

  StorageCopier copier(checkpoint.impl().file);
  uint64_t done = 0;
  for (size_t key = 0; key < pickled.storage_order.size(); ++key) {
    const size_t index = pickled.storage_order[key];
    const Storage& s = storages[index];
    WrittenStorage written;
    written.storage = index;
    written.key = std::to_string(key);
    written.record = root + "data/" + written.key;
    written.nbytes = s.output_nbytes();
    zip.begin(written.record, written.nbytes);
    const StorageCopier::Copied copied = copier.copy(s, [&](std::span<const std::byte> chunk) {
      zip.write(chunk);
      done += chunk.size();
      if (options.progress) options.progress(done, total);
    });
    written.hash = copied.hash;
    written.overflowed = copied.stats.overflowed;
    written.flushed = copied.stats.flushed;
    zip.end();
    written.crc32 = zip.records().back().crc32;
    result.storages.push_back(std::move(written));
  }
  zip.add(root + "version", as_bytes("3\n"));
  zip.finish();

  for (const WrittenRecord& r : zip.records()) result.records.push_back({r.name, r.data_offset, r.size, r.crc32});
  result.bytes = sink.position();
  return result;
}

SaveResult save(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options) {
  AtomicFile out(path, options.overwrite);
  SaveResult result;
  try {
    result = write_checkpoint(checkpoint, out.sink(), options);
  } catch (Error& e) {
    e.in_file(path.string());
    throw;
  }
  out.commit();
  return result;
}

}  // namespace ckptfix
