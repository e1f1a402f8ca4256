#include "zip/inflate.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>
#include <zlib.h>

#include "ckptfix/error.h"
#include "io/input_file.h"

namespace ckptfix {

struct Inflater::State {
  z_stream stream{};
  std::span<const std::byte> input;  // what zlib is fed from
  uint64_t consumed = 0;             // ... of input
  // A record read from a file: where the rest of it is, and the buffer.
  const InputFile* file = nullptr;
  uint64_t file_offset = 0;
  uint64_t file_left = 0;
  std::string what;
  std::vector<std::byte> buffer;

  /// When the input is used up and the file has more: the next buffer of it.
  void refill() {
    if (consumed < input.size() || file == nullptr || file_left == 0) return;
    constexpr uint64_t kBuffer = uint64_t{1} << 20;
    buffer.resize(static_cast<size_t>(std::min(file_left, kBuffer)));
    file->read(file_offset, buffer, what);
    file_offset += buffer.size();
    file_left -= buffer.size();
    input = buffer;
    consumed = 0;
  }
};

Inflater::Inflater(std::span<const std::byte> compressed) : state_(std::make_unique<State>()) {
  state_->input = compressed;
  if (inflateInit2(&state_->stream, -MAX_WBITS) != Z_OK) {
    throw Error(ErrorKind::kIo, "cannot initialise zlib");
  }
}

Inflater::Inflater(const InputFile& file, uint64_t offset, uint64_t length, std::string what)
    : state_(std::make_unique<State>()) {
  file.check_range(offset, length, what);
  state_->file = &file;
  state_->file_offset = offset;
  state_->file_left = length;
  state_->what = std::move(what);
  if (inflateInit2(&state_->stream, -MAX_WBITS) != Z_OK) {
    throw Error(ErrorKind::kIo, "cannot initialise zlib");
  }
}

Inflater::~Inflater() { inflateEnd(&state_->stream); }

uint64_t Inflater::read(std::span<std::byte> out) {
  z_stream& z = state_->stream;
  uint64_t produced = 0;
  while (produced < out.size() && !done_) {
    state_->refill();
    // zlib counts in uInt, so feed and drain at most 1 GiB at a time.
    const uint64_t in_left = state_->input.size() - state_->consumed;
    const uInt in_now = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
    const uInt out_now = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, 1u << 30));
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(state_->input.data() + state_->consumed));
    z.avail_in = in_now;
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = out_now;
    const int rc = inflate(&z, Z_NO_FLUSH);
    state_->consumed += in_now - z.avail_in;
    produced += out_now - z.avail_out;
    if (rc == Z_STREAM_END) {
      done_ = true;
    } else if (rc == Z_BUF_ERROR && in_now == 0) {
      throw Error(ErrorKind::kCorrupt, "deflated data ends early (truncated record)");
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw Error(ErrorKind::kCorrupt, std::string("bad deflated data: ") + (z.msg ? z.msg : "zlib error"));
    }
  }
  return produced;
}

}  // namespace ckptfix
