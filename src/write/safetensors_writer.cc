// save_safetensors: the root state dict of a checkpoint as a safetensors
// file, through a temporary file that is verified before it is renamed.
//
// The plan (names, dtypes, shapes, offsets, metadata) is made first, so the
// header can be written before any tensor byte; each tensor's bytes then
// stream from the input (mapped or read in slices, cast on the way), and the
// XXH3 of what was written is kept for the verification (made only when
// there is one).
#include "ckptfix/safetensors.h"

#include "ckptfix/nested.h"
#include "ckptfix/save.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>


#include "bytes/background.h"
#include "bytes/byte_checker.h"
#include "bytes/element_transform.h"
#include "bytes/storage_pipeline.h"
#include "bytes/storage_reader.h"
#include "bytes/xxh3.h"
#include "zip/crc32.h"
#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "error_boundary.h"
#include "io/atomic_file.h"
#include "io/bytes.h"
#include "io/mapped_window.h"
#include "json/json.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"
#include "model/dict_selection.h"
#include "model/payloads.h"
#include "safetensors/header.h"
#include "write/commit_outputs.h"
#include "write/replaced_input.h"
#include "write/save_seams.h"
#include "write/shard_plan.h"

namespace ckptfix {
namespace {

constexpr size_t kSlice = size_t{2} << 20;
// Tensors from this size are copied unread by the sink when they need no change.
constexpr uint64_t kUnreadCopyFrom = uint64_t{1} << 20;
// Unread copies go in slices so progress can be reported.
constexpr uint64_t kCopySlice = uint64_t{256} << 20;

// What the bytes written for a tensor must read back as: their XXH3-64, or
// for a whole storage copied unread and unchanged from a zip record, the
// CRC-32 the input records for it (checked on the read-back, which so proves
// the input and the copy at once, without reading the input a second time).
struct WrittenBytes {
  std::optional<uint64_t> hash;
  std::optional<uint32_t> crc;
};

struct PlannedTensor {
  SafetensorsEntry entry;  // as the header records it
  size_t tensor = 0;       // index into the checkpoint's tensors
  WrittenBytes written;
};

// One file to write.
struct FilePlan {
  std::filesystem::path path;
  std::vector<PlannedTensor> tensors;  // in file order
  std::optional<SafetensorsMetadata> metadata;
  uint64_t data_bytes = 0;
};

// Everything to write: one file, or a shard set and its index.
struct Plan {
  std::vector<FilePlan> files;
  std::optional<std::filesystem::path> index;  // a shard set's index file
  std::vector<std::vector<std::string>> shared;
  std::vector<std::pair<std::string, std::string>> dropped;
  uint64_t total_bytes = 0;
};

bool same_view(const TensorInfo& a, const TensorInfo& b) {
  return a.storage == b.storage && a.storage_offset == b.storage_offset && a.shape == b.shape &&
         a.stride == b.stride && a.dtype == b.dtype;
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

std::vector<ShardItem> shard_items(const CheckpointImpl& impl, const std::vector<PlannedTensor>& tensors) {
  std::vector<ShardItem> items;
  for (const PlannedTensor& p : tensors) {
    const TensorInfo& t = impl.tensors[p.tensor];
    items.push_back({t.storage, impl.storages[static_cast<size_t>(t.storage)].output_nbytes()});
  }
  return items;
}

Plan plan_file(const Checkpoint& checkpoint, const std::filesystem::path& path, const SafetensorsOptions& options) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  const auto root_entries = root_state_dict_entries(checkpoint);
  if (!root_entries) {
    throw Error(ErrorKind::kInvalidArgument,
                "a safetensors file holds one state dict and the root of this checkpoint is not one; state dicts in "
                "it: " + state_dict_list(impl) + "; choose one with `extract`");
  }
  const std::vector<StateDictEntry>& entries = *root_entries;
  for (const StateDictEntry& e : entries) {
    if (e.kind != StateDictEntry::Kind::kTensor) {
      throw Error(ErrorKind::kUnsupported,
                  std::string(e.kind == StateDictEntry::Kind::kSparseTensor ? "a " + e.sparse.layout + " tensor"
                                                                            : "a module's extra state (Python data)") +
                      " cannot be stored in a safetensors file, which holds dense tensors only; write a torch file")
          .at("key '" + e.key + "'");
    }
    // Keys the header cannot spell: refused here, naming the input, rather
    // than written into a file that does not read back.
    if (e.key == "__metadata__") {
      throw Error(ErrorKind::kUnsupported, "a tensor named __metadata__ cannot be stored: safetensors reserves the name")
          .at("key '__metadata__'");
    }
    if (!is_valid_utf8(e.key)) {
      throw Error(ErrorKind::kUnsupported, "the key is not UTF-8 text, which a safetensors header must be")
          .at("key '" + e.key + "'");
    }
  }

  // Keys that share a storage: reported; with drop_aliases, keys that are
  // the same view keep the sorted-first name (safetensors' save_model).
  std::map<int32_t, std::vector<size_t>> by_storage;  // storage -> entry indexes, in dict order
  for (size_t i = 0; i < entries.size(); ++i) by_storage[impl.tensors[entries[i].tensor].storage].push_back(i);
  Plan plan;
  std::vector<PlannedTensor> tensors;  // in state-dict order
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
    if (t.kind == TensorKind::kMeta) {
      throw Error(ErrorKind::kUnsupported, "a meta tensor has no data, and a safetensors file holds tensors' data")
          .at(where);
    }
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
    tensors.push_back(std::move(p));
  }

