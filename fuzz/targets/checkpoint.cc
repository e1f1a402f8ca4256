// Whole-file open: detection, the zip or legacy reader, the unpickler, the
// storage and tensor tables, then what inspect and verify do with an opened
// checkpoint (tensor positions, state dicts, globals, the weights_only
// verdict, and reading every storage's bytes), what a loader takes of each
// state dict (its entries, sparse tensors, extra states as plain data, a
// tensor's Python attributes), the fit of each state dict to a model whose
// keys are its own under another prefix, one left out (load_verdict and
// the fit pass, on a copy), then the weights-only repair (which rewrites
// the graph it read: namespaces, numpy values, modules, ...) and a strip
// of every wrapper prefix.
#include <algorithm>
#include <memory>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/fit.h"
#include "ckptfix/passes.h"
#include "ckptfix/state_dict.h"
#include "ckptfix/weights_only.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {

void checkpoint(const uint8_t* data, size_t size) {
  expect_clean([&] {
    ckptfix::Checkpoint ck = ckptfix::Checkpoint::from_bytes(bytes_of(data, size), "fuzz.pt");
    (void)ck.tensor_positions();
    for (const ckptfix::StateDictInfo& sd : ck.state_dicts()) {
      const std::string key = ckptfix::path_to_string(sd.path);
      try {
        for (const ckptfix::StateDictEntry& e : ckptfix::select_state_dict(ck, key)) {
          if (e.kind == ckptfix::StateDictEntry::Kind::kData) (void)ckptfix::plain_value(ck, key, e);
        }
      } catch (const ckptfix::Error&) {  // a key its own '/'s make ambiguous, an extra state of a class
      }
    }
    for (const ckptfix::StateDictInfo& sd : ck.state_dicts()) {
      const std::string key = ckptfix::path_to_string(sd.path);
      try {
        auto model = std::make_shared<ckptfix::ModelReference>();
        const std::vector<ckptfix::StateDictEntry> entries = ckptfix::select_state_dict(ck, key);
        for (size_t i = 0; i + 1 < entries.size(); ++i) {
          ckptfix::ExpectedEntry e;
          e.key = "net." + entries[i].key;
          e.tensor = entries[i].kind != ckptfix::StateDictEntry::Kind::kData;
          if (entries[i].kind == ckptfix::StateDictEntry::Kind::kTensor) {
            e.shape = ck.tensors()[entries[i].tensor].shape;
            e.dtype = ckptfix::DType::kBFloat16;
          }
          model->entries.push_back(std::move(e));
        }
        (void)ckptfix::load_verdict(ck, *model, key);
        ckptfix::Checkpoint copy = ckptfix::Checkpoint::from_bytes(bytes_of(data, size), "fuzz.pt");
        ckptfix::PassOptions fit;
        if (!key.empty()) fit.keys = {key};
        fit.like = model;
        fit.fit.allow_missing = fit.fit.drop_unexpected = fit.fit.drop_mismatched = fit.fit.dtype_like = true;
        (void)ckptfix::apply_passes(copy, fit);
        (void)copy.tensor_positions();
      } catch (const ckptfix::Error&) {
      }
    }
    for (size_t i = 0; i < ck.tensors().size(); ++i) {
      try {
        (void)ckptfix::tensor_attributes(ck, i);
      } catch (const ckptfix::Error&) {
      }
    }
    (void)ck.reachable_globals();
    (void)ckptfix::describe(ckptfix::weights_only_verdict(ck));
    for (const ckptfix::TensorInfo& t : ck.tensors()) (void)t.nbytes();
    std::vector<std::byte> chunk(4096);
    for (size_t i = 0; i < ck.storages().size(); ++i) {
      const ckptfix::StorageInfo& s = ck.storages()[i];
      (void)ck.map_storage(i);
      // The first MiB, in whole elements so that big-endian storages can be swapped.
      const uint64_t unit = std::max<uint64_t>(1, ckptfix::element_size(s.dtype));
      const uint64_t end = std::min<uint64_t>(s.nbytes, uint64_t{1} << 20) / unit * unit;
      for (uint64_t at = 0; at < end;) {
        const uint64_t n = std::min<uint64_t>(end - at, chunk.size() / unit * unit);
        ck.read_storage(i, at, std::span<std::byte>(chunk.data(), n));
        at += n;
      }
    }
    ckptfix::PassOptions repair;
    repair.weights_only = true;
    repair.drop_unknown = true;
    (void)ckptfix::apply_passes(ck, repair);
    (void)ck.tensor_positions();
    ckptfix::PassOptions strip;
    strip.auto_strip = true;
    strip.strip_prefixes = {"module."};
    (void)ckptfix::apply_passes(ck, strip);
  });
}

}  // namespace ckptfix::fuzz
