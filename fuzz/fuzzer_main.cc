// libFuzzer's entry point for one target, chosen at build time
// (CKPTFIX_FUZZ_TARGET is one of the functions in targets/targets.h).
#include "targets/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckptfix::fuzz::CKPTFIX_FUZZ_TARGET(data, size);
  return 0;
}
