// Helpers for the unit tests: fixture paths, pickle and checkpoint builders
// working on in-memory bytes, and error matching.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "ckptfix/error.h"
#include "io/byte_sink.h"
#include "io/bytes.h"
#include "zip/zip_writer.h"

namespace ckptfix::test {

inline std::string fixture_path(const std::string& name) { return std::string(CKPTFIX_FIXTURES) + "/" + name; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// A test with a directory of its own (dir_), made empty before and removed
/// after it.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ckptfix-unit-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

/// Asserts `fn` throws a ckptfix::Error of `kind` whose what() contains `text`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(to_string(e.kind()), to_string(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what() << "\nexpected: " << text;
  }
}

/// Writes pickle opcodes by hand, for inputs CPython would never produce.
class PickleBytes {
 public:
  PickleBytes& proto(int p = 2) { return raw("\x80").byte(p); }
  PickleBytes& byte(int b) {
    bytes_ += static_cast<char>(b);
    return *this;
  }
  PickleBytes& raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  PickleBytes& unicode(const std::string& s) {
    raw("X");
    append_le<uint32_t>(bytes_, static_cast<uint32_t>(s.size()));
    return raw(s);
  }
  PickleBytes& global(const std::string& module, const std::string& name) { return raw("c" + module + "\n" + name + "\n"); }
  PickleBytes& int1(int v) { return raw("K").byte(v); }
  PickleBytes& stop() { return raw("."); }
  /// ('storage', torch.<cls>, key, location, numel) BINPERSID
  PickleBytes& storage(const std::string& cls, const std::string& key, const std::string& location, int numel) {
    raw("(").unicode("storage").global("torch", cls).unicode(key).unicode(location).int1(numel).raw("tQ");
    return *this;
  }
  /// _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  PickleBytes& tensor(const std::string& cls, const std::string& key, int numel, int offset, std::vector<int> size,
                      std::vector<int> stride) {
    global("torch._utils", "_rebuild_tensor_v2").raw("(");
    storage(cls, key, "cpu", numel).int1(offset).raw("(");
    for (int s : size) int1(s);
    raw("t(");
    for (int s : stride) int1(s);
    raw("t").raw("\x89").global("collections", "OrderedDict").raw(")R").raw("tR");
    return *this;
  }
  const std::string& str() const { return bytes_; }
  std::span<const std::byte> span() const { return as_bytes(bytes_); }

 private:
  std::string bytes_;
};

/// Builds a zip checkpoint in memory with ckptfix's own zip writer.
class ZipBuilder {
 public:
  explicit ZipBuilder(std::string root = "archive") : root_(std::move(root)), zip_(sink_) {}
  ZipBuilder& add(const std::string& record, const std::string& data) {
    zip_.add(root_ + "/" + record, as_bytes(data));
    return *this;
  }
  ZipBuilder& add_raw(const std::string& full_name, const std::string& data) {
    zip_.add(full_name, as_bytes(data));
    return *this;
  }
  std::string finish() {
    zip_.finish();
    return sink_.bytes();
  }

 private:
  std::string root_;
  MemorySink sink_;
  ZipWriter zip_;
};

inline std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float f : values) append_le<float>(out, f);
  return out;
}

}  // namespace ckptfix::test
