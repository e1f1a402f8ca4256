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
// A transposed chunk's band: rows enough for this many bytes (at least one
// row), and all bands together at most kBandBudget.
constexpr uint64_t kBandBytes = 16 << 20;
constexpr uint64_t kBandBudget = 32 << 20;

}  // namespace

GatherReader::GatherReader(std::shared_ptr<const GatherPlan> plan)
    : plan_(std::move(plan)), index_(plan_->shape.size(), 0), cache_(kCacheSlots) {
  for (int64_t d : plan_->shape) total_elements_ *= static_cast<uint64_t>(d);
  total_bytes_ = total_elements_ * plan_->element_size;
  crc_.assign(plan_->chunks.size(), 0);
  crc_upto_.assign(plan_->chunks.size(), 0);
  bands_.resize(plan_->chunks.size());
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
  // chunk of the last run, the chunk after it (the next segment of a row)
  // or, at the start of a row, the one that started the row before (the
  // same band of rows); then every chunk, from there on.
  // The chunk of the last run holds the next element when runs are single
  // elements.
  if (hint_ < n && holds(plan_->chunks[hint_])) return hint_;
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
  if (transposed(chunk)) {
    if (const std::byte* row = band_row(c)) {
      const int64_t column = index_[n - 1] - chunk.offsets[n - 1];
      const uint64_t count = static_cast<uint64_t>(chunk.sizes[n - 1] - column);
      run_ = {c, 0, count * plan_->element_size, row + static_cast<uint64_t>(column) * plan_->element_size};
      run_done_ = 0;
      advance(count);
      return;
    }
  }
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
  advance(count);
}

void GatherReader::advance(uint64_t count) {
  const size_t n = index_.size();
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

bool GatherReader::transposed(const GatherChunk& chunk) const {
  const size_t n = chunk.sizes.size();
  return n >= 2 && chunk.sizes[n - 1] > 1 && chunk.sizes[n - 2] > 1 && chunk.strides[n - 1] != 1 &&
         chunk.strides[n - 2] == 1;
}

// The bytes of the row index_ is in, within chunk c's band (loaded here when
// index_ is outside it), or null when no band fits the budget (the caller
// then reads element by element).
const std::byte* GatherReader::band_row(size_t c) {
  const GatherChunk& chunk = plan_->chunks[c];
  const size_t n = index_.size();
  const uint64_t element = plan_->element_size;
  const uint64_t row_bytes = static_cast<uint64_t>(chunk.sizes[n - 1]) * element;
  const int64_t row = index_[n - 2];
  const std::vector<int64_t> outer(index_.begin(), index_.end() - 2);
  Band& band = bands_[c];
  if (!band.bytes.empty() && band.outer == outer && row >= band.first && row < band.first + band.rows) {
    return band.bytes.data() + static_cast<uint64_t>(row - band.first) * row_bytes;
  }
  band_bytes_ -= band.bytes.size();
  std::vector<std::byte>().swap(band.bytes);
  if (row_bytes > kBandBudget - band_bytes_) {  // make room: other chunks' bands are loaded again when needed
    for (Band& other : bands_) std::vector<std::byte>().swap(other.bytes);
    band_bytes_ = 0;
  }
  const uint64_t rows_left = static_cast<uint64_t>(chunk.offsets[n - 2] + chunk.sizes[n - 2] - row);
  const uint64_t rows = std::min({rows_left, std::max<uint64_t>(1, kBandBytes / row_bytes),
                                  (kBandBudget - band_bytes_) / row_bytes});
  if (rows == 0) return nullptr;
  band.outer = outer;
  band.first = row;
  band.rows = static_cast<int64_t>(rows);
  band.bytes.resize(rows * row_bytes);
  band_bytes_ += band.bytes.size();
  // Column j of the band is `rows` contiguous elements of the storage.
  uint64_t base = static_cast<uint64_t>(chunk.storage_offset);
  for (size_t k = 0; k + 2 < n; ++k) base += static_cast<uint64_t>(index_[k] - chunk.offsets[k]) * chunk.strides[k];
  base += static_cast<uint64_t>(row - chunk.offsets[n - 2]);
  column_.resize(rows * element);
  try {
    for (int64_t j = 0; j < chunk.sizes[n - 1]; ++j) {
      const uint64_t first = base + static_cast<uint64_t>(j) * static_cast<uint64_t>(chunk.strides[n - 1]);
      chunk.file->read(chunk.data_offset + first * element, column_, chunk.what);
      for (uint64_t r = 0; r < rows; ++r) {
        std::memcpy(band.bytes.data() + r * row_bytes + static_cast<uint64_t>(j) * element, column_.data() + r * element,
                    element);
      }
    }
  } catch (Error& e) {
    throw e.within(plan_->what);
  }
  crc_upto_[c] = UINT64_MAX;  // read column by column: verify checks its record whole
  return band.bytes.data();
}

void GatherReader::copy(const Run& run, uint64_t skip, std::span<std::byte> out) {
  if (run.memory != nullptr) {
    std::memcpy(out.data(), run.memory + skip, out.size());
    return;
  }
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
