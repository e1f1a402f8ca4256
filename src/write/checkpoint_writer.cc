#include "write/checkpoint_writer.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "io/atomic_file.h"
#include "io/bytes.h"
#include "io/mapped_window.h"
#include "model/checkpoint_impl.h"
#include "model/payloads.h"
#include "pickle/pickler.h"
#include "bytes/byte_checker.h"
#include "verify/early_reparse.h"
#include "verify/verify_written.h"
#include "write/commit_outputs.h"
#include "write/replaced_input.h"
#include "write/save_seams.h"
#include "bytes/storage_pipeline.h"
#include "bytes/xxh3.h"
#include "zip/crc32.h"
#include "zip/serialization_id.h"
#include "zip/zip_writer.h"

namespace ckptfix {

namespace {

// The data.pkl bytes of the value `root` of `impl`, and the output order of
// the storages it reaches (each tagged `location` when one is given).
struct PickledObject {
  std::string bytes;
  std::vector<size_t> storage_order;  ///< storage indexes in output key order
};

PickledObject pickle_value(const CheckpointImpl& impl, Value* root, bool libtorch_pickle, const std::string& location) {
  PickledObject out;
  const auto& storages = impl.storages;
  // Each storage's output key, and the value that spells it. A distributed
  // checkpoint pickles each of many values apart (dcp_writer.cc), and a
  // table the size of the checkpoint for each would make that quadratic:
  // those keep only the storages they reach. The whole checkpoint, pickled
  // once, has a table (two hash lookups for each of 100,000 storages were a
  // tenth of the pickling).
  struct OutputKey {
    int64_t key = -1;  ///< -1: not reached yet
    Value* text = nullptr;
  };
  const bool whole = root == impl.root;
  std::vector<OutputKey> dense(whole ? storages.size() : 0);
  std::unordered_map<size_t, OutputKey> sparse;
  // Values built for persistent ids live here, apart from the input graph.
  // Reusing one Value per distinct string or class lets the pickler refer
  // back to it (BINGET), as CPython does for the objects torch passes it
  // again: a storage class, a storage's key, a location tag that is a
  // constant ("cpu", "mps", "meta").
  ValueGraph scratch(impl.graph.serial_end());  // numbered after the input's values (pickle/value_map.h)
  Value* storage_tag = scratch.make_str("storage");
  std::unordered_map<std::string, Value*> classes, locations;
  auto cached = [&](std::unordered_map<std::string, Value*>& cache, const std::string& text, auto make) {
    auto it = cache.find(text);
    if (it == cache.end()) it = cache.emplace(text, make()).first;
    return it->second;
  };
  // The class and location of the storage before, which the next one most
  // often shares (a state dict of float32 tensors on one device).
  struct LastClass {
    DType dtype = DType::kUntyped;
    bool untyped = false;
    Value* value = nullptr;
  } last_class;
  Value* last_location = nullptr;

  // torch's location_tag builds "cuda:0" (any "backend:index") anew for
  // every storage, so CPython's pickler, which memoizes by identity, writes
  // it out each time; a GPU-saved file holds one BINUNICODE 'cuda:0' per
  // storage (seen in torch 2.11's saves on an H100). LibTorch's pickler
  // memoizes strings by value, every location included.
  auto location_value = [&](const std::string& location) {
    if (!libtorch_pickle && location.find(':') != std::string::npos) return scratch.make_str(location);
    if (last_location != nullptr && last_location->text == location) return last_location;
    return last_location = cached(locations, location, [&] { return scratch.make_str(location); });
  };

  auto class_value = [&](const Storage& s, DType dtype) {
    if (last_class.value != nullptr && last_class.dtype == dtype && last_class.untyped == s.untyped) {
      return last_class.value;
    }
    // torch pickles its storage classes by their real module:
    // torch.FloatStorage is torch.FloatStorage, UntypedStorage lives in
    // torch.storage. LibTorch's unpickler knows no UntypedStorage but reads
    // "torch.<c10::ScalarType>Storage" for every dtype it has.
    std::optional<std::string> class_name;
    const char* class_module = "torch";
    if (libtorch_pickle) {
      if (!s.untyped && dtype != DType::kUntyped) class_name = libtorch_storage_class(dtype);
    } else if (s.untyped) {
      class_name = "UntypedStorage";
      class_module = "torch.storage";
    } else if (const auto typed = storage_class_name(dtype)) {
      class_name = std::string(*typed);
    }
    if (!class_name) {
      throw Error(ErrorKind::kUnsupported,
                  "storage '" + s.key + "' of type " + std::string(dtype_name(dtype)) +
                      (libtorch_pickle ? " is untyped, which LibTorch's unpickler cannot read"
                                       : " is a typed storage in LibTorch's spelling (torch." +
                                             libtorch_storage_class(dtype) +
                                             "), which Python's torch has no class for; it can only be "
                                             "written for LibTorch's unpickler"));
    }
    const std::string& cls = *class_name;
    last_class = {dtype, s.untyped, cached(classes, cls, [&] { return scratch.make_global(class_module, cls); })};
    return last_class.value;
  };

  PickleWriterOptions options;
  options.libtorch = libtorch_pickle;
  // The whole graph is written: its values, and three per storage made for
  // its persistent id (the tuple, the key, the element count) besides the
  // few classes and locations. A part of it (a distributed checkpoint's
  // value) is not sized by the whole.
  if (whole) options.value_numbers = impl.graph.serial_end() + 3 * storages.size() + 64;
  options.persistent_id = [&](const Value& v, const std::function<void(Value*)>& save) {
    if (v.storage < 0) {
      throw Error(ErrorKind::kUnsupported,
                  "the pickle has a persistent id that is not a torch storage; torch's zip loader cannot read it");
    }
    const size_t index = static_cast<size_t>(v.storage);
    OutputKey& key = whole ? dense[index] : sparse[index];
    if (key.key < 0) {
      key.key = static_cast<int64_t>(out.storage_order.size());
      out.storage_order.push_back(index);
    }
    const Storage& s = storages[index];
    const DType dtype = s.output_dtype();
    Value* cls = class_value(s, dtype);
    const uint64_t numel = s.untyped && !libtorch_pickle ? s.output_nbytes() : s.output_nbytes() / element_size(dtype);
    if (key.text == nullptr) key.text = scratch.make_str(std::to_string(key.key));
    Value* pid = scratch.make_tuple({storage_tag, cls, key.text, location_value(location.empty() ? s.location : location),
                                     scratch.make_int(static_cast<int64_t>(numel))});
    save(pid);
  };
  out.bytes = pickle_protocol2(root, options);
  return out;
}

}  // namespace

std::vector<size_t> keys_in_text_order(size_t n) {
  // 0 first (no key starts with another 0), then 1..n-1 in preorder of the
  // decimal digit tree: descend to k * 10 while it is a key, else step to
  // the next sibling, climbing while the step carries.
  std::vector<size_t> out;
  out.reserve(n);
  if (n == 0) return out;
  out.push_back(0);
  const size_t last = n - 1;
  size_t k = 1;
  for (size_t i = 1; i < n; ++i) {
    out.push_back(k);
    if (k <= last / 10) {
      k *= 10;
    } else {
      if (k >= last) k /= 10;
      ++k;
      while (k % 10 == 0) k /= 10;
    }
  }
  return out;
}

SaveResult write_checkpoint(const Checkpoint& checkpoint, ByteSink& sink, const SaveOptions& options,
                            ReadBack* readback, const std::function<void(const WrittenRecord&)>& pickle_written) {
  read_in_left_payloads(checkpoint);  // the pickler writes `text`
  const CheckpointImpl& impl = impl_of(checkpoint);
  SaveOptions with_root = options;
  if (with_root.archive_root.empty()) with_root.archive_root = !impl.archive_root.empty() ? impl.archive_root : "archive";
  return write_archive(impl, impl.root, impl.style, sink, with_root, readback, {}, pickle_written);
}

SaveResult write_archive(const CheckpointImpl& impl, Value* object, const ArchiveStyle& style, ByteSink& sink,
                         const SaveOptions& options, ReadBack* readback, const std::string& location,
                         const std::function<void(const WrittenRecord&)>& pickle_written) {
  SaveResult result;
  result.archive_root = !options.archive_root.empty() ? options.archive_root : std::string("archive");
  const std::string root = result.archive_root + "/";
  const PickledObject pickled = pickle_value(impl, object, options.libtorch_pickle, location);
  const auto& storages = impl.storages;

  uint64_t total = 0;
  for (size_t index : pickled.storage_order) total += storages[index].output_nbytes();

  // Storage records: in key order where `.format_version` promises it (torch
  // >= 2.7), else in the string order of the keys ("10" before "2"), as
  // torch <= 2.6 writes them.
  std::vector<size_t> record_keys;
  if (style.format_version) {
    record_keys.resize(pickled.storage_order.size());
    for (size_t key = 0; key < record_keys.size(); ++key) record_keys[key] = key;
  } else {
    record_keys = keys_in_text_order(pickled.storage_order.size());
  }

  ZipWriter zip(sink, style.storage_alignment);
  // Each record goes into the result as soon as it is complete, with the
  // bytes it is expected to hold.
  auto record = [&](const WrittenRecord& r, std::optional<uint64_t> hash, bool read_back) {
    result.records.push_back({r.name, r.data_offset, r.size, r.crc32, hash.value_or(0), hash.has_value(), read_back});
  };
  // The XXH3 of what was written is made only for the verification to compare.
  auto add_small = [&](const std::string& name, std::string_view bytes) {
    zip.add(root + name, as_bytes(bytes));
    record(zip.records().back(),
           options.verify ? std::optional(record_hash(as_bytes(bytes))) : std::nullopt, false);
  };
  add_small("data.pkl", pickled.bytes);
  if (pickle_written) {
    sink.flush();
    pickle_written(zip.records().back());
  }
  if (style.format_version) {
    add_small(".format_version", "1");
    add_small(".storage_alignment", std::to_string(style.storage_alignment));
  }
  add_small("byteorder", "little");

  uint64_t done = 0;
  // With `.format_version`, torch may compute where each storage is from its
  // own padding rule, so no page-phase padding (which lets the blocks of
  // unchanged records be shared with the input on XFS and btrfs).
  StoragePipeline pipeline(impl, sink, zip, readback, /*hash=*/options.verify,
                           /*page_phase=*/!style.format_version, write_threads(options.threads), [&](uint64_t n) {
                             done += n;
                             if (options.progress) options.progress("writing", done, total);
                           });
  for (size_t key : record_keys) {
    const size_t index = pickled.storage_order[key];
    WrittenStorage written;
    written.storage = index;
    written.key = std::to_string(key);
    written.record = root + "data/" + written.key;
    written.nbytes = storages[index].output_nbytes();
    const PipedRecord piped = pipeline.write(storages[index], written.record);
    written.crc32 = piped.record.crc32;
    written.hash = piped.hash.value_or(0);
    written.has_hash = piped.hash.has_value();
    written.overflowed = piped.stats.overflowed;
    written.flushed = piped.stats.flushed;
    record(piped.record, piped.hash, piped.read_back);
    result.storages.push_back(std::move(written));
  }
  add_small("version", "3\n");
  if (style.serialization_id) add_small(".data/serialization_id", torch_serialization_id(zip.records(), root));
  zip.finish();
  pipeline.finish();

  result.bytes = sink.position();
  return result;
}

SaveResult write_verified(const Checkpoint& checkpoint, AtomicFile& out, const SaveOptions& options,
                          const SaveSeams& seams) {
  const std::filesystem::path& path = out.target();
  guard_replaced_input(impl_of(checkpoint), out);
  SaveResult result;
  try {
    std::unique_ptr<ByteSink> wrapped;
    if (seams.wrap_sink) wrapped = seams.wrap_sink(out.sink());
    ByteSink& sink = wrapped ? *wrapped : out.sink();
    // Storage records are read back as they are finished (overlapping the
    // writing), unless a test changes the file before the final verification.
    std::unique_ptr<ReadBack> readback;
    if (options.verify && !seams.before_verify) {
      readback = std::make_unique<ReadBack>(out.temp_path().string(), options.verify_options.gpu, ProgressCallback{}, 0,
                                            seams.corrupt_on_device);
    }
    // data.pkl is read back and parsed beside the writing of the records
    // after it, for the final verification (verify/early_reparse.h).
    std::unique_ptr<EarlyReparse> early;
    if (options.verify && !seams.before_verify && write_threads(options.threads) > 1) {
      // The parse makes about as many values as the graph written has.
      early = std::make_unique<EarlyReparse>(out.temp_path(), checkpoint.read_limits(), impl_of(checkpoint).graph.size());
    }
    result = write_checkpoint(checkpoint, sink, options, readback.get(),
                              early ? [&](const WrittenRecord& r) { early->start(r); }
                                    : std::function<void(const WrittenRecord&)>());
    if (readback) {
      readback->finish_device();  // the device's last results, compared
      result.readback_gpu = readback->gpu();
      readback.reset();  // its pinned and device memory, before verification takes its own
    }
    out.flush();
    if (seams.before_verify) seams.before_verify(out.temp_path(), result);
    if (options.verify) {
      VerifyOptions verify_options = options.verify_options;
      if (!verify_options.progress) verify_options.progress = options.progress;
      result.verification = verify_written(out.temp_path(), checkpoint, result, verify_options, seams.corrupt_on_device,
                                           options.threads, options.dispose, early.get());
    }
  } catch (Error& e) {
    e.in_file(path.string());
    // The temporary file goes with `out`; say so where a write was under way.
    if (e.kind() == ErrorKind::kIo || e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu) {
      e.note("nothing was written");
    }
    throw;
  }
  return result;
}

namespace {

SaveResult save_verified(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options,
                         const SaveSeams& seams) {
  // Before writing anything: what the output's pickle would call, and the GPU asked for.
  refuse_unknown_calls(checkpoint, options.allow_globals);
  if (options.verify) require_gpu_if_asked(options.verify_options.gpu);
  AtomicFile out(path, options.overwrite, &options.policy);
  SaveResult result = write_verified(checkpoint, out, options, seams);
  result.kept_existing = !commit_outputs({&out}, impl_of(checkpoint), options.policy, options.sync);
  return result;
}

}  // namespace

SaveResult save_with_seams(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options,
                           const SaveSeams& seams) {
  return error_boundary(path.string(), [&] { return save_verified(checkpoint, path, options, seams); });
}

SaveResult save(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options) {
  return save_with_seams(checkpoint, path, options, {});
}

}  // namespace ckptfix
