#include "bytes/xxh3.h"

#include <algorithm>
#include <array>
#include <new>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's definition, to hold one in an Xxh3
#include <xxhash.h>

#include "ckptfix/error.h"
#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include "bytes/xxh3_avx2.h"
#endif

namespace ckptfix {

namespace {
// The XXH3_state_t an Xxh3 holds in its own bytes.
XXH3_state_t* xxh_state(std::byte* bytes) { return std::launder(reinterpret_cast<XXH3_state_t*>(bytes)); }
const XXH3_state_t* xxh_state(const std::byte* bytes) { return std::launder(reinterpret_cast<const XXH3_state_t*>(bytes)); }
}  // namespace

Xxh3::Xxh3() {
  static_assert(sizeof(XXH3_state_t) <= kStateSize && alignof(XXH3_state_t) <= 64, "Xxh3::kStateSize is too small");
  XXH3_state_t* state = new (state_) XXH3_state_t;
  XXH3_INITSTATE(state);  // as xxhash.h asks of a state not made by XXH3_createState
  reset();
}

void Xxh3::reset() { XXH3_64bits_reset(xxh_state(state_)); }

Xxh3::~Xxh3() = default;

void Xxh3::update(std::span<const std::byte> bytes) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return ckptfix_xxh3_update_avx2(xxh_state(state_), bytes.data(), bytes.size());
#endif
  XXH3_64bits_update(xxh_state(state_), bytes.data(), bytes.size());
}

uint64_t Xxh3::digest() const { return XXH3_64bits_digest(xxh_state(state_)); }

uint64_t xxh3_64(std::span<const std::byte> bytes) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return ckptfix_xxh3_64_avx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

void RecordHash::update(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kPiece - in_piece_);
    piece_.update(bytes.first(n));
    bytes = bytes.subspan(n);
    in_piece_ += n;
    if (in_piece_ == kPiece) end_piece();
  }
}

void RecordHash::add_piece(uint64_t piece_hash) {
  if (in_piece_ != 0) throw Error(ErrorKind::kInternal, "record hash: a piece's hash joined in the middle of a piece");
  join(piece_hash);
}

uint64_t RecordHash::digest() {
  if (in_piece_ > 0) end_piece();
  const uint64_t hash = pieces_.digest();
  pieces_.reset();
  return hash;
}

void RecordHash::end_piece() {
  join(piece_.digest());
  piece_.reset();
  in_piece_ = 0;
}

void RecordHash::join(uint64_t piece_hash) {
  std::array<std::byte, 8> little_endian;
  for (size_t i = 0; i < little_endian.size(); ++i) little_endian[i] = static_cast<std::byte>(piece_hash >> (8 * i));
  pieces_.update(little_endian);
}

void RecordHash::reset() {
  piece_.reset();
  pieces_.reset();
  in_piece_ = 0;
}

uint64_t record_hash(std::span<const std::byte> bytes) {
  RecordHash hash;
  hash.update(bytes);
  return hash.digest();
}

}  // namespace ckptfix
