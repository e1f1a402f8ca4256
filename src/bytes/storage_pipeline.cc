#include "bytes/storage_pipeline.h"

#include <algorithm>
#include <memory>

#include "bytes/element_transform.h"
#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "io/mapped_window.h"
#include "bytes/byte_checker.h"
#include "bytes/xxh3.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

// Below this, one task and one kernel call per storage cost more than they
// save: small records go through every stage on the calling thread.
constexpr uint64_t kLarge = uint64_t{1} << 20;
// Unread copies go in slices so progress can be reported.
constexpr uint64_t kCopySlice = uint64_t{256} << 20;
// Input bytes per buffer handed to the output stage: whole elements of every type.
constexpr size_t kSlice = (size_t{2} << 20) / 16 * 16;
// CRC-32 and XXH3 go over cache-sized pieces, so the second pass reads the cache.
constexpr size_t kPiece = size_t{256} << 10;

// The last stage: CRC-32 and (for verification) XXH3 of the output bytes
// (digest), then the sink.
class OutputStage {
 public:
  OutputStage(ByteSink& sink, bool hash) : sink_(sink), hashing_(hash) {}
  void operator()(std::span<const std::byte> bytes) {
    digest(bytes);
    write(bytes);
  }
  void digest(std::span<const std::byte> bytes) {
    for (size_t at = 0; at < bytes.size(); at += kPiece) {
      const auto piece = bytes.subspan(at, std::min(kPiece, bytes.size() - at));
      crc_ = crc32_update(crc_, piece);
      if (hashing_) hash_.update(piece);
    }
  }
  void write(std::span<const std::byte> bytes) { sink_.write(bytes); }
  uint32_t crc() const { return crc_; }
  std::optional<uint64_t> hash() { return hashing_ ? std::optional(hash_.digest()) : std::nullopt; }

 private:
  ByteSink& sink_;
  bool hashing_;
  uint32_t crc_ = 0;
  RecordHash hash_;
};

bool stored_in_file(const InputFile& input, const Storage& s) {
  return s.source.encoding == StorageSource::Encoding::kStored && input.fd() >= 0;
}

}  // namespace

StoragePipeline::StoragePipeline(const CheckpointImpl& checkpoint, ByteSink& sink, ZipWriter& zip, ReadBack* readback,
                                 bool hash, bool page_phase, std::function<void(uint64_t)> progress)
    : checkpoint_(checkpoint),
      sink_(sink),
      zip_(zip),
      readback_(readback),
      hash_(hash || readback != nullptr),
      page_phase_(page_phase),
      progress_(std::move(progress)) {}

PipedRecord StoragePipeline::write(const Storage& s, const std::string& name) {
  const uint64_t size = s.output_nbytes();
  const bool large = s.nbytes >= kLarge;
  const bool unread = large && stored_in_file(checkpoint_.input_of(s), s) && ElementTransform(s).identity() && sink_.can_copy_from();
  zip_.begin(name, size,
             unread && page_phase_ ? std::optional(ZipWriter::Phase{s.source.offset, 4096}) : std::nullopt);
  PipedRecord out;
  uint32_t crc = 0;
  bool crc_from_input = false;
  if (unread && copy_unread(s, crc)) {
    crc_from_input = s.source.crc32 != 0;
  } else {
    const Pumped p = pump(s, large);
    crc = p.crc;
    out.hash = p.hash;
    out.stats = p.stats;
  }
  zip_.end(crc);
  out.record = zip_.records().back();
  // Large records are read back on the worker while the next is written;
  // small ones are left to the final verification pass, which reads them anyway.
  if (readback_ != nullptr && size >= kLarge) {
    read_back(s, out.record, out.hash, crc_from_input);
    out.read_back = true;
  }
  return out;
}

void StoragePipeline::wrote(uint64_t n) {
  zip_.wrote_directly(n);
  progress_(n);
}

bool StoragePipeline::copy_unread(const Storage& s, uint32_t& crc) {
  // The input's recorded CRC is the expected value; without one, compute it
  // from the input on the worker while the sink copies.
  std::future<uint32_t> computed;
  if (s.source.crc32 == 0) computed = worker_.run([this, &s] { return input_record_crc(checkpoint_.input_of(s), s); });
  std::array<std::byte, 8> head;
  checkpoint_.input_of(s).read(s.source.offset, head, s.source.record);  // kLarge > 8
  zip_.note_direct_head(head);
  for (uint64_t done = 0; done < s.nbytes;) {
    const uint64_t n = std::min(kCopySlice, s.nbytes - done);
    bool copied = false;
    try {
      copied = sink_.copy_from(checkpoint_.input_of(s).fd(), s.source.offset + done, n);
    } catch (Error& e) {
      e.in_file(checkpoint_.input_of(s).name()).at(s.source.record);  // reading it failed (writes name the output)
      throw;
    }
    if (!copied) {
      if (done != 0) throw Error(ErrorKind::kIo, "the copy stopped part-way").at(zip_.records().back().name);
      if (computed.valid()) computed.get();
      return false;  // not possible for these files: the caller streams instead
    }
    wrote(n);
    done += n;
  }
  crc = computed.valid() ? computed.get() : s.source.crc32;
  return true;
}

