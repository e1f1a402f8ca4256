// A checkpoint written as the directory torch.distributed.checkpoint.save
// writes from one process (issue 53): `__0_0.distcp`, every item back to
// back as torch.save would write it alone (bytes items first, then tensors,
// as FileSystemWriter orders them), and `.metadata`, the pickle saying where
// each is (write/dcp_metadata_pickle.h). Items come from the flattening DCP
// does (write/dcp_plan.h); each tensor's bytes are streamed from the input
// by the same writer as every torch file, so nothing is held in memory.
//
// Verified before anything is committed: every record read back (CRC-32
// and XXH3 as written, and the GPU load test), every item's zip parsed again
// and its tensor compared with the one intended, and .metadata parsed again
// by the reader ckptfix reads DCP with and compared entry by entry. The data
// file is committed first and .metadata last: a directory is a checkpoint
// once its .metadata is there.
#include <chrono>
#include <span>

#include "bytes/storage_pipeline.h"
#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "error_boundary.h"
#include "formats/registry.h"
#include "io/atomic_file.h"
#include "model/checkpoint_impl.h"
#include "model/payloads.h"
#include "model/torch_objects.h"
#include "verify/verify_written.h"
#include "write/checkpoint_writer.h"
#include "write/commit_outputs.h"
#include "write/dcp_metadata_pickle.h"
#include "write/dcp_plan.h"
#include "write/replaced_input.h"

namespace ckptfix {
namespace {

constexpr const char* kDataFile = "__0_0.distcp";

// A window onto a sink from where it stands now: each item is a zip of its
// own, whose offsets count from its first byte (torch.save to a stream).
class ItemSink final : public ByteSink {
 public:
  explicit ItemSink(ByteSink& file) : file_(file), base_(file.position()) {}
  void write(std::span<const std::byte> data) override { file_.write(data); }
  uint64_t position() const override { return file_.position() - base_; }
  void flush() override { file_.flush(); }
  bool can_copy_from() const override { return file_.can_copy_from(); }
  bool copy_from(int fd, uint64_t offset, uint64_t length) override { return file_.copy_from(fd, offset, length); }
  void expect(uint64_t length) override { file_.expect(length); }
  bool can_write_at() const override { return file_.can_write_at(); }
  uint64_t reserve(uint64_t length) override { return file_.reserve(length) - base_; }
  void write_at(uint64_t offset, std::span<const std::byte> data) override { file_.write_at(base_ + offset, data); }
  uint64_t base() const { return base_; }

 private:
  ByteSink& file_;
  const uint64_t base_;
};

struct WrittenItem {
  uint64_t offset = 0;
  uint64_t length = 0;
  SaveResult archive;  ///< offsets relative to the item
};

Error mismatch(const std::string& where, const std::string& message) { return verification_mismatch(where, message); }

std::string item_name(const DcpItem& item) { return (item.tensor ? "tensor '" : "value '") + item.fqn + "'"; }

// The zip of one item, parsed again: its records where they were written,
// its tensor the one intended.
void verify_item(const std::shared_ptr<const InputFile>& file, const CheckpointImpl& impl, const DcpItem& item,
                 const WrittenItem& w, ReadBack& readback, VerifyReport& report) {
  const std::string what = item_name(item);
  CheckpointImpl back;
  back.file = InputFile::slice(file, w.offset, w.length,
                               std::string(kDataFile) + "[" + std::to_string(w.offset) + ":" +
                                   std::to_string(w.offset + w.length) + "]");
  back.limits = impl.limits;
  read_zip_checkpoint(back);
  check_written_records(back.zip->entries(), w.archive, impl, w.offset, what, readback, report);
  ++report.zips;
  if (item.tensor == nullptr) return;
  const Tensor& want = *item.tensor;
  const Tensor* got = back.tensor_of(back.root);
  if (got == nullptr || got->kind != TensorKind::kDense) throw mismatch(what, "the item reads back as no tensor");
  const Storage& storage = impl.storages[static_cast<size_t>(want.storage)];
  if (got->dtype != want.dtype || got->shape != want.shape || got->stride != want.stride ||
      got->storage_offset != want.storage_offset ||
      back.storages[static_cast<size_t>(got->storage)].nbytes != storage.output_nbytes()) {
    throw mismatch(what, "it reads back as " + std::string(dtype_name(got->dtype)) + " " + shape_text(got->shape) +
                             " strides " + shape_text(got->stride) + " at " + std::to_string(got->storage_offset) +
                             ", " + std::string(dtype_name(want.dtype)) + " " + shape_text(want.shape) + " strides " +
                             shape_text(want.stride) + " at " + std::to_string(want.storage_offset) + " was written");
  }
  ++report.tensors;
}

bool same_location(const DcpLocation& a, const DcpLocation& b) {
  return a.file == b.file && a.offset == b.offset && a.length == b.length && a.transforms == b.transforms;
}

bool same_path(const std::vector<DcpPathStep>& a, const std::vector<DcpPathStep>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_int != b[i].is_int || (a[i].is_int ? a[i].index != b[i].index : a[i].key != b[i].key)) return false;
  }
  return true;
}

