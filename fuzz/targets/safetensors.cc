// The safetensors reader: the header parsed and checked, then, when it is
// sound, written again and parsed back (the entries and metadata must come
// back equal: what ckptfix reads it can write), and the whole file opened as
// a checkpoint with its bytes read as verify does.
#include <algorithm>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "io/bytes.h"
#include "safetensors/header.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {

void safetensors(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  expect_clean([&] {
    const SafetensorsHeader header = parse_safetensors_header(file);
    std::vector<SafetensorsEntry> by_offset = header.entries;
    std::stable_sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::string again = encode_safetensors_header(by_offset, header.metadata);
    again.append(size - header.data_start, '\0');
    const SafetensorsHeader back = parse_safetensors_header(as_bytes(again));
    if (back.metadata != header.metadata || back.entries.size() != by_offset.size()) std::abort();
    for (size_t i = 0; i < by_offset.size(); ++i) {
      const SafetensorsEntry &a = by_offset[i], &b = back.entries[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.begin != b.begin || a.end != b.end) {
        std::abort();
      }
    }
  });
  expect_clean([&] {
    const Checkpoint ck = Checkpoint::from_bytes(bytes_of(data, size), "fuzz.safetensors");
    std::vector<std::byte> buffer(4096);
    for (size_t i = 0; i < ck.storages().size(); ++i) {
      const uint64_t n = std::min<uint64_t>(ck.storages()[i].nbytes, buffer.size());
      ck.read_storage(i, 0, std::span(buffer.data(), n));
    }
    (void)ck.state_dicts();
  });
}

}  // namespace ckptfix::fuzz
