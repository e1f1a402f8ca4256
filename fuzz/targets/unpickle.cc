// The unpickler alone, with the default global policy (known gadgets refused).
#include "pickle/value.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"
#include "io/bytes.h"
#include "pickle/unpickler.h"

namespace ckptfix::fuzz {

void unpickle(const uint8_t* data, size_t size) {
  expect_clean([&] {
    ckptfix::ValueGraph graph;
    ckptfix::unpickle(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), graph);
  });
}

}  // namespace ckptfix::fuzz