StoragePipeline::Pumped StoragePipeline::pump(const Storage& s, bool large) {
  ElementTransform transform(s);
  OutputStage output(sink_, hash_);
  // Large records: the output stage of buffer b runs on the worker while this
  // thread fills the next; `pending[b]` says when it has written them.
  const size_t buffers = large ? kBuffers : 1;
  for (size_t b = 0; b < buffers; ++b) {
    if (buffers_[b].size() < transform.output_size(kSlice)) buffers_[b].resize(transform.output_size(kSlice));
  }
  std::array<std::future<uint64_t>, kBuffers> pending;
  auto collect = [&](std::future<uint64_t>& p) {
    if (p.valid()) wrote(p.get());
  };
  size_t next = 0;
  bool head = true;
  auto stage = [&](std::span<const std::byte> view) {
    for (size_t at = 0; at < view.size(); at += kSlice) {
      const auto in = view.subspan(at, std::min(kSlice, view.size() - at));
      if (!large && transform.identity()) {  // nothing to change, nothing to overlap: no copy
        if (std::exchange(head, false)) zip_.note_direct_head(in.first(std::min<size_t>(in.size(), 8)));
        output(in);
        wrote(in.size());
        continue;
      }
      std::vector<std::byte>& buffer = buffers_[next];
      collect(pending[next]);  // the worker is done with this buffer
      const std::span<const std::byte> bytes(buffer.data(), transform.apply(in, buffer.data()));
      if (std::exchange(head, false)) zip_.note_direct_head(bytes.first(std::min<size_t>(bytes.size(), 8)));
      if (large) {
        // With a read-back the worker also reads every record again: the
        // digest is made here then, while the bytes are in this core's cache.
        const bool digested = readback_ != nullptr;
        if (digested) output.digest(bytes);
        pending[next] = worker_.run([&output, bytes, digested] {
          digested ? output.write(bytes) : output(bytes);
          return uint64_t{bytes.size()};
        });
        next = (next + 1) % buffers;
      } else {
        output(bytes);
        wrote(bytes.size());
      }
    }
  };
  try {
    if (large && stored_in_file(checkpoint_.input_of(s), s)) {
      for_each_mapped(checkpoint_.input_of(s).fd(), checkpoint_.input_of(s).name(), s.source.offset, s.nbytes, s.source.record, stage);
    } else {
      RecordReader reader = open_storage_record(checkpoint_.input_of(s), s);
      if (read_buffer_.size() < kSlice) read_buffer_.resize(kSlice);
      while (reader.remaining() > 0) {
        const std::span<std::byte> chunk(read_buffer_.data(), std::min<uint64_t>(kSlice, reader.remaining()));
        stage(chunk.first(reader.read(chunk)));
      }
    }
    for (size_t i = 0; i < buffers; ++i) collect(pending[(next + i) % buffers]);  // in order
  } catch (...) {
    for (auto& p : pending) {
      if (p.valid()) p.wait();  // the worker's tasks use `output` and the buffers
    }
    throw;
  }
  check_input(s, transform.identity() ? output.crc() : transform.input_crc());
  return {output.crc(), output.hash(), transform.stats()};
}

void StoragePipeline::check_input(const Storage& s, uint32_t actual) const {
  check_input_record(checkpoint_.input_of(s), s, actual);
}

void StoragePipeline::read_back(const Storage& s, const WrittenRecord& r, std::optional<uint64_t> hash,
                                bool crc_from_input) {
  sink_.flush();  // the record's last bytes may still be in the sink's buffer
  checks_.push_back(worker_.run([this, &s, r, hash, crc_from_input] {
    try {
      readback_->check(r.name, r.data_offset, r.size, r.crc32, hash, s.output_dtype());
    } catch (const Error& e) {
      // The expected CRC came from the input archive: a mismatch may mean the
      // input itself is damaged, which is a different message.
      if (crc_from_input && e.kind() == ErrorKind::kVerification) check_input(s, input_record_crc(checkpoint_.input_of(s), s));
      throw;
    }
  }));
}

void StoragePipeline::finish() {
  for (std::future<void>& check : checks_) check.get();  // the first failure, if any, is thrown here
  checks_.clear();
}

}  // namespace ckptfix
