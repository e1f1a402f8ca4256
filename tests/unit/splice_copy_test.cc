// The splice copy: exact bytes for any offset and length (pipe-sized
// pieces, their edges, nothing at all), the bytes already in the pipe
// written when the output turns out not to splice, and an input that ends
// early is an error, not a short copy.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "io/splice_copy.h"
#include "test_support.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

class SpliceCopyTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    input_.resize(3 * (size_t{1} << 20) + 12345);
    for (size_t i = 0; i < input_.size(); ++i) input_[i] = static_cast<char>((i * 2654435761u) >> 13);
    std::ofstream(dir_ / "in.bin", std::ios::binary) << input_;
    in_ = ::open((dir_ / "in.bin").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(in_, 0);
    copy_ = SpliceCopy::open();
    // A 1 MiB pipe is what an unprivileged process may make by default
    // (/proc/sys/fs/pipe-max-size); FileSink copies another way without one.
    if (!copy_) GTEST_SKIP() << "no 1 MiB pipe here: FileSink uses its buffer instead (see /proc/sys/fs/pipe-max-size)";
  }
  void TearDown() override {
    if (in_ >= 0) ::close(in_);
    TempDirTest::TearDown();
  }
  std::string read_output() const {
    std::ifstream back(dir_ / "out.bin", std::ios::binary);
    return {std::istreambuf_iterator<char>(back), std::istreambuf_iterator<char>()};
  }

  std::string input_;
  int in_ = -1;
  std::unique_ptr<SpliceCopy> copy_;
};

TEST_F(SpliceCopyTest, CopiesAnyRangeToTheOutputsPosition) {
  const uint64_t mib = uint64_t{1} << 20;
  for (const uint64_t from : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4160}, mib - 1}) {
    for (const uint64_t length : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, mib - 1, mib, mib + 1, 2 * mib + 777}) {
      const int out = ::open((dir_ / "out.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ASSERT_GE(out, 0);
      ASSERT_EQ(::write(out, "head", 4), 4);
      EXPECT_EQ(copy_->copy(in_, from, length, out, "out.bin"), length) << "from " << from << ", length " << length;
      ::close(out);
      EXPECT_EQ(read_output(), "head" + input_.substr(from, length)) << "from " << from << ", length " << length;
    }
  }
}

TEST_F(SpliceCopyTest, AnOutputThatDoesNotSpliceGetsWhatWasInThePipe) {
  // splice refuses an output opened for appending (EINVAL) after the
  // input's bytes are already in the pipe: they are written, and the
  // count returned says where the caller goes on.
  const int out = ::open((dir_ / "out.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(out, 0);
  const uint64_t copied = copy_->copy(in_, 100, input_.size() - 100, out, "out.bin");
  ::close(out);
  EXPECT_GT(copied, 0u);
  EXPECT_LT(copied, input_.size() - 100);
  EXPECT_EQ(read_output(), input_.substr(100, copied));
  // The pipe is empty again: the next copy starts clean.
  const int again = ::open((dir_ / "out.bin").c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(again, 0);
  EXPECT_EQ(copy_->copy(in_, 5, 1000, again, "out.bin"), 1000u);
  ::close(again);
  EXPECT_EQ(read_output(), input_.substr(5, 1000));
}

TEST_F(SpliceCopyTest, AnInputThatEndsEarlyIsAnError) {
  const int out = ::open((dir_ / "out.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(out, 0);
  try {
    copy_->copy(in_, input_.size() - 10, 20, out, "out.bin");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()), "the input ended during the copy (was it changed meanwhile?)")
        << "no file named: it is the input that ended, which the caller names";
  }
  ::close(out);
}

}  // namespace
}  // namespace ckptfix
