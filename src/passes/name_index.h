// Names, each with an index, in one flat table (open addressing, linear
// probing, each slot holding the name's hash).
//
// The fit looks up every key of a state dict in the model's keys, and
// checks each rule's new names for collisions: for 100,000 keys a node-based
// std::unordered_map missed the cache twice a lookup (its bucket, its node)
// and allocated a node an insert, most of the fit's time. Here a lookup
// reads one slot and, where the hashes agree, the name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfix {

class NameIndex {
 public:
  /// Room for `expected` names before the table grows.
  explicit NameIndex(size_t expected = 0) { rehash(capacity_for(expected)); }

  /// Adds `name` -> `index` unless `name` is there (the name's bytes must
  /// outlive the table). Returns the index `name` has, and whether it was added.
  std::pair<size_t, bool> emplace(std::string_view name, size_t index) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    const uint64_t h = hash(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.used) {
        s = {h, name, index, true};
        ++size_;
        return {index, true};
      }
      if (s.hash == h && s.name == name) return {s.index, false};
    }
  }

  /// The index of `name`, or nullopt.
  std::optional<size_t> find(std::string_view name) const {
    const uint64_t h = hash(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return std::nullopt;
      if (s.hash == h && s.name == name) return s.index;
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    std::string_view name;
    size_t index = 0;
    bool used = false;
  };

  static uint64_t hash(std::string_view name) { return std::hash<std::string_view>{}(name); }
  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (!s.used) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ckptfix
