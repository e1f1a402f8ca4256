// The globals the current graph still names and what a file written from it
// asks its loader to do with each (pickle/call_analysis.h): the output's
// pickle, judged before it is written.
#include "model/checkpoint_impl.h"
#include "pickle/call_analysis.h"
#include "pickle/global_policy.h"

namespace ckptfix {

std::vector<GlobalRef> Checkpoint::reachable_globals() const {
  std::vector<GlobalRef> out;
  for (const GlobalUsage& u : reachable_global_usages(impl_->root)) {
    const GlobalClass c = classify_global(u.module, u.name);
    GlobalRef g;
    g.module = u.module;
    g.name = u.name;
    g.kind = c.kind;
    g.allowed_since = c.allowed_since;
    g.exists_in_torch_1_13 = exists_in_torch_1_13(u.module, u.name);
    g.use = u.use;
    g.where = impl_->pickle_place(u.offset);
    g.how = u.how;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace ckptfix