  const bool sharding = options.max_shard_size > 0;
  const std::vector<std::vector<size_t>> shards =
      sharding ? split_into_shards(shard_items(impl, tensors), options.max_shard_size) : std::vector<std::vector<size_t>>{{}};
  const std::string file_name = path.filename().string();
  const std::string stem = file_name.size() > 12 && file_name.ends_with(".safetensors")
                               ? file_name.substr(0, file_name.size() - 12) : file_name;
  if (shards.size() > 1) {
    if (!file_name.ends_with(".safetensors")) {
      throw Error(ErrorKind::kInvalidArgument, "a shard set is named after its output, which must end in .safetensors "
                                               "(e.g. model.safetensors), not '" + file_name + "'");
    }
    plan.index = path.parent_path() / (file_name + ".index.json");
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    FilePlan file;
    file.path = shards.size() == 1 ? path
                                   : path.parent_path() / shard_file_name(stem, k, shards.size(), ".safetensors");
    if (sharding) {
      for (size_t i : shards[k]) file.tensors.push_back(tensors[i]);
    } else {
      file.tensors = tensors;
    }
    std::stable_sort(file.tensors.begin(), file.tensors.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
      const int ra = safetensors_dtype_rank(a.entry.dtype), rb = safetensors_dtype_rank(b.entry.dtype);
      return ra != rb ? ra > rb : a.entry.name < b.entry.name;
    });
    for (PlannedTensor& p : file.tensors) {
      p.entry.begin = file.data_bytes;
      file.data_bytes += impl.tensors[p.tensor].nbytes();
      p.entry.end = file.data_bytes;
    }
    plan.total_bytes += file.data_bytes;
    // A shard set's files carry {"format": "pt"}, as save_pretrained writes them.
    std::vector<std::pair<std::string, std::string>> dropped_here;
    for (const auto& [gone, kept] : plan.dropped) {
      for (const PlannedTensor& p : file.tensors) {
        if (p.entry.name == kept) dropped_here.emplace_back(gone, kept);
      }
    }
    if (impl.safetensors_metadata || sharding || !options.metadata.empty() || !dropped_here.empty()) {
      SafetensorsMetadata metadata = impl.safetensors_metadata.value_or(SafetensorsMetadata{});
      if (sharding) set_metadata(metadata, "format", "pt", false);
      for (const auto& [k, v] : options.metadata) set_metadata(metadata, k, v, true);
      for (const auto& [gone, kept] : dropped_here) set_metadata(metadata, gone, kept, false);  // as save_model: user data wins
      file.metadata = std::move(metadata);
    }
    plan.files.push_back(std::move(file));
  }
  return plan;
}

