// The GPU load test (issue 26): every storage's bytes uploaded from pinned
// staging buffers and read on the device as the tensor they are, by a
// kernel that computes their checksum and NaN/Inf counts (load_check.h).
// The CPU computes the same checksum from the bytes it meant; a difference
// fails verification naming the tensor.
//
// LoadTest is the host side and holds all the logic that does not need a
// device: storages packed into the staging slots (several small ones per
// slot, a large one split across slots and items at 8-byte multiples of
// it, so no word or element is ever cut), two slots so the CPU fills one
// while the device works on the other, and each storage's parts added up
// as they come back. The
// device itself is a LoadTestDevice: the CUDA one (gpu_cuda.cu), or the
// host one below, which does the same work on the CPU so the logic above
// is tested where there is no GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckptfix/dtype.h"
#include "bytes/load_check.h"
#include "bytes/load_test_device.h"

namespace ckptfix {

/// How the device reads elements of `dtype` (kNone: no NaN/Inf to count).
FloatCoding float_coding(DType dtype);

/// The checksum of a storage's bytes computed on the CPU as they stream
/// past, in any pieces: the reference the device's result must equal
/// (8 words a step with AVX2 where the CPU has it).
class WordChecksum {
 public:
  void update(std::span<const std::byte> bytes);
  LoadCheck finish();  ///< the last partial word zero-padded

 private:
  LoadCheck check_;
  uint64_t words_ = 0;
  uint32_t carry_ = 0;       // bytes of the word in progress
  unsigned carried_ = 0;     // how many (0-3)
};

/// The checksum of `bytes` by the portable loop, one word at a time (what
/// the vectorized one must equal).
LoadCheck word_checksum_reference(std::span<const std::byte> bytes);

class LoadTest {
 public:
  /// Slot size: 2 slots of pinned host memory and 2 of device memory.
  static constexpr size_t kSlotBytes = size_t{64} << 20;
  /// Bytes of one item at most: a block of device threads each.
  static constexpr uint32_t kItemBytes = uint32_t{256} << 10;

  LoadTest(std::unique_ptr<LoadTestDevice> device, size_t slot_bytes = kSlotBytes);
  ~LoadTest();
  LoadTest(const LoadTest&) = delete;
  LoadTest& operator=(const LoadTest&) = delete;

  /// A storage: begin(), its bytes in order through add(), end(), which
  /// returns its ticket (0, 1, 2, ... in order).
  void begin(FloatCoding coding);
  void add(std::span<const std::byte> bytes);
  uint64_t end();
  /// add() without the copy, for bytes read straight into staging memory:
  /// room() gives where the storage's next bytes go (at least one, at most
  /// `most`), and commit(n) takes the first n of them, written there.
  std::span<std::byte> room(uint64_t most);
  void commit(uint64_t bytes);

  struct Result {
    uint64_t ticket = 0;
    uint64_t bytes = 0;
    LoadCheck device;
  };
  /// Storages whose every part has come back since the last call. With
  /// `wait`, what is staged is launched and everything waited for first.
  std::vector<Result> results(bool wait);

  double device_seconds() const { return device_->seconds(); }
  /// Where the host's time went (GpuReport::Phases).
  double open_seconds() const { return device_->open_seconds(); }
  double open_waited_seconds() const { return device_->open_waited_seconds(); }
  double device_waited_seconds() const { return device_waited_; }  ///< in wait(): the device still busy
  double copy_seconds() const { return copy_seconds_; }              ///< add()'s copies into the slots

 private:
  struct Slot {
    std::vector<LoadItem> items;
    std::vector<uint64_t> tickets;  // by result index
    uint64_t fill = 0;
    bool in_flight = false;
  };
  struct Open {
    uint64_t bytes = 0;
    uint32_t parts = 0;   // parts not back yet
    bool ended = false;
    LoadCheck device;
  };

  void launch_current();
  void collect(int slot);
  // Room in the current slot for a new part (switching slots when full).
  void make_room();
  // Ends the current slot in the middle of a storage, and launches it.
  void close_part();
  // Moves storages whose every part is back to ready_, in ticket order.
  void collect_finished();

  std::unique_ptr<LoadTestDevice> device_;
  size_t slot_bytes_;
  double device_waited_ = 0;
  double copy_seconds_ = 0;
  Slot slots_[2];
  int current_ = 0;
  // The storage being added: its ticket, coding, bytes so far, and the
  // result index its part in the current slot adds into (-1: none yet).
  uint64_t ticket_ = 0;
  FloatCoding coding_ = FloatCoding::kNone;
  uint64_t done_ = 0;
  int64_t result_in_slot_ = -1;
  bool in_storage_ = false;
  uint64_t room_ = 0;  // what room() last gave, for commit()
  std::deque<Open> open_;   // by ticket - first_open_
  uint64_t first_open_ = 0;
  std::vector<Result> ready_;
};

}  // namespace ckptfix
