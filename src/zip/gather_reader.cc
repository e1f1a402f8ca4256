#include "zip/gather_reader.h"

#include <algorithm>
#include <cstring>

#include "ckptfix/error.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

// Runs at least this long are read straight into the caller's buffer; shorter
// ones (the rows of a tensor split along an inner dimension) through a cache
// of a few recently read stretches per chunk, so that a row of a few bytes
// does not cost a system call.
constexpr uint64_t kDirectRead = 64 << 10;
constexpr uint64_t kCacheStretch = 256 << 10;
constexpr size_t kCacheSlots = 32;  // at most 8 MiB

}  // namespace

GatherReader::GatherReader(std::shared_ptr<const GatherPlan> plan)
    : plan_(std::move(plan)), index_(plan_->shape.size(), 0), cache_(kCacheSlots) {
  for (int64_t d : plan_->shape) total_elements_ *= static_cast<uint64_t>(d);
  total_bytes_ = total_elements_ * plan_->element_size;
  crc_.assign(plan_->chunks.size(), 0);
  crc_upto_.assign(plan_->chunks.size(), 0);
  run_done_ = run_.bytes = 0;
}

size_t GatherReader::find_chunk() const {
  const auto holds = [&](const GatherChunk& c) {
    for (size_t d = 0; d < index_.size(); ++d) {
      if (index_[d] < c.offsets[d] || index_[d] - c.offsets[d] >= c.sizes[d]) return false;
    }
    return true;
  };
  const size_t n = plan_->chunks.size();
  // Chunks are in row-major order of their offsets. The likely one is the
  // chunk after the last one (the next segment of a row) or, at the start of
  // a row, the one that started the row before (the same band of rows);
  // then every chunk, from there on.
  const bool row_start = index_.empty() || index_.back() == 0;
  if (row_start && row_hint_ < n && holds(plan_->chunks[row_hint_])) return row_hint_;
  for (size_t k = 0; k < n; ++k) {
    const size_t c = (hint_ + 1 + k) % n;
    if (holds(plan_->chunks[c])) return c;
  }
  throw Error(ErrorKind::kCorrupt, "no chunk holds element " + shape_text(index_) +
                                       ": the chunks leave a gap in the tensor")
      .at(plan_->what);
}

void GatherReader::next_run() {
  const size_t c = find_chunk();
  hint_ = c;
  if (index_.empty() || index_.back() == 0) row_hint_ = c;
  const GatherChunk& chunk = plan_->chunks[c];
  const size_t n = index_.size();
  // The longest run from index_ that is contiguous in the output and in the
  // chunk's storage: along the innermost dimension to the chunk's edge, and
  // across outer dimensions while every inner one is spanned whole.
  uint64_t count = 1;
  uint64_t unit = 1;  // elements per step of dimension d
  for (size_t k = n; k-- > 0;) {
    if (chunk.sizes[k] != 1 && static_cast<uint64_t>(chunk.strides[k]) != unit) break;
    count = static_cast<uint64_t>(chunk.offsets[k] + chunk.sizes[k] - index_[k]) * unit;
    if (index_[k] != 0 || chunk.offsets[k] != 0 || chunk.sizes[k] != plan_->shape[k]) break;
    unit *= static_cast<uint64_t>(plan_->shape[k]);
  }
  uint64_t element = static_cast<uint64_t>(chunk.storage_offset);
  for (size_t k = 0; k < n; ++k) element += static_cast<uint64_t>(index_[k] - chunk.offsets[k]) * chunk.strides[k];
  run_ = {c, chunk.data_offset + element * plan_->element_size, count * plan_->element_size};
  run_done_ = 0;
  // Advance the multi-index by `count` elements.
  next_element_ += count;
  uint64_t carry = count;
  for (size_t k = n; k-- > 0 && carry > 0;) {
    const uint64_t extent = static_cast<uint64_t>(plan_->shape[k]);
    const uint64_t at = static_cast<uint64_t>(index_[k]) + carry;
    index_[k] = static_cast<int64_t>(at % extent);
    carry = at / extent;
  }
}

uint64_t GatherReader::read(std::span<std::byte> out) {
  uint64_t written = 0;
  while (written < out.size() && position_ < total_bytes_) {
    if (run_done_ == run_.bytes) next_run();
    const uint64_t n = std::min<uint64_t>(run_.bytes - run_done_, out.size() - written);
    copy(run_, run_done_, out.subspan(written, n));
    run_done_ += n;
    written += n;
    position_ += n;
  }
  return written;
}

void GatherReader::copy(const Run& run, uint64_t skip, std::span<std::byte> out) {
  const GatherChunk& chunk = plan_->chunks[run.chunk];
  const uint64_t at = run.file_offset + skip;
  try {
    if (out.size() >= kDirectRead) {
      chunk.file->read(at, out, chunk.what);
    } else {
      auto slot = std::find_if(cache_.begin(), cache_.end(), [&](const Cached& s) {
        return s.chunk == run.chunk && at >= s.file_offset && at + out.size() <= s.file_offset + s.bytes.size();
      });
      if (slot == cache_.end()) {
        slot = cache_.begin() + static_cast<ptrdiff_t>(cache_next_);
        cache_next_ = (cache_next_ + 1) % cache_.size();
        const uint64_t chunk_end = chunk.data_offset + chunk.data_bytes;
        slot->chunk = run.chunk;
        slot->file_offset = at;
        slot->bytes.resize(std::max<uint64_t>(out.size(), std::min(kCacheStretch, chunk_end - at)));
        chunk.file->read(at, slot->bytes, chunk.what);
      }
      std::memcpy(out.data(), slot->bytes.data() + (at - slot->file_offset), out.size());
    }
  } catch (Error& e) {
    throw e.within(plan_->what);
  }
  note_read(run.chunk, at, out);
}

void GatherReader::note_read(size_t c, uint64_t file_offset, std::span<const std::byte> bytes) {
  const GatherChunk& chunk = plan_->chunks[c];
  if (crc_upto_[c] == UINT64_MAX) return;
  if (file_offset != chunk.data_offset + crc_upto_[c]) {
    crc_upto_[c] = UINT64_MAX;  // read out of order (a chunk saved as a view): verify checks its record whole
    return;
  }
  crc_[c] = crc32_update(crc_[c], bytes);
  crc_upto_[c] += bytes.size();
  if (crc_upto_[c] == chunk.data_bytes && chunk.crc32 != 0 && crc_[c] != chunk.crc32) {
    throw Error(ErrorKind::kCorrupt, "the chunk's bytes do not match the CRC-32 its zip records; the file is damaged")
        .in_file(chunk.file->name())
        .at(chunk.what);
  }
}

}  // namespace ckptfix
