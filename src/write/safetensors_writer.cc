// save_safetensors: the root state dict of a checkpoint as a safetensors
// file, through a temporary file that is verified before it is renamed.
//
// The plan (names, dtypes, shapes, offsets, metadata) is made first, so the
// header can be written before any tensor byte; each tensor's bytes then
// stream from the input (mapped or read in slices, cast on the way), and the
// XXH3 of what was written is kept for the verification.
#include "ckptfix/safetensors.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <xxhash.h>

#include "bytes/byte_checker.h"
#include "bytes/element_transform.h"
#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "error_boundary.h"
#include "io/atomic_file.h"
#include "io/bytes.h"
#include "model/checkpoint_impl.h"
#include "safetensors/header.h"

namespace ckptfix {
namespace {

constexpr size_t kSlice = size_t{2} << 20;

struct PlannedTensor {
  SafetensorsEntry entry;  // as the header records it
  size_t tensor = 0;       // index into the checkpoint's tensors
  uint64_t hash = 0;       // XXH3-64 of the bytes written
};

struct Plan {
  std::vector<PlannedTensor> tensors;  // in file order
  std::optional<SafetensorsMetadata> metadata;
  std::vector<std::vector<std::string>> shared;
  std::vector<std::pair<std::string, std::string>> dropped;
  uint64_t data_bytes = 0;
};

bool same_view(const TensorInfo& a, const TensorInfo& b) {
  return a.storage == b.storage && a.storage_offset == b.storage_offset && a.shape == b.shape &&
         a.stride == b.stride && a.dtype == b.dtype;
}

bool contiguous(const TensorInfo& t) {
  int64_t expected = 1;
  for (size_t k = t.shape.size(); k-- > 0;) {
    if (t.shape[k] != 1 && t.stride[k] != expected) return false;
    expected *= t.shape[k];
  }
  return true;
}

void set_metadata(SafetensorsMetadata& metadata, const std::string& key, const std::string& value, bool replace) {
  for (auto& [k, v] : metadata) {
    if (k == key) {
      if (replace) v = value;
      return;
    }
  }
  metadata.emplace_back(key, value);
}

std::string state_dict_list(const CheckpointImpl& impl) {
  std::string names;
  for (const StateDict& sd : impl.state_dicts()) {
    if (sd.in_optimizer) continue;
    names += (names.empty() ? "'" : ", '") + path_to_string(sd.path) + "'";
  }
  return names.empty() ? "none" : names;
}

Plan plan_file(const Checkpoint& checkpoint, const SafetensorsOptions& options) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  const auto dicts = impl.state_dicts();
  if (std::none_of(dicts.begin(), dicts.end(), [](const StateDict& sd) { return sd.path.empty(); })) {
    throw Error(ErrorKind::kInvalidArgument,
                "a safetensors file holds one state dict and the root of this checkpoint is not one; state dicts in "
                "it: " + state_dict_list(impl) + "; choose one with `extract`");
  }
  const std::vector<StateDictEntry> entries = select_state_dict(checkpoint);

  // Keys that share a storage: reported; with drop_aliases, keys that are
  // the same view keep the sorted-first name (safetensors' save_model).
  std::map<int32_t, std::vector<size_t>> by_storage;  // storage -> entry indexes, in dict order
  for (size_t i = 0; i < entries.size(); ++i) by_storage[impl.tensors[entries[i].tensor].storage].push_back(i);
  Plan plan;
  std::vector<bool> dropped(entries.size(), false);
  std::vector<std::pair<size_t, std::vector<std::string>>> shared;  // first entry index, keys
  for (const auto& [storage, members] : by_storage) {
    if (members.size() < 2) continue;
    std::vector<std::string> keys;
    for (size_t i : members) keys.push_back(entries[i].key);
    shared.emplace_back(members.front(), keys);
    if (!options.drop_aliases) continue;
    std::vector<bool> grouped(members.size(), false);
    for (size_t a = 0; a < members.size(); ++a) {
      if (grouped[a]) continue;
      std::vector<size_t> group{members[a]};
      for (size_t b = a + 1; b < members.size(); ++b) {
        if (!grouped[b] && same_view(impl.tensors[entries[members[a]].tensor], impl.tensors[entries[members[b]].tensor])) {
          grouped[b] = true;
          group.push_back(members[b]);
        }
      }
      if (group.size() < 2) continue;
      std::sort(group.begin(), group.end(), [&](size_t x, size_t y) { return entries[x].key < entries[y].key; });
      for (size_t k = 1; k < group.size(); ++k) {
        dropped[group[k]] = true;
        plan.dropped.emplace_back(entries[group[k]].key, entries[group[0]].key);
      }
    }
  }
  std::sort(shared.begin(), shared.end());
  for (auto& [first, keys] : shared) plan.shared.push_back(std::move(keys));

