// The zip reader: end records, zip64, the central directory, local headers,
// then every record read back whole (inflated when deflated) with a size cap.
#include <memory>

#include "targets/fuzz_support.h"
#include "targets/targets.h"
#include "io/input_file.h"
#include "zip/zip_reader.h"

namespace ckptfix::fuzz {

void zip(const uint8_t* data, size_t size) {
  expect_clean([&] {
    auto file = ckptfix::InputFile::from_memory(bytes_of(data, size), "fuzz.zip");
    ckptfix::ZipReader zip(file);
    for (const ckptfix::ZipEntry& e : zip.entries()) {
      if (zip.find(e.name) == nullptr) std::abort();  // every entry is found by its name
      expect_clean([&] { (void)zip.read_all(e, uint64_t{1} << 20); });
    }
  });
}

}  // namespace ckptfix::fuzz
