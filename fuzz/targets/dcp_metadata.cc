// The .metadata parser of torch.distributed.checkpoint directories: the
// restricted unpickle and the structural checks. Invariants checked on what
// passes: every item is a plain file name in the directory (nothing could
// make ckptfix open a file elsewhere), and every chunk lies inside its
// tensor with the chunks' volumes adding up to the tensor's.
#include <cstdlib>

#include "formats/dcp_metadata.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {
namespace {

void check_name(const std::string& file) {
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\\') != std::string::npos || file.find('\0') != std::string::npos) {
    std::abort();
  }
}

}  // namespace

void dcp_metadata(const uint8_t* data, size_t size) {
  expect_clean([&] {
    ReadLimits limits;
    limits.max_pickle_values = 1 << 20;
    const DcpMetadata md = parse_dcp_metadata({reinterpret_cast<const std::byte*>(data), size}, limits);
    for (const DcpEntry& e : md.entries) {
      if (e.path.empty()) std::abort();
      if (!e.is_tensor) {
        check_name(e.location.file);
        continue;
      }
      unsigned __int128 volume = 1, covered = 0;
      for (int64_t d : e.size) {
        if (d < 0) std::abort();
        volume *= static_cast<uint64_t>(d);
      }
      for (const DcpChunk& c : e.chunks) {
        check_name(c.location.file);
        if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size()) std::abort();
        unsigned __int128 v = 1;
        for (size_t d = 0; d < e.size.size(); ++d) {
          if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] + c.sizes[d] > e.size[d]) std::abort();
          v *= static_cast<uint64_t>(c.sizes[d]);
        }
        covered += v;
      }
      if (covered != volume) std::abort();
    }
  });
}

}  // namespace ckptfix::fuzz