  for (size_t i = 0; i < entries.size(); ++i) {
    if (dropped[i]) continue;
    const TensorInfo& t = impl.tensors[entries[i].tensor];
    const std::string where = "key '" + entries[i].key + "'";
    const auto name = safetensors_dtype_name(t.dtype);
    if (!name || t.kind != TensorKind::kDense) {
      throw Error(ErrorKind::kUnsupported, std::string(t.kind == TensorKind::kDense ? "" : "quantized ") + "dtype " +
                                               std::string(dtype_name(t.dtype)) + " has no safetensors type")
          .at(where);
    }
    PlannedTensor p;
    p.tensor = entries[i].tensor;
    p.entry.name = entries[i].key;
    p.entry.dtype = t.dtype;
    p.entry.shape = t.shape;
    const uint32_t per = safetensors_values_per_element(t.dtype);
    if (per > 1) {
      if (t.shape.empty()) throw Error(ErrorKind::kUnsupported, "a float4_e2m1fn_x2 scalar has no safetensors shape").at(where);
      p.entry.shape.back() *= per;
    }
    plan.tensors.push_back(std::move(p));
  }
  std::stable_sort(plan.tensors.begin(), plan.tensors.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    const int ra = safetensors_dtype_rank(a.entry.dtype), rb = safetensors_dtype_rank(b.entry.dtype);
    return ra != rb ? ra > rb : a.entry.name < b.entry.name;
  });
  for (PlannedTensor& p : plan.tensors) {
    p.entry.begin = plan.data_bytes;
    plan.data_bytes += impl.tensors[p.tensor].nbytes();
    p.entry.end = plan.data_bytes;
  }

  if (impl.safetensors_metadata || !options.metadata.empty() || !plan.dropped.empty()) {
    SafetensorsMetadata metadata = impl.safetensors_metadata.value_or(SafetensorsMetadata{});
    for (const auto& [k, v] : options.metadata) set_metadata(metadata, k, v, true);
    for (const auto& [gone, kept] : plan.dropped) set_metadata(metadata, gone, kept, false);  // as save_model: user data wins
    plan.metadata = std::move(metadata);
  }
  return plan;
}

// Streams one tensor's elements, in row-major order, as the output dtype,
// into `sink`; returns the XXH3-64 of the bytes written.
class TensorStreamer {
 public:
  TensorStreamer(const CheckpointImpl& impl, ByteSink& sink, std::function<void(uint64_t)> wrote)
      : impl_(impl), sink_(sink), wrote_(std::move(wrote)) {}

  uint64_t write(const TensorInfo& t) {
    XXH3_64bits_reset(hash_.get());
    const Storage& s = impl_.storages[static_cast<size_t>(t.storage)];
    if (t.numel() > 0) {
      // The tensor's elements as a storage of their own: what the element
      // transform converts (from the input dtype to the output dtype).
      Storage part = s;
      part.dtype = s.dtype == DType::kUntyped ? t.dtype : s.dtype;
      if (s.dtype == DType::kUntyped) part.cast_to.reset();
      part.numel = t.numel() / packed_values(part.dtype);
      part.nbytes = part.numel * element_size(part.dtype);
      const uint64_t first = static_cast<uint64_t>(t.storage_offset) * element_size(part.dtype);
      if (contiguous(t)) {
        copy_range(s, part, first);
      } else {
        gather(t, s, part);
      }
    }
    return XXH3_64bits_digest(hash_.get());
  }

