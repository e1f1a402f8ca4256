#include "bytes/load_test_opening.h"

#include <chrono>
#include <exception>
#include <future>
#include <utility>

namespace ckptfix {
namespace {

class OpeningDevice final : public LoadTestDevice {
 public:
  explicit OpeningDevice(std::function<std::unique_ptr<LoadTestDevice>()> open)
      : opening_(std::async(std::launch::async, [this, open = std::move(open)] {
          const auto began = std::chrono::steady_clock::now();
          auto device = open();
          open_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
          return device;
        })) {}
  // (The future of std::async waits for the thread as it is destroyed, so
  // a device still opening is never left behind half made.)

  std::byte* staging(int slot) override { return device().staging(slot); }
  void launch(int slot, const std::vector<LoadItem>& items, uint32_t results) override {
    device().launch(slot, items, results);
  }
  std::vector<LoadCheck> wait(int slot) override { return device().wait(slot); }
  double seconds() const override { return device().seconds(); }
  double open_seconds() const override { return device_ ? open_seconds_ : 0; }
  double open_waited_seconds() const override { return waited_; }

 private:
  LoadTestDevice& device() const {
    if (!device_ && !failure_) {
      const auto began = std::chrono::steady_clock::now();
      try {
        device_ = opening_.get();
        waited_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      } catch (...) {
        failure_ = std::current_exception();
      }
    }
    if (failure_) std::rethrow_exception(failure_);
    return *device_;
  }

  double open_seconds_ = 0;  // written by the opening thread, read after get()
  mutable double waited_ = 0;
  mutable std::future<std::unique_ptr<LoadTestDevice>> opening_;
  mutable std::unique_ptr<LoadTestDevice> device_;
  mutable std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<LoadTestDevice> open_in_background(std::function<std::unique_ptr<LoadTestDevice>()> open) {
  return std::make_unique<OpeningDevice>(std::move(open));
}

}  // namespace ckptfix
