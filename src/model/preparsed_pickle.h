// A zip checkpoint's data.pkl parsed before the rest of its file was there.
//
// A save's verification re-reads the file it wrote. For 100,000 tensors
// parsing data.pkl is half of that, and it need not wait for the storage
// records behind it: it is read back from the file and parsed on another
// thread as soon as it is written (verify/early_reparse.h), and the re-read
// of the finished file takes the parse where the archive's directory shows
// the very record that was parsed (formats/zip_format.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pickle/unpickler.h"
#include "pickle/value.h"

namespace ckptfix {

struct PreparsedPickle {
  /// The record parsed: its name, where its bytes are, and their CRC-32.
  std::string record;
  uint64_t data_offset = 0;
  uint64_t size = 0;
  uint32_t crc32 = 0;
  ValueGraph graph;
  UnpickleResult parsed;  ///< its root is in `graph`
  /// Every global as the unpickler met it (UnpickleOptions::on_global), for
  /// the re-read to judge as it judges those of any pickle.
  struct Global {
    std::string module, name;
    uint64_t offset = 0;
  };
  std::vector<Global> globals;
};

/// Gives the parse when the reader comes to data.pkl, having opened the
/// rest of the archive meanwhile (it may wait for a parse still under way);
/// null when there is none.
using PreparsedPickleSource = std::function<std::unique_ptr<PreparsedPickle>()>;

}  // namespace ckptfix