// .metadata parsed again, by the reader's own parser, and compared with what was meant.
void verify_metadata(const std::filesystem::path& temp, const std::vector<DcpEntry>& meant, const ReadLimits& limits) {
  const auto file = InputFile::open(temp);
  const FileBytes bytes = file->read_bytes(0, file->size(), ".metadata");
  const DcpMetadata back = parse_dcp_metadata(bytes.span(), limits);
  if (back.entries.size() != meant.size()) {
    throw mismatch(".metadata", std::to_string(back.entries.size()) + " entries read back, " +
                                    std::to_string(meant.size()) + " were written");
  }
  for (size_t i = 0; i < meant.size(); ++i) {
    const DcpEntry& a = meant[i];
    const DcpEntry& b = back.entries[i];
    const bool same = a.fqn == b.fqn && a.is_tensor == b.is_tensor && same_path(a.path, b.path) &&
                      (a.is_tensor ? a.dtype == b.dtype && a.size == b.size && b.chunks.size() == a.chunks.size() &&
                                         b.chunks.front().offsets == a.chunks.front().offsets &&
                                         b.chunks.front().sizes == a.chunks.front().sizes &&
                                         same_location(a.chunks.front().location, b.chunks.front().location)
                                   : same_location(a.location, b.location));
    if (!same) throw mismatch(".metadata", "entry " + std::to_string(i) + " ('" + b.fqn + "') is not the one written ('" + a.fqn + "')");
  }
}

