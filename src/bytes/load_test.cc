#include "bytes/load_test.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "ckptfix/error.h"
#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include <immintrin.h>
#endif
#include "io/bytes.h"

namespace ckptfix {

FloatCoding float_coding(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return FloatCoding::kFloat16;
    case DType::kBFloat16: return FloatCoding::kBFloat16;
    case DType::kFloat32: return FloatCoding::kFloat32;
    case DType::kFloat64: return FloatCoding::kFloat64;
    case DType::kFloat8E4M3Fn: return FloatCoding::kFloat8E4M3Fn;
    case DType::kFloat8E5M2: return FloatCoding::kFloat8E5M2;
    case DType::kFloat8E4M3Fnuz:
    case DType::kFloat8E5M2Fnuz: return FloatCoding::kFloat8Fnuz;
    case DType::kFloat8E8M0Fnu: return FloatCoding::kFloat8E8M0;
    default: return FloatCoding::kNone;  // integers, complex, quantized, bits: bytes only
  }
}

namespace {

uint64_t load_element(const std::byte* p, uint32_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, size);
  return bits;
}

// Whole words at `p` (n of them), the first being word `index`: the
// portable loop.
void add_words_scalar(LoadCheck& c, const std::byte* p, size_t n, uint64_t index) {
  uint64_t sum = 0, weighted = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = load_le<uint32_t>(p + 4 * i);
    sum += w;
    weighted += (index + i + 1) * w;
  }
  c.sum += sum;
  c.weighted += weighted;
}

#if CKPTFIX_AVX2_KERNELS
// The same with AVX2, 8 words a step. Within a run of at most 2^32 words,
// Σ (index + j + 1)·w_j = (index + 1)·Σ w_j + Σ j·w_j, and j·w_j is a
// 32×32-bit product (vpmuludq): even words in the low halves of the four
// 64-bit lanes, odd words shifted down into them.
__attribute__((target("avx2"))) void add_words_avx2(LoadCheck& c, const std::byte* p, size_t n, uint64_t index) {
  constexpr size_t kRun = size_t{1} << 30;  // words: j stays below 2^32
  for (size_t first = 0; first < n; first += kRun) {
    const size_t count = std::min(kRun, n - first);
    const std::byte* q = p + 4 * first;
    const __m256i low = _mm256_set1_epi64x(0xFFFFFFFF);
    const __m256i step = _mm256_set1_epi64x(8);
    __m256i j_even = _mm256_setr_epi64x(0, 2, 4, 6), j_odd = _mm256_setr_epi64x(1, 3, 5, 7);
    __m256i sums = _mm256_setzero_si256(), by_position = _mm256_setzero_si256();
    size_t j = 0;
    for (; j + 8 <= count; j += 8) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 4 * j));
      const __m256i odd = _mm256_srli_epi64(w, 32);
      sums = _mm256_add_epi64(sums, _mm256_add_epi64(_mm256_and_si256(w, low), odd));
      by_position = _mm256_add_epi64(by_position, _mm256_mul_epu32(j_even, w));
      by_position = _mm256_add_epi64(by_position, _mm256_mul_epu32(j_odd, odd));
      j_even = _mm256_add_epi64(j_even, step);
      j_odd = _mm256_add_epi64(j_odd, step);
    }
    uint64_t s[4], b[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s), sums);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b), by_position);
    uint64_t sum = s[0] + s[1] + s[2] + s[3], positioned = b[0] + b[1] + b[2] + b[3];
    for (; j < count; ++j) {
      const uint64_t w = load_le<uint32_t>(q + 4 * j);
      sum += w;
      positioned += j * w;
    }
    c.sum += sum;
    c.weighted += (index + first + 1) * sum + positioned;
  }
}
#endif

void add_words(LoadCheck& c, const std::byte* p, size_t n, uint64_t index) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return add_words_avx2(c, p, n, index);
#endif
  add_words_scalar(c, p, n, index);
}

// `size` bytes at `p` as words from word `first_word` on, the last one
// zero-padded; the whole words through `add_whole_words`.
template <typename AddWholeWords>
void add_bytes(LoadCheck& c, const std::byte* p, size_t size, uint64_t first_word, AddWholeWords add_whole_words) {
  const size_t whole = size / 4;
  add_whole_words(c, p, whole, first_word);
  if (size % 4 != 0) {
    uint32_t last = 0;
    std::memcpy(&last, p + 4 * whole, size % 4);
    add_word(c, first_word + whole, last);
  }
}

