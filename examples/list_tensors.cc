// Lists the tensors of a checkpoint and reads their bytes, with the core
// library only (no LibTorch, no Python): what a custom loader needs.
//
//   list_tensors CHECKPOINT
#include <ckptfix/checkpoint.h>
#include <ckptfix/error.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: list_tensors CHECKPOINT\n");
    return 2;
  }
  try {
    const ckptfix::Checkpoint ck = ckptfix::Checkpoint::open(argv[1]);
    for (const ckptfix::TensorPosition& pos : ck.tensor_positions()) {
      const ckptfix::TensorInfo& t = ck.tensors()[pos.tensor];
      const ckptfix::StorageInfo& s = ck.storages()[static_cast<size_t>(t.storage)];
      std::printf("%-40s %-9s shape [", ckptfix::path_to_string(pos.path).c_str(),
                  std::string(ckptfix::dtype_name(t.dtype)).c_str());
      for (size_t i = 0; i < t.shape.size(); ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(t.shape[i]));
      std::printf("] offset %lld on %s", static_cast<long long>(t.storage_offset), s.location.c_str());
      // Bytes: a zero-copy view when the file allows it, else a copy.
      std::span<const std::byte> bytes = ck.map_storage(static_cast<size_t>(t.storage));
      std::vector<std::byte> copy;
      if (bytes.empty() && s.nbytes > 0) {
        copy.resize(s.nbytes);
        ck.read_storage(static_cast<size_t>(t.storage), 0, copy);
        bytes = copy;
      }
      unsigned checksum = 0;
      for (std::byte b : bytes) checksum = checksum * 31 + std::to_integer<unsigned>(b);
      std::printf(", storage of %llu bytes (checksum %08x)\n", static_cast<unsigned long long>(s.nbytes), checksum);
    }
    return 0;
  } catch (const ckptfix::Error& e) {
    std::fprintf(stderr, "list_tensors: error: %s\n", e.what());
    return 1;
  }
}