DcpSaveResult save_dcp_directory(const Checkpoint& checkpoint, const std::vector<DcpItem>& items,
                                 const std::filesystem::path& directory, const SaveOptions& options) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  // Before writing anything: what the items' pickles would call and the GPU asked for.
  refuse_unknown_calls(checkpoint, options.allow_globals);
  if (options.verify) require_gpu_if_asked(options.verify_options.gpu);
  read_in_left_payloads(checkpoint);

  std::error_code ec;
  const bool made = std::filesystem::create_directories(directory, ec);
  if (!std::filesystem::is_directory(directory)) {
    std::error_code ignored;
    throw Error(ErrorKind::kIo, std::filesystem::exists(directory, ignored) || !ec
                                    ? "it is there and is not a directory (a DCP checkpoint is one)"
                                    : ec.message());
  }
  // A directory made here goes again when nothing is written into it.
  struct RemoveIfEmpty {
    const std::filesystem::path& directory;
    bool armed;
    ~RemoveIfEmpty() {
      std::error_code ignored;
      if (armed) std::filesystem::remove(directory, ignored);  // only an empty one
    }
  } made_here{directory, made};
  // .metadata first: an existing checkpoint there is refused before anything is written.
  OutputPolicy policy = options.policy;
  policy.keep_identical = false;  // one file only (outputs.h)
  AtomicFile metadata_out(directory / ".metadata", options.overwrite, &policy);
  AtomicFile data_out(directory / kDataFile, options.overwrite, &policy);
  guard_replaced_input(impl, metadata_out);
  guard_replaced_input(impl, data_out);

  uint64_t total = 0;
  for (const DcpItem& item : items) {
    if (item.tensor != nullptr) total += impl.storages[static_cast<size_t>(item.tensor->storage)].output_nbytes();
  }
  // FileSystemWriter's order in a file: the bytes items, then the tensors.
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].tensor == nullptr) order.push_back(i);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].tensor != nullptr) order.push_back(i);
  }
  std::vector<WrittenItem> written(items.size());
  uint64_t done_before = 0;
  // Counted once, not by each item's pipeline (a system call each).
  const unsigned threads = write_threads(options.threads);
  for (size_t i : order) {
    const DcpItem& item = items[i];
    SaveOptions item_options = options;
    item_options.threads = threads;
    item_options.archive_root = "archive";  // torch.save to a stream
    item_options.progress = [&](std::string_view phase, uint64_t done, uint64_t) {
      if (options.progress) options.progress(phase, done_before + done, total);
    };
    ItemSink sink(data_out.sink());
    try {
      if (item.tensor != nullptr) {
        // The tensor alone, as the chunk torch writes: a plain tensor
        // (detached, no Parameter, moved to the CPU) over its storage.
        const Tensor& t = *item.tensor;
        ValueGraph scratch;
        Value* call = scratch.make(ValueKind::kObject);
        make_rebuild_call(scratch, *call, impl.storages, t.storage, t.storage_offset, t.shape, t.stride, false);
        written[i].archive = write_archive(impl, call, ArchiveStyle::newest(), sink, item_options, nullptr, "cpu");
        done_before += impl.storages[static_cast<size_t>(t.storage)].output_nbytes();
      } else {
        // torch.save(value) as DCP's planner does it: tensors inside stay where they were saved.
        written[i].archive = write_archive(impl, item.value, ArchiveStyle::newest(), sink, item_options);
      }
    } catch (Error& e) {
      throw e.within(item_name(item));
    }
    written[i].offset = sink.base();
    written[i].length = sink.position();
  }
  data_out.flush();

  std::vector<DcpEntry> entries;
  for (size_t i = 0; i < items.size(); ++i) {
    DcpEntry e;
    e.fqn = items[i].fqn;
    e.path = items[i].path;
    const DcpLocation at{kDataFile, written[i].offset, written[i].length, {}};
    if (const Tensor* t = items[i].tensor) {
      e.is_tensor = true;
      e.dtype = t->dtype;
      e.size = t->shape;
      e.chunks.push_back({std::vector<int64_t>(t->shape.size(), 0), t->shape, at});
    } else {
      e.location = at;
    }
    entries.push_back(std::move(e));
  }
  const std::string pickle = dcp_metadata_pickle(entries, directory.string(), random_uuid4());
  metadata_out.sink().write(std::as_bytes(std::span<const char>(pickle.data(), pickle.size())));
  metadata_out.flush();

  DcpSaveResult result;
  result.files = {(directory / kDataFile).string(), (directory / ".metadata").string()};
  result.bytes = data_out.sink().position() + pickle.size();
  for (const DcpItem& item : items) ++(item.tensor != nullptr ? result.tensors : result.values);
  if (options.verify) {
    const auto start = std::chrono::steady_clock::now();
    VerifyReport report;
    report.written = true;
    report.format = CheckpointFormat::kDcp;
    VerifyOptions verify_options = options.verify_options;
    if (!verify_options.progress) verify_options.progress = options.progress;
    try {
      ReadBack readback(data_out.temp_path().string(), verify_options.gpu, verify_options.progress,
                        data_out.sink().position());
      const auto file = InputFile::open(data_out.temp_path());
      for (size_t i : order) verify_item(file, impl, items[i], written[i], readback, report);
      readback.finish_device();
      report.gpu = readback.gpu();
      verify_metadata(metadata_out.temp_path(), entries, impl.limits);
    } catch (Error& e) {
      throw verification_failure(e, "checkpoint");
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.verification = report;
  }
  commit_outputs({&data_out, &metadata_out}, impl, policy, options.sync);  // .metadata last: the directory is a checkpoint once it is there
  made_here.armed = false;
  return result;
}

}  // namespace

DcpSaveResult save_dcp(const Checkpoint& checkpoint, const std::filesystem::path& directory, const SaveOptions& options) {
  // What DCP cannot hold is the input's: said of it, before the directory is touched.
  const std::vector<DcpItem> items =
      error_boundary(checkpoint.file_name(), [&] { return plan_dcp_items(impl_of(checkpoint)); });
  return error_boundary(directory.string(), [&] {
    try {
      return save_dcp_directory(checkpoint, items, directory, options);
    } catch (Error& e) {
      if (e.kind() == ErrorKind::kIo || e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu) {
        e.note("nothing was written");
      }
      throw;
    }
  });
}

}  // namespace ckptfix
