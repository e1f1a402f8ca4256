#include "verify/verify_written.h"

#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "io/input_file.h"
#include "bytes/background.h"
#include "bytes/byte_checker.h"
#include "verify/reparse.h"
#include "zip/zip_reader.h"

namespace ckptfix {
namespace {

Error mismatch(const std::string& where, const std::string& message) { return verification_mismatch(where, message); }

// The tensors read back must be the tensors the passes intended (at `want`,
// intended.tensor_positions()).
void compare_tensors(const Checkpoint& intended, const std::vector<TensorPosition>& want, const Checkpoint& back,
                     const SaveResult& written, VerifyReport& report) {
  // The key each storage of `intended` was written under ("" where none).
  std::vector<std::string_view> output_key(impl_of(intended).storages.size());
  for (const WrittenStorage& w : written.storages) {
    if (w.storage < output_key.size()) output_key[w.storage] = w.key;
  }
  const auto got = back.tensor_positions();
  if (want.size() != got.size()) {
    throw mismatch("data.pkl", "the pickle read back has " + std::to_string(got.size()) + " tensor positions, " +
                                   std::to_string(want.size()) + " were written");
  }
  for (size_t i = 0; i < want.size(); ++i) {
    // Named only when it differs (a file may have 100,000 tensors).
    const auto where = [&] { return "key '" + path_to_string(want[i].path) + "'"; };
    if (want[i].path != got[i].path) {
      throw mismatch(where(), "tensor position " + std::to_string(i) + " reads back as '" + path_to_string(got[i].path) + "'");
    }
    const Tensor& a = impl_of(intended).tensors[want[i].tensor];
    const Tensor& b = impl_of(back).tensors[got[i].tensor];
    auto differ = [&](const std::string& what, const std::string& expected, const std::string& found) {
      throw mismatch(where(), what + " " + expected + " expected, " + found + " found");
    };
    if ((a.kind == TensorKind::kMeta) != (b.kind == TensorKind::kMeta)) {
      differ("meta tensor", a.kind == TensorKind::kMeta ? "yes" : "no", b.kind == TensorKind::kMeta ? "yes" : "no");
    }
    if (a.kind == TensorKind::kMeta) {  // no storage: what torch makes it of
      if (a.dtype != b.dtype) differ("dtype", std::string(dtype_name(a.dtype)), std::string(dtype_name(b.dtype)));
      if (a.shape != b.shape) differ("shape", shape_text(a.shape), shape_text(b.shape));
      if (a.stride != b.stride) differ("stride", shape_text(a.stride), shape_text(b.stride));
      if (a.requires_grad != b.requires_grad) differ("requires_grad", a.requires_grad ? "True" : "False", b.requires_grad ? "True" : "False");
      if (a.parameter != b.parameter) differ("Parameter", a.parameter ? "yes" : "no", b.parameter ? "yes" : "no");
      continue;
    }
    const Storage& sa = impl_of(intended).storages[static_cast<size_t>(a.storage)];
    const Storage& sb = impl_of(back).storages[static_cast<size_t>(b.storage)];
    if (a.dtype != b.dtype) differ("dtype", std::string(dtype_name(a.dtype)), std::string(dtype_name(b.dtype)));
    if (a.shape != b.shape) differ("shape", shape_text(a.shape), shape_text(b.shape));
    if (a.stride != b.stride) differ("stride", shape_text(a.stride), shape_text(b.stride));
    if (a.storage_offset != b.storage_offset) {
      differ("storage offset", std::to_string(a.storage_offset), std::to_string(b.storage_offset));
    }
    if (a.requires_grad != b.requires_grad) differ("requires_grad", a.requires_grad ? "True" : "False", b.requires_grad ? "True" : "False");
    if (a.parameter != b.parameter) differ("Parameter", a.parameter ? "yes" : "no", b.parameter ? "yes" : "no");
    if (sa.location != sb.location) differ("device", "'" + sa.location + "'", "'" + sb.location + "'");
    const std::string_view key = output_key[static_cast<size_t>(a.storage)];
    if (key != sb.key) differ("storage", std::string("'").append(key).append("'"), "'" + sb.key + "'");  // sharing
    if (sa.output_nbytes() != sb.nbytes) {
      differ("storage size", std::to_string(sa.output_nbytes()) + " bytes", std::to_string(sb.nbytes) + " bytes");
    }
  }
  report.tensors = want.size();
}

VerifyReport verify_written_file(const std::filesystem::path& path, const Checkpoint& intended,
                                 const SaveResult& written, const VerifyOptions& options, bool inject_gpu_fault,
                                 unsigned threads, const std::function<void(std::shared_ptr<void>)>& dispose,
                                 EarlyReparse* early) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.written = true;
  uint64_t total = 0;
  for (const SaveResult::Record& r : written.records) total += r.size;
  ReadBack readback(path.string(), options.gpu, options.progress, total, inject_gpu_fault);
  readback.file_is_complete();
  try {
    // Beside the re-parse, on a second thread where the write may use one:
    // the archive's directory and records' bytes read back, and where the
    // tensors were meant to be. Neither needs the other; for 100,000
    // tensors each takes a good part of the re-parse's time.
    Background beside(threads == 1);
    std::vector<TensorPosition> want;
    std::future<void> records = beside.run([&] {
      const ZipReader zip(InputFile::open(path));
      check_written_records(zip.entries(), written, impl_of(intended), 0, "", readback, report);
      want = intended.tensor_positions();
    });
    // The object graph, re-parsed with the limits the input was read with.
    OpenOptions reopen;
    reopen.limits = intended.read_limits();
    std::optional<Checkpoint> back;
    std::exception_ptr reparse_failure;
    try {
      // The parse of data.pkl begun as it was written, waited for once the
      // archive's directory is read, while the records are read back.
      PreparsedPickleSource preparsed;
      if (early != nullptr) preparsed = [early] { return early->take(); };
      back.emplace(reparse(path, reopen, std::move(preparsed)));
    } catch (...) {
      reparse_failure = std::current_exception();
    }
    records.get();  // a record that differs is said first, as it is the likelier cause
    if (reparse_failure) std::rethrow_exception(reparse_failure);
    compare_tensors(intended, want, *back, written, report);
    if (dispose) dispose(std::make_shared<Checkpoint>(std::move(*back)));
    readback.finish_device();
    report.gpu = readback.gpu();
    report.gpu.add(written.readback_gpu);
  } catch (Error& e) {
    throw verification_failure(e, "file");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

Error verification_mismatch(const std::string& where, const std::string& message) {
  return Error(ErrorKind::kVerification, message).at(where);
}

Error verification_failure(const Error& e, const std::string& what) {
  // A stop from outside (a signal) during the read-back is not a fault of
  // the file: it stays an interruption.
  if (e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu || e.kind() == ErrorKind::kInterrupted) {
    return e;
  }
  // Anything else the reader says about our own output is a verification failure.
  Error failure(ErrorKind::kVerification, "the written " + what + " does not read back: " + e.message());
  failure.at(e.location());
  return failure;
}

void check_written_records(const std::vector<ZipEntry>& entries, const SaveResult& written,
                           const CheckpointImpl& intended, uint64_t base, const std::string& what, ReadBack& readback,
                           VerifyReport& report) {
  auto in_zip = [&](const std::string& where) { return what.empty() ? where : what + ": " + where; };
  // Each storage record is loaded on the device as its dtype: the dtype of
  // each record, none for data.pkl and the other small records. Storages
  // are written in their order, which one pass follows; where it did not,
  // they are found by name.
  std::vector<std::optional<DType>> record_dtype(written.records.size());
  auto dtype_of = [&](const WrittenStorage& s) { return intended.storages[s.storage].output_dtype(); };
  size_t next = 0;
  for (size_t i = 0; i < written.records.size() && next < written.storages.size(); ++i) {
    if (written.records[i].name == written.storages[next].record) record_dtype[i] = dtype_of(written.storages[next++]);
  }
  if (next != written.storages.size()) {
    std::unordered_map<std::string_view, DType> by_name;
    for (const WrittenStorage& s : written.storages) by_name.emplace(s.record, dtype_of(s));
    for (size_t i = 0; i < written.records.size(); ++i) {
      const auto it = by_name.find(written.records[i].name);
      record_dtype[i] = it == by_name.end() ? std::nullopt : std::optional(it->second);
    }
  }
  // The archive: every record where it was written, aligned, with its CRC.
  if (entries.size() != written.records.size()) {
    throw mismatch(in_zip("central directory"), std::to_string(entries.size()) + " records read back, " +
                                                    std::to_string(written.records.size()) + " were written");
  }
  for (size_t i = 0; i < written.records.size(); ++i) {
    const ZipEntry& e = entries[i];
    const SaveResult::Record& r = written.records[i];
    if (e.name != r.name) {
      throw mismatch(in_zip("central directory"),
                     "record " + std::to_string(i) + " is '" + e.name + "', '" + r.name + "' was written");
    }
    if (e.data_offset != r.data_offset || e.size != r.size || e.method != 0) {
      throw mismatch(in_zip(r.name), "record reads back at offset " + hex_offset(e.data_offset) + " with " +
                                         std::to_string(e.size) + " bytes, written at " + hex_offset(r.data_offset) +
                                         " with " + std::to_string(r.size));
    }
    if (e.data_offset % 64 != 0) {
      throw mismatch(in_zip(r.name), "record data at " + hex_offset(e.data_offset) + " is not 64-byte aligned");
    }
    if (e.crc32 != r.crc32) {
      throw mismatch(in_zip(r.name), "central directory CRC-32 " + hex32(e.crc32) + ", " + hex32(r.crc32) + " was written");
    }
    // The bytes, read back through the page cache (and the GPU), unless the
    // writer already did that for this record as soon as it was complete.
    const bool is_storage = record_dtype[i].has_value();
    if (!r.read_back) {
      const std::string within = what.empty() ? std::string() : in_zip(r.name);  // no copy of every name
      readback.check(what.empty() ? r.name : within, base + r.data_offset, r.size, r.crc32,
                     r.has_hash ? std::optional(r.hash) : std::nullopt, record_dtype[i]);
    }
    ++report.records;
    ++report.records_crc_checked;
    if (!r.has_hash) ++report.records_copied;
    report.bytes += e.size;
    if (is_storage) ++report.storages;
  }
}

VerifyReport verify_written(const std::filesystem::path& path, const Checkpoint& intended, const SaveResult& written,
                            const VerifyOptions& options, bool inject_gpu_fault, unsigned threads,
                            const std::function<void(std::shared_ptr<void>)>& dispose, EarlyReparse* early) {
  // Errors are about the file being written: save() names it (not its temporary name).
  return error_boundary(
      path.string(),
      [&] {
        return verify_written_file(path, intended, written, options, inject_gpu_fault, threads, dispose, early);
      },
      false);
}

}  // namespace ckptfix
