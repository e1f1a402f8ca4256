// The private state behind ckptfix::Checkpoint, shared by the readers (which
// fill it), the passes (which edit it) and the writer (which serializes it).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "io/input_file.h"
#include "zip/zip_reader.h"

namespace ckptfix {

struct Checkpoint::Impl {
  std::shared_ptr<const InputFile> file;
  std::unique_ptr<ZipReader> zip;  // null for legacy files
  CheckpointFormat format = CheckpointFormat::kZip;
  std::string archive_root;
  bool big_endian = false;
  int protocol = 0;
  ValueGraph graph;
  Value* root = nullptr;
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  std::unordered_map<const Value*, size_t> tensor_by_value;
  std::vector<GlobalRef> globals;
  std::unordered_set<std::string> global_names;  // dotted, to record each once
  OpcodeSet opcodes;

  /// The on_global hook of the readers: refuses a known gadget (Error
  /// kUnsafe), and records any other global the first time it is seen.
  void note_global(const std::string& module, const std::string& name);
};

}  // namespace ckptfix
