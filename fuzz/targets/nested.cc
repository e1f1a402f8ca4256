// Nested pickles (include/ckptfix/nested.h, issue 66): hostile bytes as a
// module's uint8 extra state (read as pickle.loads would) and as an
// io.BytesIO's (read as torch.load would: a zip, a legacy stream). The
// reading never throws (what it cannot read is listed as unreadable), and
// invariants hold: a nested pickle ckptfix could not read that names a
// global is a violation, and a known gadget anywhere is one.
#include <cstdlib>
#include <string>
#include <vector>

#include "ckptfix/nested.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {

namespace {

void read_as(const std::string& bytes, bool as_bytes_io) {
  ReadLimits limits;
  limits.max_pickle_bytes = uint64_t{16} << 20;
  limits.max_pickle_values = 1 << 20;
  std::vector<NestedPickle> found;
  try {
    found = nested_pickles_of_bytes(bytes, "layer._extra_state", limits, as_bytes_io);
  } catch (const Error&) {
    std::abort();  // reading a nested pickle records what it cannot read, never throws
  }
  if (found.empty() || found.front().key != "layer._extra_state") std::abort();
  const std::vector<NestedViolation> violations = nested_violations(found, {});
  for (const NestedPickle& p : found) {
    bool named = false;
    for (const NestedViolation& v : violations) named = named || v.key == p.key;
    if (!p.unreadable.empty() && p.names_globals && !named) std::abort();
    for (const GlobalRef& g : p.globals) {
      if (g.kind == GlobalKind::kGadget && !(g.module == "torch.storage" && g.name == "_load_from_bytes") && !named) {
        std::abort();
      }
    }
  }
}

}  // namespace

void nested(const uint8_t* data, size_t size) {
  const std::string bytes = bytes_of(data, size);
  read_as(bytes, false);
  read_as(bytes, true);
}

}  // namespace ckptfix::fuzz
