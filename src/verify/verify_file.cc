#include <chrono>
#include <cstdio>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "ckptfix/verify.h"
#include "error_boundary.h"
#include "io/input_file.h"
#include "bytes/byte_checker.h"
#include "verify/reparse.h"
#include "zip/record_reader.h"
#include "zip/zip_reader.h"

namespace ckptfix {

std::string VerifyReport::summary() const {
  std::string s;
  if (written && format == CheckpointFormat::kSafetensors) {
    s = "read back the header and " + std::to_string(storages) + " tensors (";
    if (records_copied > 0) {
      s += std::to_string(records_copied) + " copied unchanged: CRC-32 as the input records; " +
           std::to_string(storages - records_copied) + " others: ";
    }
    s += "XXH3 as written), " + std::to_string(tensors) + " tensors as intended";
  } else if (written) {
    s = "read back " + std::to_string(records) + " records (";
    if (records_copied > 0) {
      s += std::to_string(records_copied) + " copied unchanged: CRC-32 as the input records; " +
           std::to_string(records - records_copied) + " others: ";
    }
    s += "CRC-32 and XXH3 as written), " + std::to_string(tensors) + " tensors as intended";
  } else {
    if (format == CheckpointFormat::kZip) {
      s = std::to_string(records) + " records (CRC-32 ok";
      if (records_crc_checked != records) s += " on " + std::to_string(records_crc_checked) + ", the others record none";
      s += "), ";
    } else if (format == CheckpointFormat::kDcp) {
      s = "distributed checkpoint: " + std::to_string(records) + " records of its " + std::to_string(zips) +
          " chunk and value zips (CRC-32 ok), ";
    } else if (format == CheckpointFormat::kZero) {
      s = "DeepSpeed ZeRO checkpoint: " + std::to_string(records) + " records of its " + std::to_string(zips) +
          " files (CRC-32 ok), ";
    } else if (format == CheckpointFormat::kShardIndex) {
      s = "shard set: " + (records > 0 ? std::to_string(records) + " records of its torch shards (CRC-32 ok), "
                                       : std::string("safetensors shards (no CRCs; every byte read), "));
    } else {
      s = std::string(format_name(format)) + " format (no CRCs), ";
    }
    s += std::to_string(storages) + " storages, " + std::to_string(tensors) + " tensors";
  }
  if (gpu.status == GpuReport::Status::kOk) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; GPU load test ok on %s: %llu storages (%.1f MiB) loaded and checked on the device in %.3f s "
                  "(%.1f GB/s), %llu NaN, %llu Inf",
                  gpu.device.c_str(), static_cast<unsigned long long>(gpu.storages),
                  static_cast<double>(gpu.bytes) / (1 << 20), gpu.seconds,
                  gpu.seconds > 0 ? static_cast<double>(gpu.bytes) / gpu.seconds / 1e9 : 0.0,
                  static_cast<unsigned long long>(gpu.nan), static_cast<unsigned long long>(gpu.inf));
    s += buf;
  } else if (gpu.status == GpuReport::Status::kSkipped) {
    s += "; GPU load test skipped: " + gpu.reason;
  } else {
    s += "; GPU load test off";
  }
  return s;
}

namespace {

// Feeds a ByteChecker from a RecordReader. The CRC-32 is all a file's own
// check compares (its archive records nothing else), so no XXH3.
Digest digest_record(ByteChecker& checker, RecordReader& reader, const std::optional<OnDevice>& device) {
  return checker.digest(
      reader.remaining(), [&](std::span<std::byte> out) { reader.read(out); }, device, Sum::kCrc32);
}

// Every record of a zip file read and its CRC-32 checked.
void check_zip_crcs(const std::shared_ptr<const InputFile>& file, const VerifyOptions& options, ByteChecker& checker,
                    VerifyReport& report) {
  try {
    const ReadLimits& limits = options.open.limits;
    ZipReader zip(file, {limits.max_storages, limits.max_inflate_ratio, limits.inflate_allowance_bytes,
                         limits.max_inflated_bytes});
    for (const ZipEntry& e : zip.entries()) {
      RecordReader reader(*file, e.data_offset, e.compressed_size,
                          e.method == 8 ? RecordEncoding::kDeflated : RecordEncoding::kStored, e.size, e.name);
      const Digest d = digest_record(checker, reader, std::nullopt);
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
  } catch (Error& e) {
    e.in_file(file->name());
    throw;
  }
}

VerifyReport verify_input_file(const std::filesystem::path& path, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(path, ec);  // a distributed checkpoint
  auto file = directory ? nullptr : InputFile::open(path);
  ByteChecker checker(options.gpu, report.gpu, options.progress, file ? file->size() : 0);
  try {
    // CRCs first: a damaged record is named even when it would also break the parse.
    if (file && looks_like_zip(file->head(4).span())) check_zip_crcs(file, options, checker, report);
    const Checkpoint ck = reparse(path, options.open);
    // A distributed checkpoint's chunk and value zips, each checked whole.
    for (const auto& zip : impl_of(ck).embedded_zips) {
      try {
        check_zip_crcs(zip.file, options, checker, report);
      } catch (Error& e) {
        throw e.within(zip.what);
      }
      ++report.zips;
    }
    // A shard set's zip shards (.bin) have their CRCs checked the same way.
    if (ck.format() == CheckpointFormat::kShardIndex) {
      for (const auto& shard : impl_of(ck).shards) {
        if (looks_like_zip(shard->head(4).span())) check_zip_crcs(shard, options, checker, report);
      }
    }
    // A ZeRO checkpoint's files, every one whole: its master weights and
    // moments (never read by a conversion) are checked too.
    if (ck.format() == CheckpointFormat::kZero) {
      check_zip_crcs(impl_of(ck).file, options, checker, report);
      ++report.zips;
      for (const auto& rank_file : impl_of(ck).shards) {
        check_zip_crcs(rank_file, options, checker, report);
        ++report.zips;
      }
    }
    report.format = ck.format();
    report.tensors = ck.tensor_positions().size();
    for (const Storage& s : impl_of(ck).storages) {
      ++report.storages;
      // Bytes no CRC covers (safetensors files and shards) are at least read:
      // a file that is short or unreadable shows here.
      // So are tensors assembled from chunks not checked pairwise for
      // overlaps: reading them finds any gap.
      const bool read_anyway = report.format == CheckpointFormat::kSafetensors ||
                               (report.format == CheckpointFormat::kShardIndex && s.source.crc32 == 0) ||
                               (s.gather && !s.gather->tiling_checked);
      if (!checker.gpu_enabled() && !read_anyway) continue;
      RecordReader reader = open_storage_record(impl_of(ck).input_of(s), s);
      digest_record(checker, reader, OnDevice{s.dtype, ErrorKind::kGpu, s.source.record});
      if (read_anyway) report.bytes += s.nbytes;
    }
    checker.finish_device();
  } catch (Error& e) {
    e.in_file(path.string());
    throw;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

VerifyReport verify_file(const std::filesystem::path& path, const VerifyOptions& options) {
  return error_boundary(path.string(), [&] { return verify_input_file(path, options); });
}

}  // namespace ckptfix
