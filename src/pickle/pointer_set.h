// Sets and maps keyed by pointers, each in one flat table (open addressing,
// linear probing).
//
// The graph walks (which globals a file calls, what the pickler has
// memoized, which payloads are reachable) and the checkpoint's table of
// tensors by value visit every value of a graph, several times per
// rewrite: about fifteen values per tensor, so 1.5 M for a 100,000-key
// state dict. std::unordered_set allocates a node per insert and chases a
// pointer per lookup, and was half the time of such a rewrite; this table
// allocates only when it grows and probes neighbouring slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace ckptfix {
namespace pointer_table {

/// The value type of a table that is a set.
struct NoValue {};

/// The table both share: keys (nullptr marks a free slot) and, for a map,
/// a value per slot.
template <typename T, typename V>
class Table {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(const T* p) const { return index_of(p) != kAbsent; }
  size_t count(const T* p) const { return contains(p) ? 1 : 0; }
  void clear() {
    keys_.assign(keys_.size(), nullptr);
    if constexpr (kMapped) values_.assign(values_.size(), V{});
    size_ = 0;
  }
  /// Room for `n` entries without growing.
  void reserve(size_t n) {
    while (n * 4 > keys_.size() * 3) grow();
  }

  /// Removes `p` when present. The entries after it in its run move back
  /// (backward-shift deletion), so no tombstones and lookups stay short.
  void erase(const T* p) {
    size_t i = index_of(p);
    if (i == kAbsent) return;
    for (size_t j = (i + 1) & mask_; keys_[j] != nullptr; j = (j + 1) & mask_) {
      const size_t home = slot_of(keys_[j]);
      // keys_[j] may move into the hole at i when its home is not in (i, j].
      const bool home_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!home_between) {
        keys_[i] = keys_[j];
        if constexpr (kMapped) values_[i] = std::move(values_[j]);
        i = j;
      }
    }
    keys_[i] = nullptr;
    if constexpr (kMapped) values_[i] = V{};
    --size_;
  }

 protected:
  static constexpr bool kMapped = !std::is_same_v<V, NoValue>;
  static constexpr size_t kAbsent = ~size_t{0};

  /// The slot of `p`, or kAbsent.
  size_t index_of(const T* p) const {
    if (size_ == 0 || p == nullptr) return kAbsent;
    for (size_t i = slot_of(p);; i = (i + 1) & mask_) {
      if (keys_[i] == p) return i;
      if (keys_[i] == nullptr) return kAbsent;
    }
  }

  /// The slot of `p` (not nullptr), added when absent; and whether it was added.
  std::pair<size_t, bool> insert_key(const T* p) {
    if ((size_ + 1) * 4 > keys_.size() * 3) grow();
    size_t i = slot_of(p);
    while (keys_[i] != nullptr) {
      if (keys_[i] == p) return {i, false};
      i = (i + 1) & mask_;
    }
    keys_[i] = p;
    ++size_;
    return {i, true};
  }

  std::vector<const T*> keys_;
  std::vector<V> values_;  // empty for a set

 private:
  size_t slot_of(const T* p) const {
    // Fibonacci hashing of the address: its low bits are alignment zeros.
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  void grow() {
    std::vector<const T*> old_keys = std::move(keys_);
    std::vector<V> old_values = std::move(values_);
    const size_t capacity = old_keys.empty() ? 64 : old_keys.size() * 2;
    keys_.assign(capacity, nullptr);
    if constexpr (kMapped) values_.assign(capacity, V{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (size_t j = 0; j < old_keys.size(); ++j) {
      if (old_keys[j] == nullptr) continue;
      size_t i = slot_of(old_keys[j]);
      while (keys_[i] != nullptr) i = (i + 1) & mask_;
      keys_[i] = old_keys[j];
      if constexpr (kMapped) values_[i] = std::move(old_values[j]);
    }
  }

  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

}  // namespace pointer_table

template <typename T>
class PointerSet : public pointer_table::Table<T, pointer_table::NoValue> {
 public:
  /// Inserts `p` (not nullptr); true when it was not there.
  bool insert(const T* p) { return this->insert_key(p).second; }
};

/// A map from pointers to small values.
template <typename T, typename V>
class PointerMap : public pointer_table::Table<T, V> {
 public:
  /// Adds `p` -> `value` unless `p` is there; true when added.
  bool emplace(const T* p, V value) {
    const auto [i, added] = this->insert_key(p);
    if (added) this->values_[i] = std::move(value);
    return added;
  }
  /// The value of `p`, added as V{} when absent.
  V& operator[](const T* p) { return this->values_[this->insert_key(p).first]; }

  /// The value of `p`, or nullptr.
  const V* find(const T* p) const {
    const size_t i = this->index_of(p);
    return i == this->kAbsent ? nullptr : &this->values_[i];
  }
  V* find(const T* p) {
    const size_t i = this->index_of(p);
    return i == this->kAbsent ? nullptr : &this->values_[i];
  }
};

}  // namespace ckptfix
