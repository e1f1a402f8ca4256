// tensor_stats: every tensor's elements read once, in blocks of the fixed
// order (include/ckptfix/stats.h), on several threads. A contiguous tensor
// whose storage can be read at any offset (stored in the file, or in
// memory) is cut into segments of blocks that threads read with pread;
// other contiguous tensors (deflated, decoded text, assembled from chunks)
// are read front to back by one thread; a view that is not contiguous is
// gathered element by element from its storage (mapped when stored
// little-endian, else read whole: the one case where memory grows with a
// storage). Each segment keeps its blocks' sums apart, and they are added
// in order at the end, so the mean does not depend on the threads.
#include "ckptfix/stats.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"
#include "stats/stats_kernels.h"

namespace ckptfix {
namespace {

constexpr uint64_t kSegmentBlocks = 64;  // blocks a thread takes at once (1 Mi elements)

// A run of one tensor's blocks, and what they gave.
struct Segment {
  size_t tensor = 0;
  uint64_t first_block = 0;
  uint64_t blocks = 0;  // 0: the whole tensor (read front to back)
  BlockStats counts;    // counts and ranges (their sums are in `sums`)
  std::vector<double> sums;  // each block's sum, in order
};

bool random_access(const Storage& s) {
  return s.source.encoding == StorageSource::Encoding::kStored || s.source.encoding == StorageSource::Encoding::kMemory;
}

void add(Segment& seg, const BlockStats& b) {
  BlockStats counts = b;
  counts.sum = 0;
  merge_block(seg.counts, counts);
  seg.sums.push_back(b.sum);
}

// Blocks [first, first + count) (count 0: all) of a contiguous tensor.
void read_contiguous(const CheckpointImpl& impl, const TensorInfo& t, Segment& seg, std::vector<std::byte>& buffer,
                     const std::function<void(uint64_t)>& done) {
  const Storage& s = impl.storages[static_cast<size_t>(t.storage)];
  const uint64_t size = element_size(t.dtype);
  const uint64_t numel = t.numel();
  const uint64_t total_blocks = (numel + kStatsBlock - 1) / kStatsBlock;
  const uint64_t last = seg.blocks == 0 ? total_blocks : std::min(total_blocks, seg.first_block + seg.blocks);
  StorageReader reader(impl.input_of(s), s);
  reader.skip((static_cast<uint64_t>(t.storage_offset) + seg.first_block * kStatsBlock) * size);
  buffer.resize(kStatsBlock * size);
  for (uint64_t b = seg.first_block; b < last; ++b) {
    const uint64_t n = std::min<uint64_t>(kStatsBlock, numel - b * kStatsBlock);
    const std::span<std::byte> out(buffer.data(), n * size);
    if (reader.read(out) != out.size()) {
      throw Error(ErrorKind::kCorrupt, "the storage ends before the tensor's last element").at(s.source.record);
    }
    add(seg, block_stats(t.dtype, buffer.data(), n));
    done(out.size());
  }
}

// A view that is not contiguous: its elements in row-major order, gathered.
void read_strided(const CheckpointImpl& impl, const TensorInfo& t, Segment& seg, const std::function<void(uint64_t)>& done) {
  const Storage& s = impl.storages[static_cast<size_t>(t.storage)];
  const uint64_t size = element_size(t.dtype);
  const WholeStorage storage_bytes(impl.input_of(s), s);
  const std::span<const std::byte> bytes = storage_bytes.bytes();
  const size_t rank = t.shape.size();
  std::vector<int64_t> index(rank, 0);
  std::vector<std::byte> block(kStatsBlock * size);
  const uint64_t numel = t.numel();
  uint64_t filled = 0;
  for (uint64_t e = 0; e < numel; ++e) {
    int64_t at = t.storage_offset;
    for (size_t k = 0; k < rank; ++k) at += index[k] * t.stride[k];
    std::memcpy(block.data() + filled * size, bytes.data() + static_cast<uint64_t>(at) * size, size);
    if (++filled == kStatsBlock || e + 1 == numel) {
      add(seg, block_stats(t.dtype, block.data(), filled));
      done(filled * size);
      filled = 0;
    }
    for (size_t k = rank; k-- > 0;) {  // the next index, row-major
      if (++index[k] < t.shape[k]) break;
      index[k] = 0;
    }
  }
  storage_bytes.check_intact();
}

StatValue float_value(double v) { return {StatValue::Kind::kFloat, v, 0, 0}; }

TensorStats finish(const TensorInfo& t, std::vector<Segment*>& segments) {
  TensorStats out;
  const StatsClass cls = stats_class(t.dtype);
  out.computed = cls != StatsClass::kNone;
  out.elements = t.numel();
  if (!out.computed) return out;
  BlockStats all;
  double sum = 0;
  for (const Segment* seg : segments) {
    merge_block(all, seg->counts);
    for (double b : seg->sums) sum += b;  // the block sums, in order
  }
  out.nan = all.nan, out.posinf = all.posinf, out.neginf = all.neginf, out.finite = all.finite;
  if (out.finite == 0) return out;
  out.mean = sum / static_cast<double>(out.finite);
  switch (cls) {
    case StatsClass::kFloat:
      out.min = float_value(all.min), out.max = float_value(all.max), out.absmax = float_value(all.absmax);
      break;
    case StatsClass::kSigned:
      out.min = {StatValue::Kind::kSigned, 0, all.imin, 0};
      out.max = {StatValue::Kind::kSigned, 0, all.imax, 0};
      out.absmax = {StatValue::Kind::kUnsigned, 0, 0, all.uabsmax};
      break;
    case StatsClass::kUnsigned:
      out.min = {StatValue::Kind::kUnsigned, 0, 0, all.umin};
      out.max = {StatValue::Kind::kUnsigned, 0, 0, all.umax};
      out.absmax = {StatValue::Kind::kUnsigned, 0, 0, all.uabsmax};
      break;
    case StatsClass::kNone: break;
  }
  return out;
}

}  // namespace

double StatValue::as_double() const {
  switch (kind) {
    case Kind::kFloat: return f;
    case Kind::kSigned: return static_cast<double>(i);
    case Kind::kUnsigned: return static_cast<double>(u);
    case Kind::kNone: break;
  }
  return 0;
}

StatsReport tensor_stats(const Checkpoint& checkpoint, const StatsOptions& options) {
  return error_boundary(checkpoint.file_name(), [&] {
    const auto start = std::chrono::steady_clock::now();
    const CheckpointImpl& impl = impl_of(checkpoint);
    // The work: segments of random-access contiguous tensors, whole tensors otherwise.
    std::vector<Segment> segments;
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < impl.tensors.size(); ++i) {
      const Tensor& t = impl.tensors[i];
      if (t.kind != TensorKind::kDense || stats_class(t.dtype) == StatsClass::kNone || t.numel() == 0) continue;
      total_bytes += t.numel() * element_size(t.dtype);
      const Storage& s = impl.storages[static_cast<size_t>(t.storage)];
      if (is_contiguous(t) && random_access(s)) {
        const uint64_t blocks = (t.numel() + kStatsBlock - 1) / kStatsBlock;
        for (uint64_t b = 0; b < blocks; b += kSegmentBlocks) {
          segments.push_back({i, b, std::min(kSegmentBlocks, blocks - b), {}, {}});
        }
      } else {
        segments.push_back({i, 0, 0, {}, {}});
      }
    }
    unsigned threads = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    threads = std::min<unsigned>({threads, 8u, static_cast<unsigned>(std::max<size_t>(1, segments.size()))});
    std::atomic<size_t> next{0};
    std::mutex progress_mutex;
    uint64_t done = 0;
    auto report_done = [&](uint64_t n) {
      if (!options.progress) return;
      std::lock_guard<std::mutex> lock(progress_mutex);
      done += n;
      options.progress("statistics", done, total_bytes);
    };
    std::exception_ptr failure;
    std::mutex failure_mutex;
    auto work = [&] {
      std::vector<std::byte> buffer;
      for (size_t k; (k = next.fetch_add(1)) < segments.size();) {
        Segment& seg = segments[k];
        const TensorInfo& t = impl.tensors[seg.tensor];
        try {
          if (is_contiguous(t)) {
            read_contiguous(impl, t, seg, buffer, report_done);
          } else {
            read_strided(impl, t, seg, report_done);
          }
        } catch (...) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failure) failure = std::current_exception();
          next = segments.size();  // the others stop too
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
    work();
    for (std::thread& th : pool) th.join();
    if (failure) std::rethrow_exception(failure);

    StatsReport report;
    report.tensors.resize(impl.tensors.size());
    std::vector<std::vector<Segment*>> of_tensor(impl.tensors.size());
    for (Segment& seg : segments) of_tensor[seg.tensor].push_back(&seg);  // in block order
    for (size_t i = 0; i < impl.tensors.size(); ++i) {
      const Tensor& t = impl.tensors[i];
      if (t.kind != TensorKind::kDense) {
        report.tensors[i].elements = t.numel();
        continue;
      }
      report.tensors[i] = finish(t, of_tensor[i]);
    }
    report.bytes = total_bytes;
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
  });
}

}  // namespace ckptfix
