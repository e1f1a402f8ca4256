// A tensor's bytes assembled from chunks that lie elsewhere: the shards a
// torch.distributed.checkpoint saved, each a tensor in a torch.save zip
// inside a .distcp file. The reader yields the whole tensor's contiguous,
// row-major bytes front to back, finding for each run of elements the chunk
// that holds it and reading that run from the chunk's storage record, so
// memory stays bounded whatever the tensor's size.
//
// Each step finds the chunk holding the next element and takes the longest
// run that is contiguous both in the output and in the chunk's storage (a
// whole chunk when it spans every inner dimension, one row segment when the
// tensor was split along an inner one, one element for a chunk saved
// transposed, read through a band buffer: see below). An element no chunk holds is an error naming it: chunks that
// leave a gap are found here even where opening the checkpoint could not
// afford to compare every pair of chunks. Chunks read front to back in full
// (the usual case) are CRC-checked against their zip record as they go.
//
// A chunk saved as a transposed view (randn(m, n).t(): its last dimension
// strided, the one before contiguous) gives one-element runs; reading them
// one by one would read the chunk's storage once per row. Such a chunk is
// read a band of rows at a time instead: for each of its columns one
// contiguous read of the band's rows, transposed into a bounded buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/input_file.h"

namespace ckptfix {

/// One chunk: a box of the tensor, and where its elements are.
struct GatherChunk {
  std::vector<int64_t> offsets;  ///< where the box starts in the tensor
  std::vector<int64_t> sizes;    ///< the box's extent
  std::shared_ptr<const InputFile> file;  ///< holds the chunk's storage record
  uint64_t data_offset = 0;  ///< the record's first byte in `file`
  uint64_t data_bytes = 0;   ///< the record's bytes
  uint32_t crc32 = 0;        ///< what the chunk's zip records for them (0: none)
  int64_t storage_offset = 0;    ///< of the chunk tensor, in elements
  std::vector<int64_t> strides;  ///< of the chunk tensor, in elements
  std::string what;              ///< "chunk at (0, 4) of tensor 'w'", for messages
};

/// How to assemble one tensor. Built by the reader of the format, which has
/// checked that every chunk is inside the tensor and inside its record.
struct GatherPlan {
  std::vector<int64_t> shape;
  uint32_t element_size = 1;
  std::vector<GatherChunk> chunks;  ///< best in row-major order of their offsets
  std::string what;                 ///< "tensor 'w'"
  /// Whether the format's reader has checked that no two chunks overlap;
  /// when not, only reading the whole tensor shows a gap (which, with the
  /// chunks' volumes adding up to the tensor's, any overlap leaves).
  bool tiling_checked = true;
};

class GatherReader {
 public:
  explicit GatherReader(std::shared_ptr<const GatherPlan> plan);

  /// Fills `out` with the next bytes; returns how many (fewer only at the end).
  uint64_t read(std::span<std::byte> out);
  uint64_t remaining() const { return total_bytes_ - position_; }

 private:
  struct Run {
    size_t chunk = 0;
    uint64_t file_offset = 0;
    uint64_t bytes = 0;
    const std::byte* memory = nullptr;  // a band's bytes, instead of the file
  };
  // Rows [first, first + rows) of a transposed chunk at one index of its
  // outer dimensions, all its columns, row-major.
  struct Band {
    std::vector<int64_t> outer;
    int64_t first = 0;
    int64_t rows = 0;
    std::vector<std::byte> bytes;
  };
  struct Cached {  // recently read bytes of one chunk, for runs shorter than a read is worth
    size_t chunk = SIZE_MAX;
    uint64_t file_offset = 0;
    std::vector<std::byte> bytes;
  };
  void next_run();
  void advance(uint64_t count);  // moves index_ on by `count` elements
  size_t find_chunk() const;
  void copy(const Run& run, uint64_t skip, std::span<std::byte> out);
  void note_read(size_t chunk, uint64_t file_offset, std::span<const std::byte> bytes);
  bool transposed(const GatherChunk& chunk) const;
  const std::byte* band_row(size_t chunk);

  std::shared_ptr<const GatherPlan> plan_;
  uint64_t total_elements_ = 1;
  uint64_t total_bytes_ = 0;
  uint64_t position_ = 0;          // bytes produced
  std::vector<int64_t> index_;     // multi-index of the next element to find a run for
  Run run_;
  uint64_t run_done_ = 0;
  size_t hint_ = 0;      // the chunk that held the last run
  size_t row_hint_ = 0;  // the chunk that held the start of the last row
  std::vector<Band> bands_;  // per chunk
  uint64_t band_bytes_ = 0;  // held by all bands
  std::vector<std::byte> column_;
  std::vector<Cached> cache_;
  size_t cache_next_ = 0;
  // Per chunk: the CRC of its bytes read so far, and where the next
  // in-order byte is (UINT64_MAX once read out of order: no check).
  std::vector<uint32_t> crc_;
  std::vector<uint64_t> crc_upto_;
};

}  // namespace ckptfix
