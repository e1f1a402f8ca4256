// The unpickler alone, with the default global policy (known gadgets refused).
#include "ckptfix/value.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"
#include "io/bytes.h"
#include "pickle/unpickler.h"

void ckptfix::fuzz::unpickle(const uint8_t* data, size_t size) {
  ckptfix::fuzz::expect_clean([&] {
    ckptfix::ValueGraph graph;
    ckptfix::unpickle(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), graph);
  });
}
