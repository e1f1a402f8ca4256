// Test tool: reads a pickle (any protocol) from a file, parses it with
// ckptfix's unpickler and writes it back as protocol 2 to stdout, so a
// Python test can check with CPython that the value survived (persistent
// ids written back as the values they hold). Dangerous globals are allowed
// here: nothing is executed either way.
#include <fstream>
#include <iostream>
#include <iterator>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "pickle/pickler.h"
#include "pickle/unpickler.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: pickle_roundtrip FILE\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    ckptfix::ValueGraph graph;
    ckptfix::UnpickleOptions options;
    options.on_global = [](const std::string&, const std::string&, uint64_t) {};
    const auto parsed = ckptfix::unpickle(ckptfix::as_bytes(bytes), graph, options);
    // A persistent id is written back as the value it holds (torch's storage tuples), as read.
    ckptfix::PickleWriterOptions writer;
    writer.persistent_id = [](const ckptfix::Value& pid, const std::function<void(ckptfix::Value*)>& save) {
      save(pid.pid());
    };
    std::cout << ckptfix::pickle_protocol2(parsed.root, writer);
  } catch (const ckptfix::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
