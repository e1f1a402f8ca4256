#include "write/storage_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <xxhash.h>

#include "ckptfix/error.h"
#include "dtype_kernels/convert.h"
#include "io/mapped_window.h"
#include "storage/storage_reader.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

// Below this, one task and one kernel call per storage cost more than they save.
constexpr uint64_t kMinFastPath = uint64_t{1} << 20;
// Kernel copies go in slices so progress can be reported.
constexpr uint64_t kCopySlice = uint64_t{256} << 20;
// Input bytes converted per buffer handed to the worker, and buffers in flight.
constexpr size_t kConvertSlice = size_t{2} << 20;
constexpr size_t kBuffers = 3;
// CRC-32 and XXH3 go over cache-sized pieces, so the second pass reads the cache.
constexpr size_t kPiece = size_t{256} << 10;

uint32_t crc_of_input(const InputFile& file, uint64_t offset, uint64_t size, const std::string& what) {
  uint32_t crc = 0;
  for_each_mapped(file.fd(), offset, size, what, [&](std::span<const std::byte> view) { crc = crc32_update(crc, view); });
  return crc;
}

Error damaged_input(const InputFile& file, const Storage& s, uint32_t actual) {
  return Error(ErrorKind::kCorrupt, "the input record is damaged: its bytes have CRC-32 " + hex32(actual) +
                                        " but the archive records " + hex32(s.source.crc32))
      .in_file(file.name())
      .at(s.source.record);
}

}  // namespace

StorageWriter::StorageWriter(const InputFile& input, std::shared_ptr<const InputFile> input_owner, ByteSink& sink,
                             ZipWriter& zip, ReadBack* readback, bool page_phase,
                             std::function<void(uint64_t)> progress)
    : input_(input),
      sink_(sink),
      zip_(zip),
      readback_(readback),
      page_phase_(page_phase),
      progress_(std::move(progress)),
      copier_(std::move(input_owner)) {}

void StorageWriter::write(const Storage& s, WrittenStorage& written) {
  const bool from_file = s.source.encoding == StorageSource::Encoding::kStored && input_.fd() >= 0 &&
                         s.nbytes >= kMinFastPath;
  const bool unchanged = !s.cast_to && !s.big_endian;
  const bool kernel = from_file && unchanged && sink_.can_copy_from();
  zip_.begin(written.record, written.nbytes,
             kernel && page_phase_ ? std::optional<uint64_t>(s.source.offset) : std::nullopt);
  bool crc_from_input = false;
  if (kernel && copy_in_kernel(s, written)) {
    crc_from_input = s.source.crc32 != 0;
  } else if (from_file) {
    convert_pipelined(s, written);
  } else {
    stream(s, written);
  }
  // Large records are read back on the worker while the next is written;
  // small ones are left to the final verification pass, which reads them anyway.
  if (readback_ != nullptr && written.nbytes >= kMinFastPath) read_back(s, written, crc_from_input);
}

bool StorageWriter::reads_back(const WrittenStorage& written) const {
  return readback_ != nullptr && written.nbytes >= kMinFastPath;
}

bool StorageWriter::copy_in_kernel(const Storage& s, WrittenStorage& written) {
  // The input's recorded CRC is the expected value; without one, compute it
  // from the input on the worker while the kernel copies.
  std::future<uint32_t> computed;
  if (s.source.crc32 == 0) {
    computed = worker_.run([this, &s] { return crc_of_input(input_, s.source.offset, s.nbytes, s.source.record); });
  }
  std::array<std::byte, 8> head;
  input_.read(s.source.offset, head, s.source.record);  // kMinFastPath > 8
  zip_.note_direct_head(head);
  uint64_t done = 0;
  while (done < s.nbytes) {
    const uint64_t n = std::min(kCopySlice, s.nbytes - done);
    if (!sink_.copy_from(input_.fd(), s.source.offset + done, n)) {
      if (done != 0) throw Error(ErrorKind::kIo, "the kernel copy stopped part-way").at(written.record);
      if (computed.valid()) computed.get();
      return false;  // not possible for these files: the caller streams instead
    }
    zip_.wrote_directly(n);
    done += n;
    progress_(n);
  }
  written.crc32 = computed.valid() ? computed.get() : s.source.crc32;
  written.has_hash = false;  // checked by CRC-32 against the input's bytes
  zip_.end(written.crc32);
  return true;
}

