// The legacy (torch < 1.6) stream reader: five pickles back to back, then
// raw storage data, then the storage and tensor tables built from them.
#include <memory>

#include "formats/registry.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"
#include "io/input_file.h"
#include "model/torch_objects.h"

namespace ckptfix::fuzz {

void legacy(const uint8_t* data, size_t size) {
  expect_clean([&] {
    auto impl = std::make_unique<ckptfix::CheckpointImpl>();
    impl->file = ckptfix::InputFile::from_memory(bytes_of(data, size), "fuzz.pt");
    ckptfix::read_legacy_checkpoint(*impl);
    ckptfix::Checkpoint ck = ckptfix::CheckpointAccess::adopt(std::move(impl));
    ckptfix::validate_tensor_views(ck);
    (void)ck.tensor_positions();
    (void)ck.state_dicts();
  });
}

}  // namespace ckptfix::fuzz
