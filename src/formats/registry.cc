// The format registry, and detection as torch does it: a zip local header
// signature means the zip format, a pickle PROTO opcode the legacy stream
// format. Files that are clearly something else get a specific error with a
// hint.
#include <cstdio>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "io/bytes.h"

namespace ckptfix {
namespace {

std::string hex_head(std::span<const std::byte> bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", std::to_integer<unsigned>(bytes[i]));
    out += buf;
  }
  return out;
}

bool is_zip(std::span<const std::byte> bytes) { return looks_like_zip(bytes); }

bool is_pickle(std::span<const std::byte> bytes) {
  return !bytes.empty() && std::to_integer<uint8_t>(bytes[0]) == 0x80;  // pickle PROTO
}

constexpr FormatReader kReaders[] = {
    {"zip", &is_zip, &read_zip_checkpoint},
    // Before legacy: a safetensors header length may start with 0x80, as a pickle does.
    {"safetensors", &is_safetensors, &read_safetensors_checkpoint},
    {"legacy", &is_pickle, &read_legacy_checkpoint},
    {"shard index", &is_shard_index, &read_shard_index, true},
};

// Reads any format; a file named by another (`named_as`: "shard") may not be
// one that names files itself.
// Signatures are in the first bytes; the readers read the rest themselves.
constexpr uint64_t kSignatureBytes = 4096;

void read_checkpoint(CheckpointImpl& impl, std::string_view named_as) {
  const FileBytes head = impl.file->head(kSignatureBytes);
  const std::span<const std::byte> bytes = head.span();
  if (bytes.empty()) throw Error(ErrorKind::kNotCheckpoint, "file is empty");
  if (bytes.size() < 4 && as_chars(bytes) == std::string_view("PK\x03\x04", 4).substr(0, bytes.size())) {
    throw Error(ErrorKind::kCorrupt, "file is " + std::to_string(bytes.size()) +
                                         " bytes, the start of a zip archive; the file is truncated");
  }
  for (const FormatReader& format : kReaders) {
    if (format.recognizes(bytes)) {
      if (format.names_files && !named_as.empty()) {
        throw Error(ErrorKind::kCorrupt, "a " + std::string(named_as) + " must be a file of tensors (torch.save or "
                                         "safetensors), but this is a " + std::string(format.name) +
                                         ", which names files of its own");
      }
      format.read(impl);
      return;
    }
  }
  // Formats recognised only to be refused with a hint.
  if (bytes.size() >= 8 && as_chars(bytes.first(8)) == "PYTORCH1") {
    throw Error(ErrorKind::kUnsupported,
                "this is the 2018 PYTORCH1 preview format, which torch itself no longer reads; re-save it with "
                "torch.save from the torch version that wrote it");
  }
  if (bytes.size() >= 262 && as_chars(bytes.subspan(257, 5)) == "ustar") {
    throw Error(ErrorKind::kUnsupported,
                "this is the tar checkpoint format of torch 0.1-0.3, which ckptfix does not read; load it with an "
                "older torch and save it again with torch.save to convert it");
  }
  if (bytes.size() >= 4 && load_le<uint32_t>(bytes.data()) == 0x06054b50) {
    throw Error(ErrorKind::kCorrupt, "zip archive without any records (empty zip)");
  }
  throw Error(ErrorKind::kNotCheckpoint, "not a PyTorch checkpoint: it starts with bytes " + hex_head(bytes) +
                                             ", neither a zip archive (torch >= 1.6), a pickle (torch < 1.6) nor a safetensors file");
}

}  // namespace

std::span<const FormatReader> format_readers() { return kReaders; }

void read_any_checkpoint(CheckpointImpl& impl) { read_checkpoint(impl, {}); }

void read_named_checkpoint(CheckpointImpl& impl, std::string_view kind) { read_checkpoint(impl, kind); }

}  // namespace ckptfix