void StorageWriter::convert_pipelined(const Storage& s, WrittenStorage& written) {
  const DType from = s.dtype, to = s.output_dtype();
  const size_t in_size = element_size(from), out_size = element_size(to);
  const uint64_t total_elements = s.nbytes / in_size;
  const size_t slice = kConvertSlice / 16 * 16;  // whole elements of every type
  // The worker hashes and writes buffer b while this thread fills the next.
  std::array<std::vector<std::byte>, kBuffers> buffers;
  for (auto& b : buffers) b.resize(slice / in_size * out_size);
  std::array<std::future<void>, kBuffers> pending;
  uint32_t out_crc = 0;
  XXH3_state_t* hash = XXH3_createState();
  XXH3_64bits_reset(hash);
  uint32_t in_crc = 0;
  ConvertStats stats;
  uint64_t element = 0;
  size_t next = 0;
  try {
    for_each_mapped(input_.fd(), s.source.offset, s.nbytes, s.source.record, [&](std::span<const std::byte> view) {
      for (size_t at = 0; at < view.size(); at += slice) {
        const auto in = view.subspan(at, std::min(slice, view.size() - at));
        std::vector<std::byte>& out = buffers[next];
        if (pending[next].valid()) pending[next].get();  // the worker is done with this buffer
        const size_t count = in.size() / in_size;
        // CRC and convert piece by piece, so the conversion reads the input
        // from cache rather than from memory a second time.
        for (size_t p = 0; p < in.size(); p += kPiece) {
          const auto piece = in.subspan(p, std::min(kPiece, in.size() - p));
          const size_t n = piece.size() / in_size, first = p / in_size;
          std::byte* dst = out.data() + first * out_size;
          in_crc = crc32_update(in_crc, piece);
          if (from != to) {
            if (s.big_endian) {  // swap a copy, then convert it into the output
              std::vector<std::byte> swapped(piece.begin(), piece.end());
              byteswap_in_place(swapped, swap_unit(from));
              stats += convert_elements(from, to, swapped.data(), dst, n, {element + first, total_elements});
            } else {
              stats += convert_elements(from, to, piece.data(), dst, n, {element + first, total_elements});
            }
          } else {
            std::memcpy(dst, piece.data(), piece.size());
            if (s.big_endian) byteswap_in_place(std::span(dst, piece.size()), swap_unit(from));
          }
        }
        const size_t bytes = count * out_size;
        if (element == 0) zip_.note_direct_head(std::span(out.data(), std::min<size_t>(bytes, 8)));
        pending[next] = worker_.run([this, &out, bytes, &out_crc, hash] {
          const std::span<const std::byte> data(out.data(), bytes);
          for (size_t p = 0; p < bytes; p += kPiece) {
            const auto piece = data.subspan(p, std::min(kPiece, bytes - p));
            out_crc = crc32_update(out_crc, piece);
            XXH3_64bits_update(hash, piece.data(), piece.size());
          }
          sink_.write(data);
        });
        zip_.wrote_directly(bytes);
        element += count;
        progress_(bytes);
        next = (next + 1) % kBuffers;
      }
    });
    for (auto& p : pending) {
      if (p.valid()) p.get();
    }
  } catch (...) {
    for (auto& p : pending) {
      if (p.valid()) p.wait();
    }
    XXH3_freeState(hash);
    throw;
  }
  written.crc32 = out_crc;
  written.hash = XXH3_64bits_digest(hash);
  written.has_hash = true;
  XXH3_freeState(hash);
  written.overflowed = stats.overflowed;
  written.flushed = stats.flushed;
  zip_.end(out_crc);
  // Unchanged bytes: the output's CRC is the input's. Refuse to re-save bit rot.
  const uint32_t source_crc = from == to && !s.big_endian ? out_crc : in_crc;
  if (s.source.crc32 != 0 && source_crc != s.source.crc32) throw damaged_input(input_, s, source_crc);
}

void StorageWriter::stream(const Storage& s, WrittenStorage& written) {
  const StorageCopier::Copied c = copier_.copy(s, [&](std::span<const std::byte> chunk) {
    zip_.write(chunk);
    progress_(chunk.size());
  });
  zip_.end();
  written.crc32 = zip_.records().back().crc32;
  written.hash = c.hash;
  written.has_hash = true;
  written.overflowed = c.stats.overflowed;
  written.flushed = c.stats.flushed;
  const uint32_t source_crc = s.cast_to || s.big_endian ? c.source_crc32 : written.crc32;
  if (s.source.crc32 != 0 && source_crc != s.source.crc32) throw damaged_input(input_, s, source_crc);
}

void StorageWriter::read_back(const Storage& s, const WrittenStorage& written, bool crc_from_input) {
  sink_.flush();  // the record's last bytes may still be in the sink's buffer
  const WrittenRecord r = zip_.records().back();
  std::optional<uint64_t> hash;
  if (written.has_hash) hash = written.hash;
  checks_.push_back(worker_.run([this, &s, r, hash, crc_from_input] {
    try {
      readback_->check(r.name, r.data_offset, r.size, r.crc32, hash);
    } catch (const Error& e) {
      // The expected CRC came from the input archive: a mismatch may mean the
      // input itself is damaged, which is a different message.
      if (crc_from_input && e.kind() == ErrorKind::kVerification) {
        const uint32_t actual = crc_of_input(input_, s.source.offset, s.nbytes, s.source.record);
        if (actual != s.source.crc32) throw damaged_input(input_, s, actual);
      }
      throw;
    }
  }));
}

void StorageWriter::finish() {
  for (std::future<void>& check : checks_) check.get();  // the first failure, if any, is thrown here
  checks_.clear();
}

}  // namespace ckptfix
