// Test tool: writes a zip archive with records of 5 GiB and records past the
// 4 GiB offset using ckptfix's zip writer, into a sparse file (runs of zeros
// become holes), so the zip64 paths can be checked quickly and cheaply by
// ckptfix's reader (unit test) and by Python's zipfile (interop test).
//
//   write_sparse_zip64 OUT
// Records: big/data.pkl (6 bytes), big/data/0 (5 GiB of zeros),
// big/data/1 ("tail", at an offset past 4 GiB), big/version.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <vector>

#include "ckptfix/error.h"
#include "io/byte_sink.h"
#include "io/bytes.h"
#include "io/input_file.h"
#include "zip/zip_reader.h"
#include "zip/zip_writer.h"

namespace {

class SparseFileSink final : public ckptfix::ByteSink {
 public:
  explicit SparseFileSink(int fd) : fd_(fd) {}
  void write(std::span<const std::byte> data) override {
    const bool zeros = std::all_of(data.begin(), data.end(), [](std::byte b) { return b == std::byte{0}; });
    if (zeros && data.size() >= 4096) {
      ::lseek(fd_, static_cast<off_t>(data.size()), SEEK_CUR);
    } else if (::write(fd_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      throw ckptfix::Error(ckptfix::ErrorKind::kIo, "write failed");
    }
    position_ += data.size();
  }
  uint64_t position() const override { return position_; }

 private:
  int fd_;
  uint64_t position_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_sparse_zip64 OUT\n";
    return 2;
  }
  const int fd = ::open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  SparseFileSink sink(fd);
  ckptfix::ZipWriter zip(sink);
  zip.add("big/data.pkl", ckptfix::as_bytes("pickle"));
  const uint64_t big = uint64_t{5} << 30;
  std::vector<std::byte> zeros(64 << 20);
  zip.begin("big/data/0", big);
  for (uint64_t done = 0; done < big; done += zeros.size()) zip.write(std::span(zeros).first(std::min<uint64_t>(zeros.size(), big - done)));
  zip.end();
  zip.add("big/data/1", ckptfix::as_bytes("tail"));
  zip.add("big/version", ckptfix::as_bytes("3\n"));
  zip.finish();
  ::ftruncate(fd, static_cast<off_t>(sink.position()));
  ::close(fd);

  // Read it back with ckptfix's own reader: zip64 sizes and offsets.
  ckptfix::ZipReader reader(ckptfix::InputFile::open(argv[1]));
  const auto* data0 = reader.find("big/data/0");
  const auto* data1 = reader.find("big/data/1");
  if (reader.entries().size() != 4 || !data0 || !data1 || data0->size != big || !data0->zip64 ||
      data1->header_offset <= (uint64_t{1} << 32) || !data1->zip64 || data1->data_offset % 64 != 0 ||
      reader.read_all(*data1, 16) != "tail") {
    std::cerr << "write_sparse_zip64: ckptfix's reader disagrees with what was written\n";
    return 1;
  }
  return 0;
}
