// The bridge's names (issue 52): after `using namespace ckptfix;`, `torch::`
// is LibTorch's alone (the bridge is ckptfix::libtorch). The old names are
// tested in torch_bridge_test.cc.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "ckptfix/libtorch.h"  // alone: ckptfix/torch.h declares ckptfix::torch again

using namespace ckptfix;

TEST(Namespace, UsingNamespaceCkptfixLeavesTorchUnambiguous) {
  const torch::Tensor t = torch::ones({2, 3});  // ambiguous while the bridge was ckptfix::torch
  torch::nn::Linear linear(3, 2);
  libtorch::LoadOptions options;
  EXPECT_EQ(t.numel(), 6);
  EXPECT_FALSE(options.zero_copy);  // copies by default, as torch.load(mmap=False)
  EXPECT_EQ(libtorch::model_reference(*linear).entries.size(), 2u);
}
