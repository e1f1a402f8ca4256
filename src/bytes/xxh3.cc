#include "bytes/xxh3.h"

#include <new>
#include <xxhash.h>

#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include "bytes/xxh3_avx2.h"
#endif

namespace ckptfix {

struct Xxh3::State {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> xxh{XXH3_createState(), XXH3_freeState};
};

Xxh3::Xxh3() : state_(std::make_unique<State>()) {
  if (!state_->xxh) throw std::bad_alloc();
  reset();
}

void Xxh3::reset() { XXH3_64bits_reset(state_->xxh.get()); }

Xxh3::~Xxh3() = default;

void Xxh3::update(std::span<const std::byte> bytes) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return ckptfix_xxh3_update_avx2(state_->xxh.get(), bytes.data(), bytes.size());
#endif
  XXH3_64bits_update(state_->xxh.get(), bytes.data(), bytes.size());
}

uint64_t Xxh3::digest() const { return XXH3_64bits_digest(state_->xxh.get()); }

uint64_t xxh3_64(std::span<const std::byte> bytes) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return ckptfix_xxh3_64_avx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace ckptfix