// What a device does with one item, done on the CPU.
void check_item(const std::byte* slot, const LoadItem& item, LoadCheck& out) {
  const std::byte* p = slot + item.offset;
  add_bytes(out, p, item.size, item.first_word, add_words);
  const uint32_t size = coding_size(item.coding);
  if (size == 0) return;
  for (uint64_t at = 0; at + size <= item.size; at += size) add_element(out, item.coding, load_element(p + at, size));
}

class HostLoadTest final : public LoadTestDevice {
 public:
  HostLoadTest(size_t slot_bytes, bool inject_fault) : inject_fault_(inject_fault) {
    for (int s = 0; s < 2; ++s) staging_[s].resize(slot_bytes), device_[s].resize(slot_bytes);
  }
  std::byte* staging(int slot) override { return staging_[slot].data(); }
  void launch(int slot, const std::vector<LoadItem>& items, uint32_t results) override {
    uint64_t end = 0;
    for (const LoadItem& item : items) end = std::max(end, item.offset + item.size);
    std::memcpy(device_[slot].data(), staging_[slot].data(), end);  // the "upload"
    if (inject_fault_) {
      for (const LoadItem& item : items) {
        if (item.size == 0) continue;
        device_[slot][item.offset] ^= std::byte{0xFF};
        break;
      }
    }
    results_[slot].assign(results, LoadCheck{});
    for (const LoadItem& item : items) check_item(device_[slot].data(), item, results_[slot][item.result]);
  }
  std::vector<LoadCheck> wait(int slot) override { return std::move(results_[slot]); }
  double seconds() const override { return 0; }

 private:
  bool inject_fault_;
  std::vector<std::byte> staging_[2], device_[2];
  std::vector<LoadCheck> results_[2];
};

constexpr uint64_t align16(uint64_t v) { return (v + 15) & ~uint64_t{15}; }

}  // namespace

LoadCheck word_checksum_reference(std::span<const std::byte> bytes) {
  LoadCheck c;
  add_bytes(c, bytes.data(), bytes.size(), 0, add_words_scalar);
  return c;
}

std::unique_ptr<LoadTestDevice> host_load_test(size_t slot_bytes, bool inject_fault) {
  return std::make_unique<HostLoadTest>(slot_bytes, inject_fault);
}

void WordChecksum::update(std::span<const std::byte> bytes) {
  size_t at = 0;
  // Complete the word in progress first.
  while (carried_ != 0 && at < bytes.size()) {
    carry_ |= static_cast<uint32_t>(bytes[at++]) << (8 * carried_);
    if (++carried_ == 4) add_word(check_, words_++, carry_), carry_ = 0, carried_ = 0;
  }
  const size_t whole = (bytes.size() - at) / 4;
  add_words(check_, bytes.data() + at, whole, words_);
  words_ += whole;
  at += 4 * whole;
  for (; at < bytes.size(); ++at) carry_ |= static_cast<uint32_t>(bytes[at]) << (8 * carried_++);
}

LoadCheck WordChecksum::finish() {
  if (carried_ != 0) add_word(check_, words_++, carry_);
  const LoadCheck out = check_;
  *this = WordChecksum();
  return out;
}

LoadTest::LoadTest(std::unique_ptr<LoadTestDevice> device, size_t slot_bytes)
    : device_(std::move(device)), slot_bytes_(slot_bytes) {
  if (slot_bytes < 64 || slot_bytes % 16 != 0) throw Error(ErrorKind::kInternal, "LoadTest: slots of 64 bytes at least, in 16s");
}

LoadTest::~LoadTest() = default;  // the device waits for its own work

void LoadTest::begin(FloatCoding coding) {
  if (in_storage_) throw Error(ErrorKind::kInternal, "LoadTest::begin inside a storage");
  in_storage_ = true;
  coding_ = coding;
  done_ = 0;
  result_in_slot_ = -1;
  open_.push_back(Open{});
}

void LoadTest::make_room() {
  const Slot& s = slots_[current_];
  if (align16(s.fill) + 16 > slot_bytes_ || s.items.size() >= kMaxLoadItems || s.tickets.size() >= kMaxLoadItems) launch_current();
}