// The index as transformers writes it (shard_plan.h).
std::string index_json(const Plan& plan) {
  std::map<std::string, std::string> weight_map;  // sorted by key, as sort_keys sorts (code points = UTF-8 bytes)
  for (const FilePlan& f : plan.files) {
    for (const PlannedTensor& p : f.tensors) weight_map[p.entry.name] = f.path.filename().string();
  }
  return shard_index_json(plan.total_bytes, weight_map);
}

// Streams one tensor's elements, in row-major order, as the output dtype,
// into `sink`; returns what the bytes written must read back as (nothing
// without `hash`: when nothing is read back, no XXH3 is made).
class TensorStreamer {
 public:
  /// `one_thread`: the input's hash made on this thread too (SaveOptions::threads 1).
  TensorStreamer(const CheckpointImpl& impl, ByteSink& sink, bool hash, bool one_thread,
                 std::function<void(uint64_t)> wrote)
      : impl_(impl), sink_(sink), hashing_(hash), wrote_(std::move(wrote)), worker_(one_thread) {}

  WrittenBytes write(const TensorInfo& t) {
    hash_.reset();
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
      if (is_contiguous(t) && copy_unread(s, part, first, t.storage)) {
        return unread_written_;
      } else if (is_contiguous(t)) {
        copy_range(s, part, first, t.storage);
      } else {
        check_input_once(s, t.storage);
        gather(t, s, part);
      }
    }
    return {hashing_ ? std::optional(hash_.digest()) : std::nullopt, std::nullopt};
  }

 private:
  void output(std::span<const std::byte> bytes) {
    if (hashing_) hash_.update(bytes);
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

  // Bytes that need no change, stored in a file, going to a file: copied
  // unread by the sink (see FileSink::copy_from; a safetensors file rarely
  // keeps a record's page phase, so its blocks are seldom shared). What they
  // must read back as:
  // for a whole storage whose record has a CRC-32, that CRC; otherwise the
  // XXH3 of the same bytes of the input, hashed by the worker meanwhile.
  // False when not possible.
  bool copy_unread(const Storage& s, const Storage& part, uint64_t first, int32_t storage) {
    const InputFile& input = impl_.input_of(s);
    if (part.nbytes < kUnreadCopyFrom || s.source.encoding != StorageSource::Encoding::kStored || input.fd() < 0 ||
        !ElementTransform(part).identity() || !sink_.can_copy_from()) {
      return false;
    }
    const uint64_t offset = s.source.offset + first;
    const bool whole_record = first == 0 && part.nbytes == s.source.length && s.source.crc32 != 0;
    if (!whole_record) check_input_once(s, storage);
    sink_.flush();
    const bool hashed = hashing_ && !whole_record;
    std::future<uint64_t> hash = !hashed ? std::future<uint64_t>() : worker_.run([&input, offset, &part, &s] {
      RecordHash state;
      for_each_mapped(input.fd(), input.name(), offset, part.nbytes, s.source.record,
                      [&](std::span<const std::byte> view) { state.update(view); });
      return state.digest();
    });
    try {
      for (uint64_t done = 0; done < part.nbytes;) {
        const uint64_t n = std::min(kCopySlice, part.nbytes - done);
        if (!sink_.copy_from(input.fd(), offset + done, n)) {
          if (done != 0) throw Error(ErrorKind::kIo, "the copy stopped part-way");
          if (hash.valid()) hash.wait();
          return false;  // not possible for these files: stream instead
        }
        wrote_(n);
        done += n;
      }
    } catch (Error& e) {
      if (hash.valid()) hash.wait();  // the task uses `part` and `s`
      e.in_file(input.name());        // reading it failed (write errors name the output)
      throw;
    } catch (...) {
      if (hash.valid()) hash.wait();
      throw;
    }
    unread_written_ = whole_record ? WrittenBytes{std::nullopt, s.source.crc32}
                                   : WrittenBytes{hashed ? std::optional(hash.get()) : std::nullopt, std::nullopt};
    return true;
  }

  // A contiguous run of the storage: [first, first + part.nbytes). When the
  // run is the whole record, its CRC-32 is checked as it is read.
  void copy_range(const Storage& s, const Storage& part, uint64_t first, int32_t storage) {
    const bool whole_record = first == 0 && part.nbytes == s.nbytes;
    if (!whole_record) check_input_once(s, storage);
    ElementTransform transform(part);
    RecordReader reader = open_storage_record(impl_.input_of(s), s);
    reader.skip(first);
    if (in_.size() < kSlice) in_.resize(kSlice);
    uint32_t crc = 0;
    for (uint64_t left = part.nbytes; left > 0;) {
      const std::span<std::byte> chunk(in_.data(), std::min<uint64_t>(kSlice, left));
      if (reader.read(chunk) != chunk.size()) {
        throw Error(ErrorKind::kCorrupt, "the storage ends before the tensor's last element").at(s.source.record);
      }
      if (whole_record) crc = crc32_update(crc, chunk);
      transform_out(transform, chunk);
      left -= chunk.size();
    }
    if (whole_record) {
      check_input_record(impl_.input_of(s), s, crc);
      checked_.insert(storage);
    }
  }

  // The input's record of a storage checked against the CRC-32 its archive
  // records, once, before any of its bytes are written: a damaged input is
  // refused, never converted (a record copied whole is checked on its
  // read-back instead, and one read whole as it is read).
  void check_input_once(const Storage& s, int32_t storage) {
    if (s.source.crc32 == 0 || !checked_.insert(storage).second) return;
    check_input_record(impl_.input_of(s), s, input_record_crc(impl_.input_of(s), s));
  }

  // A strided view: its elements gathered in row-major order from the
  // storage's little-endian bytes (mapped when stored; otherwise read whole,
  // the one case where memory grows with a storage's size).
  void gather(const TensorInfo& t, const Storage& s, Storage part) {
    const WholeStorage storage_bytes(impl_.input_of(s), s);  // unmapped when its view is gathered
    const std::span<const std::byte> bytes = storage_bytes.bytes();
    part.big_endian = false;  // WholeStorage's bytes are little-endian
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
    storage_bytes.check_intact();  // before the record is ended: a file that shrank is not written from zeros
  }

  const CheckpointImpl& impl_;
  ByteSink& sink_;
  bool hashing_;
  std::function<void(uint64_t)> wrote_;
  std::vector<std::byte> in_, out_;
  WrittenBytes unread_written_;
  std::unordered_set<int32_t> checked_;  // storages whose input record's CRC-32 was checked
  RecordHash hash_;
  Background worker_;  // last: joined before what its tasks use goes away
};