 private:
  void output(std::span<const std::byte> bytes) {
    XXH3_64bits_update(hash_.get(), bytes.data(), bytes.size());
    sink_.write(bytes);
    wrote_(bytes.size());
  }

  // Input bytes in slices of whole elements, through the transform.
  void transform_out(ElementTransform& transform, std::span<const std::byte> in) {
    if (transform.identity()) return output(in);
    if (out_.size() < transform.output_size(kSlice)) out_.resize(transform.output_size(kSlice));
    for (size_t at = 0; at < in.size(); at += kSlice) {
      const auto piece = in.subspan(at, std::min(kSlice, in.size() - at));
      output({out_.data(), transform.apply(piece, out_.data())});
    }
  }

  // A contiguous run of the storage: [first, first + part.nbytes).
  void copy_range(const Storage& s, const Storage& part, uint64_t first) {
    ElementTransform transform(part);
    RecordReader reader = open_storage_record(*impl_.file, s);
    reader.skip(first);
    if (in_.size() < kSlice) in_.resize(kSlice);
    for (uint64_t left = part.nbytes; left > 0;) {
      const std::span<std::byte> chunk(in_.data(), std::min<uint64_t>(kSlice, left));
      if (reader.read(chunk) != chunk.size()) {
        throw Error(ErrorKind::kCorrupt, "the storage ends before the tensor's last element").at(s.source.record);
      }
      transform_out(transform, chunk);
      left -= chunk.size();
    }
  }

  // A strided view: its elements gathered in row-major order from the
  // storage's little-endian bytes (mapped when stored; otherwise read whole,
  // the one case where memory grows with a storage's size).
  void gather(const TensorInfo& t, const Storage& s, Storage part) {
    std::vector<std::byte> whole;
    std::span<const std::byte> bytes;
    if (s.source.encoding == StorageSource::Encoding::kMemory) {
      bytes = {s.source.memory, static_cast<size_t>(s.nbytes)};
    } else if (s.source.encoding == StorageSource::Encoding::kStored && !s.big_endian) {
      bytes = impl_.file->view(s.source.offset, s.nbytes, s.source.record);
    } else {
      whole.resize(s.nbytes);
      StorageReader reader(*impl_.file, s);
      reader.read(whole);
      bytes = whole;
      part.big_endian = false;  // StorageReader made them little-endian
    }
    ElementTransform transform(part);
    const size_t size = element_size(part.dtype);
    const size_t rank = t.shape.size();
    std::vector<int64_t> index(rank, 0);
    std::vector<std::byte> run;
    run.reserve(kSlice);
    for (uint64_t n = 0, total = t.numel(); n < total; ++n) {
      int64_t element = t.storage_offset;
      for (size_t k = 0; k < rank; ++k) element += index[k] * t.stride[k];
      const auto* p = bytes.data() + static_cast<uint64_t>(element) * size;
      run.insert(run.end(), p, p + size);
      if (run.size() + size > kSlice) {
        transform_out(transform, run);
        run.clear();
      }
      for (size_t k = rank; k-- > 0;) {
        if (++index[k] < t.shape[k]) break;
        index[k] = 0;
      }
    }
    transform_out(transform, run);
  }

  const CheckpointImpl& impl_;
  ByteSink& sink_;
  std::function<void(uint64_t)> wrote_;
  std::vector<std::byte> in_, out_;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_{XXH3_createState(), XXH3_freeState};
};

Error mismatch(const std::string& where, const std::string& message) {
  return std::move(Error(ErrorKind::kVerification, message).at(where));
}

