// The globals the current graph still names and what a file written from it
// asks its loader to do with each (pickle/call_analysis.h): the output's
// pickle, judged before it is written.
#include "model/checkpoint_impl.h"
#include "pickle/call_analysis.h"

namespace ckptfix {

std::vector<GlobalRef> Checkpoint::reachable_globals() const {
  std::vector<GlobalRef> out;
  for (const GlobalUsage& u : reachable_global_usages(impl_->root)) {
    GlobalRef g = judged_global(u.module, u.name);
    g.use = u.use;
    g.where = impl_->pickle_place(u.offset);
    g.how = u.how;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace ckptfix
