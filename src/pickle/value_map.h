// Maps and sets keyed by the values of a graph, indexed by each value's
// serial number (Value::serial) instead of hashed.
//
// The pickler's memo, the table of tensors by value and the graph walks
// ask about every value of a graph, about fifteen per tensor. A hash of
// the address sends each question to a random place in a table of
// millions of slots, and those cache misses were most of the time the
// pickler took. Values are numbered as they are made, and walked in
// nearly that order, so a table indexed by number is read almost in
// sequence.
//
// A value whose number is taken by another key (a value moved from one
// slot to another carries its number with it; values of two graphs can
// share a number) or that has none (made outside a ValueGraph) goes to a
// PointerMap beside the table: every answer is the same as a PointerMap's.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "pickle/pointer_set.h"
#include "pickle/value.h"

namespace ckptfix {

namespace value_table {

template <typename V>
class Table {
 public:
  size_t size() const { return in_slots_ + others_.size(); }
  /// Makes room for the values numbered below `serial_end` at once.
  void reserve(size_t serial_end) {
    if (serial_end > slots_.size()) slots_.resize(std::min<size_t>(serial_end, Value::kNoSerial));
  }
  bool empty() const { return size() == 0; }
  bool contains(const Value* p) const { return find_slot(p) != nullptr || (maybe_other(p) && others_.contains(p)); }
  size_t count(const Value* p) const { return contains(p) ? 1 : 0; }
  void erase(const Value* p) {
    if (Slot* s = find_slot(p)) {
      s->key = nullptr;
      s->value = V{};
      --in_slots_;
      return;
    }
    if (maybe_other(p)) others_.erase(p);
  }

 protected:
  struct Slot {
    const Value* key = nullptr;
    V value{};
    bool shared = false;  ///< another value of this number went to others_
  };

  const Slot* find_slot(const Value* p) const {
    const uint32_t n = p->serial;
    return n < slots_.size() && slots_[n].key == p ? &slots_[n] : nullptr;
  }
  Slot* find_slot(const Value* p) { return const_cast<Slot*>(std::as_const(*this).find_slot(p)); }

  /// Whether `p` may be among the others: it has no number, or another
  /// value of its number went there. Asked only when its slot is not its.
  bool maybe_other(const Value* p) const {
    if (others_.empty()) return false;
    const uint32_t n = p->serial;
    return n == Value::kNoSerial || (n < slots_.size() && slots_[n].shared);
  }

  /// The slot `p` may take: its number's, when free and `p` is not among
  /// the others; nullptr sends `p` to the others (its slot marked shared).
  Slot* free_slot_for(const Value* p) {
    const uint32_t n = p->serial;
    if (n == Value::kNoSerial) return nullptr;
    if (n >= slots_.size()) slots_.resize(std::max<size_t>(size_t{n} + 1, slots_.size() * 2));
    Slot& s = slots_[n];
    if (s.key != nullptr) {
      s.shared = true;
      return nullptr;
    }
    if (s.shared && others_.contains(p)) return nullptr;
    return &s;
  }

  std::vector<Slot> slots_;  // by serial number
  size_t in_slots_ = 0;
  PointerMap<Value, V> others_;
};

}  // namespace value_table

/// A map from values to small values, as PointerMap<Value, V>.
template <typename V>
class ValueMap : public value_table::Table<V> {
 public:
  /// Adds `p` -> `value` unless `p` is there; true when added.
  bool emplace(const Value* p, V value) {
    if (this->find_slot(p) != nullptr) return false;
    if (auto* s = this->free_slot_for(p)) {
      s->key = p;
      s->value = std::move(value);
      ++this->in_slots_;
      return true;
    }
    return this->others_.emplace(p, std::move(value));
  }
  /// The value of `p`, added as V{} when absent.
  V& operator[](const Value* p) {
    if (auto* s = this->find_slot(p)) return s->value;
    if (auto* s = this->free_slot_for(p)) {
      s->key = p;
      ++this->in_slots_;
      return s->value;
    }
    return this->others_[p];
  }
  /// The value of `p`, or nullptr.
  const V* find(const Value* p) const {
    if (const auto* s = this->find_slot(p)) return &s->value;
    return this->maybe_other(p) ? this->others_.find(p) : nullptr;
  }
  V* find(const Value* p) { return const_cast<V*>(std::as_const(*this).find(p)); }
};

/// A set of values, as PointerSet<Value>.
class ValueSet : public value_table::Table<char> {
 public:
  /// Inserts `p`; true when it was not there.
  bool insert(const Value* p) {
    if (find_slot(p) != nullptr) return false;
    if (auto* s = free_slot_for(p)) {
      s->key = p;
      ++in_slots_;
      return true;
    }
    return others_.emplace(p, 0);
  }
};

}  // namespace ckptfix