// The file read back: its header must be the plan, its bytes what was written.
VerifyReport verify_output(const std::filesystem::path& temp, const Plan& plan, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.written = true;
  report.format = CheckpointFormat::kSafetensors;
  const Checkpoint back = Checkpoint::open(temp, options.open);
  const auto header = parse_safetensors_header(impl_of(back).file->bytes());
  if (header.entries.size() != plan.tensors.size()) {
    throw mismatch("safetensors header", "the header read back lists " + std::to_string(header.entries.size()) +
                                             " tensors, " + std::to_string(plan.tensors.size()) + " were written");
  }
  if (header.metadata != plan.metadata) throw mismatch("safetensors header", "__metadata__ read back differs");
  ByteChecker checker(options.gpu, report.gpu, options.progress, plan.data_bytes);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SafetensorsEntry& want = plan.tensors[i].entry;
    const SafetensorsEntry& got = header.entries[i];
    const std::string where = "tensor '" + want.name + "'";
    if (got.name != want.name || got.dtype != want.dtype || got.shape != want.shape || got.begin != want.begin ||
        got.end != want.end) {
      throw mismatch(where, "the header read back describes it differently");
    }
    const Storage& s = impl_of(back).storages[i];
    RecordReader reader = open_storage_record(*impl_of(back).file, s);
    const Digest d = checker.digest(reader.remaining(), [&](std::span<std::byte> out) { reader.read(out); },
                                    checker.gpu_enabled());
    if (d.hash != plan.tensors[i].hash) {
      throw mismatch(where, "its bytes read back have XXH3 " + hex64(d.hash) + ", " + hex64(plan.tensors[i].hash) +
                                " were written");
    }
    expect_gpu_bytes(d, ErrorKind::kGpu, where);
    ++report.storages;
    report.bytes += s.nbytes;
  }
  report.tensors = plan.tensors.size();
  report.records = plan.tensors.size();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

SafetensorsResult write_verified(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                 const SafetensorsOptions& options) {
  Plan plan = error_boundary(checkpoint.file_name(), [&] { return plan_file(checkpoint, options); });
  for (const auto& [k, v] : options.metadata) {
    if (!is_valid_utf8(k) || !is_valid_utf8(v)) {
      throw Error(ErrorKind::kInvalidArgument, "`metadata` must be UTF-8 text");
    }
  }
  if (options.verify) require_gpu_if_asked(options.verify_options.gpu);
  AtomicFile out(path, options.overwrite);
  SafetensorsResult result;
  try {
    ByteSink& sink = out.sink();
    std::vector<SafetensorsEntry> entries;
    for (const PlannedTensor& p : plan.tensors) entries.push_back(p.entry);
    sink.write(as_bytes(encode_safetensors_header(entries, plan.metadata)));
    uint64_t done = 0;
    TensorStreamer streamer(impl_of(checkpoint), sink, [&](uint64_t n) {
      done += n;
      if (options.progress) options.progress("writing", done, plan.data_bytes);
    });
    for (PlannedTensor& p : plan.tensors) {
      try {
        p.hash = streamer.write(impl_of(checkpoint).tensors[p.tensor]);
      } catch (Error& e) {
        e.at("key '" + p.entry.name + "'");
        throw;
      }
    }
    out.flush();
    result.bytes = sink.position();
    if (options.verify) {
      VerifyOptions verify_options = options.verify_options;
      if (!verify_options.progress) verify_options.progress = options.progress;
      result.verification = verify_output(out.temp_path(), plan, verify_options);
    }
  } catch (Error& e) {
    e.in_file(path.string());
    if (e.kind() == ErrorKind::kIo || e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu) {
      e.note("nothing was written");
    }
    throw;
  }
  out.commit(options.sync);
  result.tensors = plan.tensors.size();
  result.shared = std::move(plan.shared);
  result.dropped = std::move(plan.dropped);
  return result;
}

}  // namespace

SafetensorsResult save_safetensors(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                   const SafetensorsOptions& options) {
  return error_boundary(path.string(), [&] { return write_verified(checkpoint, path, options); });
}

}  // namespace ckptfix
