#include <chrono>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <vector>
#include <xxhash.h>

#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "model/checkpoint_impl.h"
#include "error_boundary.h"
#include "io/input_file.h"
#include "bytes/storage_reader.h"
#include "verify/byte_checker.h"
#include "verify/gpu.h"
#include "verify/torch_offsets.h"
#include "zip/crc32.h"
#include "zip/record_reader.h"
#include "zip/zip_reader.h"

namespace ckptfix {
namespace {

Error mismatch(const std::string& where, const std::string& message) {
  return Error(ErrorKind::kVerification, message).at(where);
}

// Feeds a ByteChecker from a RecordReader.
Digest digest_record(ByteChecker& checker, RecordReader& reader, bool through_gpu) {
  return checker.digest(reader.remaining(), [&](std::span<std::byte> out) { reader.read(out); }, through_gpu);
}

// The tensors read back must be the tensors the passes intended.
void compare_tensors(const Checkpoint& intended, const Checkpoint& back, const SaveResult& written, VerifyReport& report) {
  std::unordered_map<size_t, std::string> output_key;
  for (const WrittenStorage& w : written.storages) output_key[w.storage] = w.key;
  const auto want = intended.tensor_positions();
  const auto got = back.tensor_positions();
  if (want.size() != got.size()) {
    throw mismatch("data.pkl", "the pickle read back has " + std::to_string(got.size()) + " tensor positions, " +
                                   std::to_string(want.size()) + " were written");
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string where = "key '" + path_to_string(want[i].path) + "'";
    if (want[i].path != got[i].path) {
      throw mismatch(where, "tensor position " + std::to_string(i) + " reads back as '" + path_to_string(got[i].path) + "'");
    }
    const Tensor& a = intended.tensors()[want[i].tensor];
    const Tensor& b = back.tensors()[got[i].tensor];
    const Storage& sa = intended.storages()[static_cast<size_t>(a.storage)];
    const Storage& sb = back.storages()[static_cast<size_t>(b.storage)];
    auto differ = [&](const std::string& what, const std::string& expected, const std::string& found) {
      throw mismatch(where, what + " " + expected + " expected, " + found + " found");
    };
    if (a.dtype != b.dtype) differ("dtype", std::string(dtype_name(a.dtype)), std::string(dtype_name(b.dtype)));
    if (a.shape != b.shape) differ("shape", shape_text(a.shape), shape_text(b.shape));
    if (a.stride != b.stride) differ("stride", shape_text(a.stride), shape_text(b.stride));
    if (a.storage_offset != b.storage_offset) {
      differ("storage offset", std::to_string(a.storage_offset), std::to_string(b.storage_offset));
    }
    if (a.requires_grad != b.requires_grad) differ("requires_grad", a.requires_grad ? "True" : "False", b.requires_grad ? "True" : "False");
    if (a.parameter != b.parameter) differ("Parameter", a.parameter ? "yes" : "no", b.parameter ? "yes" : "no");
    if (sa.location != sb.location) differ("device", "'" + sa.location + "'", "'" + sb.location + "'");
    const std::string& key = output_key[static_cast<size_t>(a.storage)];
    if (key != sb.key) differ("storage", "'" + key + "'", "'" + sb.key + "'");  // sharing
    if (sa.output_nbytes() != sb.nbytes) {
      differ("storage size", std::to_string(sa.output_nbytes()) + " bytes", std::to_string(sb.nbytes) + " bytes");
    }
  }
  report.tensors = want.size();
}

}  // namespace

GpuMode parse_gpu_mode(const std::string& text) {
  if (text == "auto") return GpuMode::kAuto;
  if (text == "require") return GpuMode::kRequire;
  if (text == "off") return GpuMode::kOff;
  throw Error(ErrorKind::kInvalidArgument, "--gpu '" + text + "': expected auto, require or off");
}

void require_gpu_if_asked(GpuMode mode) {
  if (mode == GpuMode::kRequire && !gpu_status().usable) {
    throw Error(ErrorKind::kGpu, "GPU round trip required (--gpu require) but it cannot run: " + gpu_status().reason);
  }
}

std::string VerifyReport::summary() const {
  std::string s;
  if (written) {
    s = "read back " + std::to_string(records) + " records (";
    if (records_copied > 0) {
      s += std::to_string(records_copied) + " copied unchanged: CRC-32 as the input records; " +
           std::to_string(records - records_copied) + " others: ";
    }
    s += "CRC-32 and XXH3 as written), " + std::to_string(tensors) + " tensors as intended";
  } else {
    if (zip) {
      s = std::to_string(records) + " records (CRC-32 ok";
      if (records_crc_checked != records) s += " on " + std::to_string(records_crc_checked) + ", the others record none";
      s += "), ";
    } else {
      s = "legacy format (no CRCs), ";
    }
    s += std::to_string(storages) + " storages, " + std::to_string(tensors) + " tensors";
  }
  if (gpu.status == "ok") {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; GPU round trip ok on %s: %.1f MiB in %.3f s", gpu.device.c_str(),
                  static_cast<double>(gpu.bytes) / (1 << 20), gpu.seconds);
    s += buf;
  } else if (gpu.status == "skipped") {
    s += "; GPU round trip skipped: " + gpu.reason;
  } else {
    s += "; GPU round trip off";
  }
  return s;
}

