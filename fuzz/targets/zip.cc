// The zip reader: end records, zip64, the central directory, local headers,
// then every record read back whole (inflated when deflated) with a size cap.
// Differential oracle (issue 66): an archive ckptfix accepts is read by
// miniz's rules (miniz_model.h) to the same records, at the same bytes.
#include <cstdlib>
#include <memory>

#include "targets/fuzz_support.h"
#include "targets/miniz_model.h"
#include "targets/targets.h"
#include "io/input_file.h"
#include "zip/zip_reader.h"

namespace ckptfix::fuzz {

void zip(const uint8_t* data, size_t size) {
  expect_clean([&] {
    auto file = ckptfix::InputFile::from_memory(bytes_of(data, size), "fuzz.zip");
    ckptfix::ZipReader zip(file);
    const auto model = miniz_read(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!model || model->size() != zip.entries().size()) std::abort();  // miniz opens what ckptfix accepts
    for (const ModelEntry& m : *model) {
      // The record ckptfix finds by each name miniz knows is the one miniz reads (a name differing
      // only in case finds it too), where miniz reads it.
      const ckptfix::ZipEntry* e = zip.find(m.name);
      if (e == nullptr || !m.data_known || e->header_offset != m.header_offset || e->data_offset != m.data_offset ||
          e->compressed_size != m.compressed_size || e->size != m.size) {
        std::abort();
      }
    }
    for (const ckptfix::ZipEntry& e : zip.entries()) {
      if (zip.find(e.name) == nullptr) std::abort();  // every entry is found by its name
      expect_clean([&] { (void)zip.read_all(e, uint64_t{1} << 20); });
    }
  });
}

}  // namespace ckptfix::fuzz