void LoadTest::add(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::span<std::byte> into = room(bytes.size());
    const auto began = std::chrono::steady_clock::now();
    std::memcpy(into.data(), bytes.data(), into.size());
    copy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    commit(into.size());
    bytes = bytes.subspan(into.size());
  }
}

std::span<std::byte> LoadTest::room(uint64_t most) {
  if (!in_storage_ || most == 0) throw Error(ErrorKind::kInternal, "LoadTest::room outside a storage or for nothing");
  for (;;) {
    if (result_in_slot_ < 0) {  // a new part of this storage, in the current slot
      make_room();
      Slot& s = slots_[current_];
      s.fill = align16(s.fill);
      result_in_slot_ = static_cast<int64_t>(s.tickets.size());
      s.tickets.push_back(ticket_);
      ++open_.back().parts;
      s.items.push_back({s.fill, done_ / 4, 0, static_cast<uint32_t>(result_in_slot_), coding_});
    }
    Slot& s = slots_[current_];
    if (s.items.back().size == kItemBytes) {  // the next item of the same part
      if (s.items.size() >= kMaxLoadItems) {
        close_part();
        continue;
      }
      s.items.push_back({s.fill, done_ / 4, 0, static_cast<uint32_t>(result_in_slot_), coding_});
    }
    const uint64_t free = std::min<uint64_t>(slot_bytes_ - s.fill, kItemBytes - s.items.back().size);
    if (free == 0) {  // the slot is full
      close_part();
      continue;
    }
    room_ = std::min(most, free);
    return {device_->staging(current_) + s.fill, static_cast<size_t>(room_)};
  }
}

void LoadTest::commit(uint64_t bytes) {
  if (bytes > std::exchange(room_, 0)) throw Error(ErrorKind::kInternal, "LoadTest::commit of more than its room");
  Slot& s = slots_[current_];
  s.fill += bytes;
  s.items.back().size += static_cast<uint32_t>(bytes);
  done_ += bytes;
}

void LoadTest::close_part() {
  // A part that ends before its storage does must end at an 8-byte multiple
  // of the storage, so the next part starts on a whole word and a whole
  // element. It does: a part starts at such a multiple and at a 16-byte
  // aligned place in the slot, and ends at the slot's end (a multiple of 16)
  // or after whole items (multiples of 16).
  if (done_ % 8 != 0) throw Error(ErrorKind::kInternal, "GPU load test: a storage split inside a word");
  launch_current();
}

uint64_t LoadTest::end() {
  if (!in_storage_) throw Error(ErrorKind::kInternal, "LoadTest::end outside a storage");
  in_storage_ = false;
  open_.back().bytes = done_;
  open_.back().ended = true;
  result_in_slot_ = -1;
  collect_finished();
  return ticket_++;
}

void LoadTest::launch_current() {
  Slot& s = slots_[current_];
  if (!s.items.empty()) {
    device_->launch(current_, s.items, static_cast<uint32_t>(s.tickets.size()));
    s.in_flight = true;
  }
  result_in_slot_ = -1;
  current_ ^= 1;
  if (slots_[current_].in_flight) collect(current_);
}

void LoadTest::collect(int slot) {
  Slot& s = slots_[slot];
  const auto began = std::chrono::steady_clock::now();
  const std::vector<LoadCheck> results = device_->wait(slot);
  device_waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (results.size() != s.tickets.size()) throw Error(ErrorKind::kInternal, "the device returned the wrong number of results");
  for (size_t i = 0; i < results.size(); ++i) {
    Open& o = open_[s.tickets[i] - first_open_];
    o.device.add(results[i]);
    --o.parts;
  }
  s = Slot{};
  collect_finished();
}

void LoadTest::collect_finished() {
  while (!open_.empty() && open_.front().ended && open_.front().parts == 0) {
    ready_.push_back({first_open_, open_.front().bytes, open_.front().device});
    open_.pop_front();
    ++first_open_;
  }
}

std::vector<LoadTest::Result> LoadTest::results(bool wait) {
  if (wait) {
    if (in_storage_) throw Error(ErrorKind::kInternal, "LoadTest::results inside a storage");
    launch_current();
    for (int slot = 0; slot < 2; ++slot) {
      if (slots_[slot].in_flight) collect(slot);
    }
  }
  return std::exchange(ready_, {});
}

}  // namespace ckptfix