namespace {

VerifyReport verify_written_file(const std::filesystem::path& path, const Checkpoint& intended,
                                 const SaveResult& written, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.written = true;
  uint64_t total = 0;
  for (const SaveResult::Record& r : written.records) total += r.size;
  ByteChecker checker(options.gpu, report.gpu, options.progress, total);
  try {
    auto file = InputFile::open(path);
    ZipReader zip(file);
    // The archive: every record where it was written, aligned, with its CRC.
    if (zip.entries().size() != written.records.size()) {
      throw mismatch("central directory", std::to_string(zip.entries().size()) + " records read back, " +
                                              std::to_string(written.records.size()) + " were written");
    }
    for (size_t i = 0; i < written.records.size(); ++i) {
      const ZipEntry& e = zip.entries()[i];
      const SaveResult::Record& r = written.records[i];
      if (e.name != r.name) throw mismatch("central directory", "record " + std::to_string(i) + " is '" + e.name + "', '" + r.name + "' was written");
      if (e.data_offset != r.data_offset || e.size != r.size || e.method != 0) {
        throw mismatch(r.name, "record reads back at offset " + hex_offset(e.data_offset) + " with " +
                                   std::to_string(e.size) + " bytes, written at " + hex_offset(r.data_offset) +
                                   " with " + std::to_string(r.size));
      }
      if (e.data_offset % 64 != 0) throw mismatch(r.name, "record data at " + hex_offset(e.data_offset) + " is not 64-byte aligned");
      if (e.crc32 != r.crc32) throw mismatch(r.name, "central directory CRC-32 " + hex32(e.crc32) + ", " + hex32(r.crc32) + " was written");

      // The bytes, read back through the page cache (and the GPU), unless the
      // writer already did that for this record as soon as it was complete.
      const bool is_storage = r.name.find("/data/") != std::string::npos;
      if (!r.read_back) {
        RecordReader reader(*file, e.data_offset, e.compressed_size, false, e.size, e.name);
        const Digest d = digest_record(checker, reader, is_storage);
        if (d.crc != r.crc32) {
          throw mismatch(r.name, "the bytes read back have CRC-32 " + hex32(d.crc) + " but " + hex32(r.crc32) + " was written");
        }
        if (r.has_hash && d.hash != r.hash) {
          throw mismatch(r.name, "the bytes read back differ from the bytes meant to be written (XXH3 " + hex64(d.hash) +
                                     " read, " + hex64(r.hash) + " expected)");
        }
        if (is_storage && checker.gpu_enabled() && d.gpu_hash != d.hash) {
          throw mismatch(r.name, "the bytes that came back from GPU memory differ (XXH3 " + hex64(d.gpu_hash) + ", " +
                                     hex64(d.hash) + " sent)");
        }
      }
      ++report.records;
      ++report.records_crc_checked;
      if (!r.has_hash) ++report.records_copied;
      report.bytes += e.size;
      if (is_storage) ++report.storages;
    }
    // The object graph, re-parsed with the limits the input was read with.
    OpenOptions reopen;
    reopen.limits = intended.read_limits();
    Checkpoint back = Checkpoint::open(path, reopen);
    check_torch_computed_offsets(back, *back.impl().zip);
    compare_tensors(intended, back, written, report);
    report.gpu.bytes += written.readback_gpu.bytes;
    report.gpu.seconds += written.readback_gpu.seconds;
  } catch (Error& e) {
    if (e.kind() == ErrorKind::kVerification || e.kind() == ErrorKind::kGpu) throw;
    // Anything else the reader says about our own output is a verification failure.
    Error failure(ErrorKind::kVerification, "the written file does not read back: " + e.message());
    failure.at(e.location());
    throw failure;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

VerifyReport verify_input_file(const std::filesystem::path& path, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  auto file = InputFile::open(path);
  ByteChecker checker(options.gpu, report.gpu, options.progress, file->size());
  try {
    // CRCs first: a damaged record is named even when it would also break the parse.
    report.zip = looks_like_zip(file->bytes());
    if (report.zip) {
      const ReadLimits& limits = options.open.limits;
      ZipReader zip(file, {limits.max_storages, limits.max_inflate_ratio, limits.inflate_allowance_bytes,
                           limits.max_inflated_bytes});
      for (const ZipEntry& e : zip.entries()) {
        RecordReader reader(*file, e.data_offset, e.compressed_size, e.method == 8, e.size, e.name);
        const Digest d = digest_record(checker, reader, false);
        ++report.records;
        report.bytes += e.size;
        if (e.crc32 == 0 && e.size != 0) continue;  // no CRC recorded (torch >= 2.6 option)
        if (d.crc != e.crc32) {
          throw Error(ErrorKind::kCorrupt, "CRC-32 mismatch: the archive records " + hex32(e.crc32) + " but the data gives " +
                                               hex32(d.crc) + "; the record is damaged")
              .at(e.name);
        }
        ++report.records_crc_checked;
      }
    }
    Checkpoint ck = Checkpoint::open(path, options.open);
    if (ck.impl().zip) check_torch_computed_offsets(ck, *ck.impl().zip);
    report.tensors = ck.tensor_positions().size();
    for (const Storage& s : ck.storages()) {
      ++report.storages;
      if (!checker.gpu_enabled()) continue;
      RecordReader reader = open_storage_record(*file, s);
      const Digest d = digest_record(checker, reader, true);
      if (d.gpu_hash != d.hash) {
        throw Error(ErrorKind::kGpu, "the bytes that came back from GPU memory differ (XXH3 " + hex64(d.gpu_hash) +
                                         ", " + hex64(d.hash) + " sent)")
            .at(s.source.record);
      }
    }
  } catch (Error& e) {
    e.in_file(path.string());
    throw;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

VerifyReport verify_written(const std::filesystem::path& path, const Checkpoint& intended, const SaveResult& written,
                            const VerifyOptions& options) {
  // Errors are about the file being written: save() names it (not its temporary name).
  return error_boundary(path.string(), [&] { return verify_written_file(path, intended, written, options); }, false);
}

VerifyReport verify_file(const std::filesystem::path& path, const VerifyOptions& options) {
  return error_boundary(path.string(), [&] { return verify_input_file(path, options); });
}

}  // namespace ckptfix