Error mismatch(const std::string& where, const std::string& message) {
  return std::move(Error(ErrorKind::kVerification, message).at(where));
}

// The file read back: its header must be the plan (its bytes were read
// back, each tensor as soon as it was written, by write_file).
VerifyReport verify_output(const std::filesystem::path& temp, const FilePlan& plan, const VerifyOptions& options,
                           const ReadBack& readback, double readback_seconds) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.written = true;
  report.format = CheckpointFormat::kSafetensors;
  const Checkpoint back = Checkpoint::open(temp, options.open);
  const auto header = read_safetensors_header(*impl_of(back).file);
  if (header.entries.size() != plan.tensors.size()) {
    throw mismatch("safetensors header", "the header read back lists " + std::to_string(header.entries.size()) +
                                             " tensors, " + std::to_string(plan.tensors.size()) + " were written");
  }
  if (header.metadata != plan.metadata) throw mismatch("safetensors header", "__metadata__ read back differs");
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SafetensorsEntry& want = plan.tensors[i].entry;
    const SafetensorsEntry& got = header.entries[i];
    if (got.name != want.name || got.dtype != want.dtype || got.shape != want.shape || got.begin != want.begin ||
        got.end != want.end) {
      throw mismatch("tensor '" + want.name + "'", "the header read back describes it differently");
    }
    ++report.storages;
    if (plan.tensors[i].written.crc) ++report.records_copied;
    report.bytes += want.end - want.begin;
  }
  report.gpu = readback.gpu();
  report.tensors = plan.tensors.size();
  report.records = plan.tensors.size();
  report.seconds = readback_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

