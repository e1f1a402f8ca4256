// Sets and maps keyed by pointers, each in one flat table (open addressing,
// linear probing).
//
// The graph walks (which globals a file calls, what the pickler has
// memoized, which payloads are reachable) visit every value of a graph,
// several times per rewrite: about fifteen values per tensor, so 1.5 M for
// a 100,000-key state dict. std::unordered_set allocates a node per insert
// and chases a pointer per lookup, and was half the time of such a rewrite;
// this table allocates only when it grows and probes neighbouring slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ckptfix {

template <typename T>
class PointerSet {
 public:
  PointerSet() = default;

  /// Inserts `p` (not nullptr); true when it was not there.
  bool insert(const T* p) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    size_t i = slot_of(p);
    while (slots_[i] != nullptr) {
      if (slots_[i] == p) return false;
      i = (i + 1) & mask_;
    }
    slots_[i] = p;
    ++size_;
    return true;
  }

  bool contains(const T* p) const {
    if (size_ == 0 || p == nullptr) return false;
    for (size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (slots_[i] == p) return true;
      if (slots_[i] == nullptr) return false;
    }
  }
  size_t count(const T* p) const { return contains(p) ? 1 : 0; }

  /// Removes `p` when present. The entries after it in its run move back
  /// (backward-shift deletion), so no tombstones and lookups stay short.
  void erase(const T* p) {
    if (size_ == 0 || p == nullptr) return;
    size_t i = slot_of(p);
    while (slots_[i] != p) {
      if (slots_[i] == nullptr) return;
      i = (i + 1) & mask_;
    }
    for (size_t j = (i + 1) & mask_; slots_[j] != nullptr; j = (j + 1) & mask_) {
      const size_t home = slot_of(slots_[j]);
      // slots_[j] may move into the hole at i when its home is not in (i, j].
      const bool home_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!home_between) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = nullptr;
    --size_;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    slots_.assign(slots_.size(), nullptr);
    size_ = 0;
  }
  /// Room for `n` entries without growing.
  void reserve(size_t n) {
    while (n * 4 > slots_.size() * 3) grow();
  }

 private:
  size_t slot_of(const T* p) const {
    // Fibonacci hashing of the address: its low bits are alignment zeros.
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  void grow() {
    std::vector<const T*> old = std::move(slots_);
    const size_t capacity = old.empty() ? 64 : old.size() * 2;
    slots_.assign(capacity, nullptr);
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (const T* p : old) {
      if (p == nullptr) continue;
      size_t i = slot_of(p);
      while (slots_[i] != nullptr) i = (i + 1) & mask_;
      slots_[i] = p;
      ++size_;
    }
  }

  std::vector<const T*> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

/// A map from pointers to small values, as flat as PointerSet (no erase:
/// its users only add).
template <typename T, typename V>
class PointerMap {
 public:
  /// Adds `p` -> `value` unless `p` is there; true when added.
  bool emplace(const T* p, V value) {
    if ((size_ + 1) * 4 > keys_.size() * 3) grow();
    size_t i = slot_of(p);
    while (keys_[i] != nullptr) {
      if (keys_[i] == p) return false;
      i = (i + 1) & mask_;
    }
    keys_[i] = p;
    values_[i] = std::move(value);
    ++size_;
    return true;
  }

  /// The value of `p`, or nullptr.
  const V* find(const T* p) const {
    if (size_ == 0 || p == nullptr) return nullptr;
    for (size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (keys_[i] == p) return &values_[i];
      if (keys_[i] == nullptr) return nullptr;
    }
  }
  bool contains(const T* p) const { return find(p) != nullptr; }
  size_t count(const T* p) const { return contains(p) ? 1 : 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    keys_.assign(keys_.size(), nullptr);
    size_ = 0;
  }

 private:
  size_t slot_of(const T* p) const {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  void grow() {
    std::vector<const T*> old_keys = std::move(keys_);
    std::vector<V> old_values = std::move(values_);
    const size_t capacity = old_keys.empty() ? 64 : old_keys.size() * 2;
    keys_.assign(capacity, nullptr);
    values_.assign(capacity, V{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (size_t j = 0; j < old_keys.size(); ++j) {
      if (old_keys[j] == nullptr) continue;
      size_t i = slot_of(old_keys[j]);
      while (keys_[i] != nullptr) i = (i + 1) & mask_;
      keys_[i] = old_keys[j];
      values_[i] = std::move(old_values[j]);
      ++size_;
    }
  }

  std::vector<const T*> keys_;
  std::vector<V> values_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace ckptfix
