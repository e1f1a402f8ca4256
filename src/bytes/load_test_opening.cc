#include "bytes/load_test_opening.h"

#include <exception>
#include <future>
#include <utility>

namespace ckptfix {
namespace {

class OpeningDevice final : public LoadTestDevice {
 public:
  explicit OpeningDevice(std::function<std::unique_ptr<LoadTestDevice>()> open)
      : opening_(std::async(std::launch::async, std::move(open))) {}
  // (The future of std::async waits for the thread as it is destroyed, so
  // a device still opening is never left behind half made.)

  std::byte* staging(int slot) override { return device().staging(slot); }
  void launch(int slot, const std::vector<LoadItem>& items, uint32_t results) override {
    device().launch(slot, items, results);
  }
  std::vector<LoadCheck> wait(int slot) override { return device().wait(slot); }
  double seconds() const override { return device().seconds(); }

 private:
  LoadTestDevice& device() const {
    if (!device_ && !failure_) {
      try {
        device_ = opening_.get();
      } catch (...) {
        failure_ = std::current_exception();
      }
    }
    if (failure_) std::rethrow_exception(failure_);
    return *device_;
  }

  mutable std::future<std::unique_ptr<LoadTestDevice>> opening_;
  mutable std::unique_ptr<LoadTestDevice> device_;
  mutable std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<LoadTestDevice> open_in_background(std::function<std::unique_ptr<LoadTestDevice>()> open) {
  return std::make_unique<OpeningDevice>(std::move(open));
}

}  // namespace ckptfix
