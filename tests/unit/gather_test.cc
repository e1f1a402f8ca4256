// GatherReader: a tensor's row-major bytes assembled from chunks laid out
// every way a distributed checkpoint saves them (split along any dimension,
// uneven, empty, a chunk saved as a transposed view or at a storage offset),
// compared with the tensor built directly; and a gap named.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "ckptfix/error.h"
#include "zip/gather_reader.h"

namespace ckptfix {
namespace {

// Element i of the whole tensor is the uint32 i.
std::vector<uint32_t> expected(const std::vector<int64_t>& shape) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<uint32_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0u);
  return out;
}

// Cuts `shape` into a grid: `cuts[d]` split points along dimension d. Each
// chunk's elements go into one shared file, C order, or (2-D chunks with
// `transpose`) as the transposed view torch.save keeps for randn(m, n).t().
std::shared_ptr<GatherPlan> grid_plan(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& cuts,
                                      bool transpose, uint64_t pad, std::string& file_bytes) {
  auto plan = std::make_shared<GatherPlan>();
  plan->shape = shape;
  plan->element_size = 4;
  plan->what = "tensor 't'";
  const size_t n = shape.size();
  std::vector<std::vector<int64_t>> bounds(n);
  for (size_t d = 0; d < n; ++d) {
    bounds[d] = {0};
    for (int64_t c : cuts[d]) bounds[d].push_back(c);
    bounds[d].push_back(shape[d]);
  }
  std::vector<size_t> cell(n, 0);
  std::vector<std::pair<size_t, std::vector<uint32_t>>> payloads;
  while (true) {
    GatherChunk c;
    for (size_t d = 0; d < n; ++d) {
      c.offsets.push_back(bounds[d][cell[d]]);
      c.sizes.push_back(bounds[d][cell[d] + 1] - bounds[d][cell[d]]);
    }
    const bool t = transpose && n == 2;
    // Strides of the chunk as saved: C order, or column-major for a transposed view.
    c.strides.assign(n, 1);
    if (t) {
      c.strides = {1, std::max<int64_t>(c.sizes[0], 1)};
    } else {
      for (size_t d = n; d-- > 1;) c.strides[d - 1] = c.strides[d] * std::max<int64_t>(c.sizes[d], 1);
    }
    const int64_t count = std::accumulate(c.sizes.begin(), c.sizes.end(), int64_t{1}, std::multiplies<>());
    c.storage_offset = static_cast<int64_t>(pad);
    std::vector<uint32_t> storage(pad + static_cast<size_t>(count), 0xDEADBEEF);
    // Fill: element at local index l has the global value.
    std::vector<int64_t> l(n, 0);
    for (int64_t k = 0; k < count; ++k) {
      int64_t global = 0, at = 0;
      for (size_t d = 0; d < n; ++d) {
        global = global * shape[d] + (c.offsets[d] + l[d]);
        at += l[d] * c.strides[d];
      }
      storage[pad + static_cast<size_t>(at)] = static_cast<uint32_t>(global);
      for (size_t d = n; d-- > 0;) {
        if (++l[d] < c.sizes[d]) break;
        l[d] = 0;
      }
    }
    c.data_offset = file_bytes.size();
    c.data_bytes = storage.size() * 4;
    file_bytes.append(reinterpret_cast<const char*>(storage.data()), storage.size() * 4);
    c.what = "chunk";
    plan->chunks.push_back(std::move(c));
    size_t d = n;
    while (d-- > 0) {
      if (++cell[d] + 1 < bounds[d].size()) break;
      cell[d] = 0;
    }
    if (d == SIZE_MAX) break;
  }
  return plan;
}

std::vector<uint32_t> read_all(const std::shared_ptr<GatherPlan>& plan, size_t piece) {
  GatherReader reader(plan);
  std::vector<uint32_t> out(reader.remaining() / 4);
  auto* bytes = reinterpret_cast<std::byte*>(out.data());
  uint64_t done = 0;
  while (reader.remaining() > 0) {
    const uint64_t n = reader.read({bytes + done, std::min<size_t>(piece, reader.remaining())});
    EXPECT_GT(n, 0u);
    done += n;
  }
  return out;
}

void attach(const std::shared_ptr<GatherPlan>& plan, std::string bytes) {
  auto file = InputFile::from_memory(std::move(bytes), "ranks.distcp");
  for (GatherChunk& c : plan->chunks) c.file = file;
}

TEST(GatherReader, AssemblesEveryGrid) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    const size_t dims = 1 + rng() % 4;
    std::vector<int64_t> shape;
    std::vector<std::vector<int64_t>> cuts(dims);
    for (size_t d = 0; d < dims; ++d) {
      shape.push_back(static_cast<int64_t>(rng() % 6));  // 0 too: empty tensors and empty chunks
      if (shape[d] > 1 && rng() % 2) {
        for (int64_t at = 1; at < shape[d]; ++at) {
          if (rng() % 3 == 0) cuts[d].push_back(at);
        }
      }
    }
    std::string bytes;
    const bool transpose = rng() % 3 == 0;
    auto plan = grid_plan(shape, cuts, transpose, rng() % 2 ? 3 : 0, bytes);
    attach(plan, std::move(bytes));
    for (size_t piece : {size_t{4}, size_t{12}, size_t{1} << 20}) {
      EXPECT_EQ(read_all(plan, piece), expected(shape)) << "round " << round << " piece " << piece;
    }
  }
}

TEST(GatherReader, ReadsLargeTransposedChunksInBands) {
  // 2 chunks of 1250 x 2000 float32 (10 MB each), saved transposed, side by
  // side (Shard(1)): rows alternate between them, and each needs more than
  // one band (16 MiB for both, 32 MiB in all).
  std::string bytes;
  auto plan = grid_plan({2500, 4000}, {{}, {2000}}, true, 0, bytes);
  attach(plan, std::move(bytes));
  EXPECT_EQ(read_all(plan, 1 << 20), expected({2500, 4000}));
}

TEST(GatherReader, ChecksEachChunkCrcWhenReadInOrder) {
  std::string bytes;
  auto plan = grid_plan({4, 6}, {{}, {3}}, false, 0, bytes);  // Shard(1): rows interleave the two chunks
  bytes[plan->chunks[1].data_offset + 5] ^= 1;                // damage the second chunk
  plan->chunks[1].crc32 = 0x12345678;                           // a CRC that cannot match either way
  attach(plan, std::move(bytes));
  try {
    read_all(plan, 1 << 20);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
  }
}

TEST(GatherReader, NamesTheElementNoChunkHolds) {
  std::string bytes;
  auto plan = grid_plan({4, 6}, {{2}, {}}, false, 0, bytes);
  plan->chunks.pop_back();  // rows 2 and 3 are nobody's
  attach(plan, std::move(bytes));
  try {
    read_all(plan, 1 << 20);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
    EXPECT_NE(std::string(e.what()).find("[2,0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor 't'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ckptfix