// One file of the plan into `out`; the hashes of what was written go into
// `file`. With `readback`, each tensor is read back (hashed, and sent
// through the GPU when one is usable) on a worker as soon as it is written,
// while the next one is written: the verification of the bytes runs beside
// the writing instead of after it (`one_thread`: after each tensor, on this
// thread). Safetensors files are written by at most these two threads: their
// tensors are streamed in row-major order, a view gathered, not written in
// parts. Returns the seconds spent waiting for
// the last read-backs.
double write_file(const CheckpointImpl& impl, FilePlan& file, ByteSink& sink, uint64_t& done, uint64_t total,
                  const ProgressCallback& progress, ReadBack* readback, bool one_thread,
                  const std::filesystem::path& temp, const SaveSeams& seams) {
  std::vector<SafetensorsEntry> entries;
  for (const PlannedTensor& p : file.tensors) entries.push_back(p.entry);
  const std::string header = encode_safetensors_header(entries, file.metadata);
  sink.write(as_bytes(header));
  uint64_t data_size = 0;  // the tensors' bytes, after the header
  for (const SafetensorsEntry& e : entries) data_size = std::max(data_size, e.end);
  sink.expect(data_size);
  TensorStreamer streamer(impl, sink, /*hash=*/readback != nullptr, one_thread, [&](uint64_t n) {
    done += n;
    if (progress) progress("writing", done, total);
  });
  Background worker(/*on_caller=*/one_thread);  // declared after what its tasks use: joined first
  std::vector<std::future<void>> checks;
  for (PlannedTensor& p : file.tensors) {
    try {
      p.written = streamer.write(impl.tensors[p.tensor]);
    } catch (Error& e) {
      e.at("key '" + p.entry.name + "'");
      for (std::future<void>& c : checks) c.wait();
      throw;
    }
    if (readback == nullptr) continue;
    sink.flush();  // the tensor's last bytes may still be in the sink's buffer
    const uint64_t offset = header.size() + p.entry.begin, size = p.entry.end - p.entry.begin;
    if (seams.after_tensor) seams.after_tensor(temp, offset, size);
    const Storage& storage = impl.storages[static_cast<size_t>(impl.tensors[p.tensor].storage)];
    checks.push_back(worker.run([&impl, &storage, readback, where = "tensor '" + p.entry.name + "'", offset, size,
                                 w = p.written, dtype = p.entry.dtype] {
      try {
        readback->check(where, offset, size, w.crc, w.hash, dtype);
      } catch (const Error& e) {
        // The expected CRC-32 came from the input's archive: a mismatch may
        // mean the input itself is damaged, which is a different message.
        if (w.crc && e.kind() == ErrorKind::kVerification) {
          check_input_record(impl.input_of(storage), storage, input_record_crc(impl.input_of(storage), storage));
        }
        throw;
      }
    }));
  }
  const auto start = std::chrono::steady_clock::now();
  wait_for_all(checks);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void add_report(VerifyReport& total, const VerifyReport& one) {
  total.records += one.records;
  total.storages += one.storages;
  total.records_copied += one.records_copied;
  total.tensors += one.tensors;
  total.bytes += one.bytes;
  total.seconds += one.seconds;
  if (total.gpu.status == GpuReport::Status::kOff || one.gpu.status == GpuReport::Status::kOk) {
    const uint64_t bytes = total.gpu.bytes + one.gpu.bytes;
    const double seconds = total.gpu.seconds + one.gpu.seconds;
    total.gpu = one.gpu;
    total.gpu.bytes = bytes;
    total.gpu.seconds = seconds;
  }
}

SafetensorsResult write_verified(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                 const SafetensorsOptions& options, const SaveSeams& seams) {
  for (const auto& [k, v] : options.metadata) {
    if (!is_valid_utf8(k) || !is_valid_utf8(v)) {
      throw Error(ErrorKind::kInvalidArgument, "`metadata` must be UTF-8 text");
    }
  }
  Plan plan = error_boundary(checkpoint.file_name(), [&] { return plan_file(checkpoint, path, options); });
  if (options.verify) require_gpu_if_asked(options.verify_options.gpu);
  // Every file is written and verified before any is renamed into place:
  // a failure leaves none of them behind.
  std::vector<std::unique_ptr<AtomicFile>> outs;
  SafetensorsResult result;
  std::filesystem::path current = path;
  // An identical output is kept only where it is one file (outputs.h).
  OutputPolicy policy = options.policy;
  if (plan.files.size() > 1 || plan.index) policy.keep_identical = false;
  try {
    uint64_t done = 0;
    for (FilePlan& file : plan.files) {
      current = file.path;
      outs.push_back(std::make_unique<AtomicFile>(file.path, options.overwrite, &policy));
      AtomicFile& out = *outs.back();
      guard_replaced_input(impl_of(checkpoint), out);
      std::unique_ptr<ReadBack> readback;
      if (options.verify) {
        readback = std::make_unique<ReadBack>(out.temp_path().string(), options.verify_options.gpu, ProgressCallback{}, 0,
                                              seams.corrupt_on_device);
      }
      std::unique_ptr<ByteSink> wrapped;
      if (seams.wrap_sink) wrapped = seams.wrap_sink(out.sink());
      const double waited = write_file(impl_of(checkpoint), file, wrapped ? *wrapped : out.sink(), done,
                                       plan.total_bytes, options.progress, readback.get(),
                                       /*one_thread=*/write_threads(options.threads) == 1, out.temp_path(), seams);
      out.flush();
      result.bytes += out.sink().position();
      if (readback) readback->finish_device();  // the device's last results, compared
      if (options.verify) {
        VerifyOptions verify_options = options.verify_options;
        if (!verify_options.progress) verify_options.progress = options.progress;
        const VerifyReport report = verify_output(out.temp_path(), file, verify_options, *readback, waited);
        if (!result.verification) result.verification = VerifyReport{};
        if (result.verification->tensors == 0 && result.verification->storages == 0) {
          result.verification->written = true;
          result.verification->format = CheckpointFormat::kSafetensors;
        }
        add_report(*result.verification, report);
      }
    }
    if (plan.index) {
      current = *plan.index;
      const std::string text = index_json(plan);
      outs.push_back(std::make_unique<AtomicFile>(*plan.index, options.overwrite, &policy));
      guard_replaced_input(impl_of(checkpoint), *outs.back());
      outs.back()->sink().write(as_bytes(text));
      outs.back()->flush();
      result.bytes += text.size();
      if (options.verify) {  // the index read back names every tensor's file and the total, as planned
        const JsonValue back = parse_json(std::string_view(text));
        const JsonValue* map = back.find("weight_map");
        size_t listed = 0;
        for (const FilePlan& f : plan.files) listed += f.tensors.size();
        if (map == nullptr || map->members.size() != listed ||
            back.find("metadata")->find("total_size")->as_uint() != plan.total_bytes) {
          throw Error(ErrorKind::kVerification, "the index read back differs from the shards written");
        }
      }
    }
  } catch (Error& e) {
    e.in_file(current.string());
    if (e.kind() == ErrorKind::kIo || e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu) {
      e.note("nothing was written");
    }
    throw;
  }
  std::vector<AtomicFile*> files;
  for (auto& out : outs) files.push_back(out.get());
  result.kept_existing = !commit_outputs(files, impl_of(checkpoint), policy, options.sync);
  for (const FilePlan& f : plan.files) {
    result.tensors += f.tensors.size();
    result.files.push_back(f.path.string());
  }
  if (plan.index) result.files.push_back(plan.index->string());
  result.shared = std::move(plan.shared);
  result.dropped = std::move(plan.dropped);
  return result;
}

}  // namespace

SafetensorsResult save_safetensors_with_seams(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                              const SafetensorsOptions& options, const SaveSeams& seams) {
  return error_boundary(path.string(), [&] {
    read_in_left_payloads(checkpoint);  // keys and metadata are read from `text`
    refuse_nested_calls(checkpoint, nested_violations(nested_pickles(checkpoint), options.allow_globals));
    return write_verified(checkpoint, path, options, seams);
  });
}

SafetensorsResult save_safetensors(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                   const SafetensorsOptions& options) {
  return save_safetensors_with_seams(checkpoint, path, options, {});
}

}  // namespace ckptfix
