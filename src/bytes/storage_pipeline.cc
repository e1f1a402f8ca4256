#include "bytes/storage_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <sched.h>

#include "bytes/element_transform.h"
#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "io/mapped_window.h"
#include "bytes/byte_checker.h"
#include "bytes/xxh3.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

// Below this, one task and one kernel call per storage cost more than they
// save: small records go through every stage on the calling thread.
constexpr uint64_t kLarge = uint64_t{1} << 20;
// Unread copies go in slices so progress can be reported.
constexpr uint64_t kCopySlice = uint64_t{256} << 20;
// A part of a record split among threads: one piece of its hash (RecordHash).
constexpr uint64_t kPart = RecordHash::kPiece;
// Input bytes per buffer handed to the output stage: whole elements of every type.
constexpr size_t kSlice = (size_t{2} << 20) / 16 * 16;
// CRC-32 and XXH3 go over cache-sized pieces, so the second pass reads the cache.
constexpr size_t kPiece = size_t{256} << 10;

// The last stage: CRC-32 and (for verification) XXH3 of the output bytes
// (digest), then the sink.
class OutputStage {
 public:
  OutputStage(ByteSink& sink, bool hash) : sink_(sink), hashing_(hash) {}
  void operator()(std::span<const std::byte> bytes) {
    digest(bytes);
    write(bytes);
  }
  void digest(std::span<const std::byte> bytes) {
    for (size_t at = 0; at < bytes.size(); at += kPiece) {
      const auto piece = bytes.subspan(at, std::min(kPiece, bytes.size() - at));
      crc_ = crc32_update(crc_, piece);
      if (hashing_) hash_.update(piece);
    }
  }
  void write(std::span<const std::byte> bytes) { sink_.write(bytes); }
  uint32_t crc() const { return crc_; }
  std::optional<uint64_t> hash() { return hashing_ ? std::optional(hash_.digest()) : std::nullopt; }

 private:
  ByteSink& sink_;
  bool hashing_;
  uint32_t crc_ = 0;
  RecordHash hash_;
};

bool stored_in_file(const InputFile& input, const Storage& s) {
  return s.source.encoding == StorageSource::Encoding::kStored && input.fd() >= 0;
}

// Runs `here` on this thread beside `others` (tasks on other threads that
// use what the caller holds), waits for every one of them, and throws the
// first failure, this thread's first; `stop` is raised when `here` fails, so
// that the others end at their next part.
template <typename F>
void run_beside(F here, std::vector<std::future<void>>& others, std::atomic<bool>& stop) {
  try {
    here();
  } catch (...) {
    stop = true;
    try {
      wait_for_all(others);
    } catch (...) {
    }
    throw;
  }
  wait_for_all(others);
}

}  // namespace

unsigned write_threads(unsigned asked) {
  if (asked > 0) return asked;
  // Past 16, more threads mostly wait for the output file's lock in the
  // kernel, and each holds about 2.5 MiB of buffers.
  constexpr unsigned kMostByDefault = 16;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int cores = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0
                        ? CPU_COUNT(&allowed)
                        : static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(static_cast<unsigned>(std::max(cores, 1)), 1u, kMostByDefault);
}

StoragePipeline::StoragePipeline(const CheckpointImpl& checkpoint, ByteSink& sink, ZipWriter& zip, ReadBack* readback,
                                 bool hash, bool page_phase, unsigned threads,
                                 std::function<void(uint64_t)> progress)
    : checkpoint_(checkpoint),
      sink_(sink),
      zip_(zip),
      readback_(readback),
      hash_(hash || readback != nullptr),
      page_phase_(page_phase),
      threads_(std::max(1u, threads)),
      progress_(std::move(progress)),
      per_thread_(threads_),
      worker_(/*on_caller=*/threads_ == 1) {}

void StoragePipeline::start_helpers() {
  // Made when first needed: a distributed checkpoint's writer makes a
  // pipeline per item, most of them small.
  while (helpers_.size() + 2 < threads_) helpers_.push_back(std::make_unique<Background>());
}

PipedRecord StoragePipeline::write(const Storage& s, const std::string& name) {
  const uint64_t size = s.output_nbytes();
  const bool large = s.nbytes >= kLarge;
  const bool identity = ElementTransform(s).identity();
  const bool in_parts = goes_in_parts(s, large, identity);
  const bool unread = large && stored_in_file(checkpoint_.input_of(s), s) && identity && sink_.can_copy_from();
  // Records copied unread keep their input's page phase, so that their
  // blocks can be shared. Other large records start at a multiple of 32 KiB,
  // so that the page cache takes their writes in large folios: an unverified
  // cast took 8 % longer with them at a 4 KiB boundary, 12 % at torch's
  // 64 bytes (ext4, docs/performance.md).
  std::optional<ZipWriter::Phase> phase;
  if (page_phase_ && large) {
    phase = unread ? ZipWriter::Phase{s.source.offset, 4096} : ZipWriter::Phase{0, ZipWriter::kMaxModulo};
  }
  zip_.begin(name, size, phase);
  PipedRecord out;
  uint32_t crc = 0;
  bool crc_from_input = false;
  if (unread && copy_unread(s, crc)) {
    crc_from_input = s.source.crc32 != 0;
  } else {
    const Pumped p = in_parts ? pump_in_parts(s) : pump(s, large);
    crc = p.crc;
    out.hash = p.hash;
    out.stats = p.stats;
    out.read_back = p.read_back;
  }
  zip_.end(crc);
  out.record = zip_.records().back();
  // Other large records are read back on the worker while the next is written;
  // small ones are left to the final verification pass, which reads them anyway.
  if (readback_ != nullptr && size >= kLarge && !out.read_back) {
    read_back(s, out.record, out.hash, crc_from_input);
    out.read_back = true;
  }
  return out;
}

// Converted records, where the sink takes write_at (whole elements only: a
// storage with trailing bytes, which torch never writes, is left to the path
// that CRCs every byte of it). Not copies: the kernel's copy (a splice, or
// no copy at all where blocks are shared) cost half the CPU time of the
// same bytes read and written in parts, whose writes the file's lock puts
// in a row anyway (1 GiB on ext4: 0.5 s of CPU against 1.1 s); what more
// threads do for them is their read-back (read_back_in_parts).
bool StoragePipeline::goes_in_parts(const Storage& s, bool large, bool identity) const {
  return large && !identity && stored_in_file(checkpoint_.input_of(s), s) && sink_.can_write_at() &&
         s.nbytes % element_size(s.dtype) == 0;
}

void StoragePipeline::wrote(uint64_t n) {
  zip_.wrote_directly(n);
  progress_(n);
}

bool StoragePipeline::copy_unread(const Storage& s, uint32_t& crc) {
  // The input's recorded CRC is the expected value; without one, compute it
  // from the input on the worker while the sink copies.
  std::future<uint32_t> computed;
  if (s.source.crc32 == 0) computed = worker_.run([this, &s] { return input_record_crc(checkpoint_.input_of(s), s); });
  std::array<std::byte, 8> head;
  checkpoint_.input_of(s).read(s.source.offset, head, s.source.record);  // kLarge > 8
  zip_.note_direct_head(head);
  for (uint64_t done = 0; done < s.nbytes;) {
    const uint64_t n = std::min(kCopySlice, s.nbytes - done);
    bool copied = false;
    try {
      copied = sink_.copy_from(checkpoint_.input_of(s).fd(), s.source.offset + done, n);
    } catch (Error& e) {
      e.in_file(checkpoint_.input_of(s).name()).at(s.source.record);  // reading it failed (writes name the output)
      throw;
    }
    if (!copied) {
      if (done != 0) throw Error(ErrorKind::kIo, "the copy stopped part-way").at(zip_.records().back().name);
      if (computed.valid()) computed.get();
      return false;  // not possible for these files: the caller streams instead
    }
    wrote(n);
    done += n;
  }
  crc = computed.valid() ? computed.get() : s.source.crc32;
  return true;
}

StoragePipeline::Pumped StoragePipeline::pump(const Storage& s, bool large) {
  ElementTransform transform(s);
  OutputStage output(sink_, hash_);
  // Large records: the output stage of buffer b runs on the worker while this
  // thread fills the next; `pending[b]` says when it has written them.
  const size_t buffers = large ? kBuffers : 1;
  // No larger than the storage: a checkpoint of many small tensors, each
  // written by a pipeline of its own (a distributed checkpoint's items),
  // would otherwise clear megabytes for every few bytes.
  const size_t slice = static_cast<size_t>(std::clamp<uint64_t>(s.nbytes, 1, kSlice));
  for (size_t b = 0; b < buffers; ++b) {
    if (buffers_[b].size() < transform.output_size(slice)) buffers_[b].resize(transform.output_size(slice));
  }
  std::array<std::future<uint64_t>, kBuffers> pending;
  auto collect = [&](std::future<uint64_t>& p) {
    if (p.valid()) wrote(p.get());
  };
  size_t next = 0;
  bool head = true;
  auto stage = [&](std::span<const std::byte> view) {
    for (size_t at = 0; at < view.size(); at += slice) {
      const auto in = view.subspan(at, std::min(slice, view.size() - at));
      if (!large && transform.identity()) {  // nothing to change, nothing to overlap: no copy
        if (std::exchange(head, false)) zip_.note_direct_head(in.first(std::min<size_t>(in.size(), 8)));
        output(in);
        wrote(in.size());
        continue;
      }
      std::vector<std::byte>& buffer = buffers_[next];
      collect(pending[next]);  // the worker is done with this buffer
      const std::span<const std::byte> bytes(buffer.data(), transform.apply(in, buffer.data()));
      if (std::exchange(head, false)) zip_.note_direct_head(bytes.first(std::min<size_t>(bytes.size(), 8)));
      if (large) {
        // With a read-back the worker also reads every record again: the
        // digest is made here then, while the bytes are in this core's cache.
        const bool digested = readback_ != nullptr;
        if (digested) output.digest(bytes);
        pending[next] = worker_.run([&output, bytes, digested] {
          digested ? output.write(bytes) : output(bytes);
          return uint64_t{bytes.size()};
        });
        next = (next + 1) % buffers;
      } else {
        output(bytes);
        wrote(bytes.size());
      }
    }
  };
  try {
    const InputFile& input = checkpoint_.input_of(s);
    if (large && stored_in_file(input, s)) {
      for_each_mapped(input.fd(), input.name(), s.source.offset, s.nbytes, s.source.record, stage);
    } else if (stored_in_file(input, s) && !input.in_memory() && ReadWindow::takes(s.nbytes)) {
      // A small record: from a window of the file that the records near it share.
      stage(small_records_.bytes(&input, s.source.offset, s.nbytes, input.size(),
                                 [&](uint64_t at, std::span<std::byte> out) { input.read(at, out, s.source.record); }));
    } else {
      RecordReader reader = open_storage_record(checkpoint_.input_of(s), s);
      if (read_buffer_.size() < slice) read_buffer_.resize(slice);
      while (reader.remaining() > 0) {
        const std::span<std::byte> chunk(read_buffer_.data(), std::min<uint64_t>(read_buffer_.size(), reader.remaining()));
        stage(chunk.first(reader.read(chunk)));
      }
    }
    for (size_t i = 0; i < buffers; ++i) collect(pending[(next + i) % buffers]);  // in order
  } catch (...) {
    for (auto& p : pending) {
      if (p.valid()) p.wait();  // the worker's tasks use `output` and the buffers
    }
    throw;
  }
  check_input(s, transform.identity() ? output.crc() : transform.input_crc());
  return {output.crc(), output.hash(), transform.stats()};
}

// Every thread (this one, the worker, the helpers) takes parts of the record
// in turn, each carrying its part through every stage: the read (pread into
// a buffer of the thread's own, a piece at a time, so that the next stages
// read the core's cache), the input's CRC-32, the conversion, the output's
// CRC-32 and hash, the write at its place, the read-back. Each part's sums are
// kept apart and joined in order at the end (Crc32Join, RecordHash). All
// threads write the one file, so they take turns for its lock in the
// kernel; a lock of our own (the one that finds it taken converting on)
// measured slower, its hand-overs sleeping where the kernel's spin. Read,
// not mapped: mapping windows of the input cost each thread page faults,
// and unmapping them TLB flushes on every core and (tmpfs) the page lists'
// lock, more than the copy into the buffer (an unverified cast: 0.84x `cp`
// of its output against 1.03x on tmpfs; on ext4 the same for an input torch
// has just written, 1.03x against 1.22x for one whose page cache aged).
// Measured in docs/performance.md.
StoragePipeline::Pumped StoragePipeline::pump_in_parts(const Storage& s) {
  const InputFile& input = checkpoint_.input_of(s);
  const ElementTransform shape(s);
  const uint64_t size = s.output_nbytes();
  // A part is what a thread takes at once.
  const uint64_t in_part = shape.input_size(kPart);
  const uint64_t in_element = element_size(s.dtype);
  const uint64_t parts = (size + kPart - 1) / kPart;
  struct Part {
    uint32_t input_crc = 0;
    uint32_t output_crc = 0;
    uint64_t hash = 0;
    ConvertStats stats;
  };
  std::vector<Part> done(parts);
  std::array<std::byte, 8> head{};
  const uint64_t offset = sink_.reserve(size);
  std::atomic<uint64_t> next_part{0};
  std::atomic<uint64_t> written{0};
  std::atomic<bool> stop{false};
  uint64_t reported = 0;
  // Each part is read back as soon as it is written, by the thread that
  // wrote it, from the page cache (the record hash is made of the parts'
  // hashes). The GPU load test then loads the whole record on the device,
  // on the worker, in order, while the next records are written: the
  // device's half is off the writers' path, and their XXH3 needs no
  // second read.
  const bool read_back_here = readback_ != nullptr;
  const std::string& record = zip_.records().back().name;
  auto work = [&](Buffers& own, bool reporting) {
    try {
      if (own.input.size() < kPiece) own.input.resize(kPiece);
      if (own.output.size() < shape.output_size(kPiece)) own.output.resize(shape.output_size(kPiece));
      if (read_back_here && own.read_back.size() < kPart) own.read_back.resize(kPart);
      Xxh3 hash;
      for (uint64_t p = next_part.fetch_add(1); p < parts && !stop.load(std::memory_order_relaxed);
           p = next_part.fetch_add(1)) {
        const uint64_t in_begin = p * in_part;
        const uint64_t in_length = std::min(in_part, s.nbytes - in_begin);
        ElementTransform transform(s, in_begin / in_element);
        uint64_t at = offset + p * kPart;
        for (uint64_t from = 0; from < in_length; from += kPiece) {
          const auto in = std::span(own.input).first(std::min<uint64_t>(kPiece, in_length - from));
          input.read(s.source.offset + in_begin + from, in, s.source.record);
          const auto bytes = std::span<const std::byte>(own.output.data(), transform.apply(in, own.output.data()));
          if (p == 0 && from == 0) std::copy_n(bytes.begin(), std::min(bytes.size(), head.size()), head.begin());
          done[p].output_crc = crc32_update(done[p].output_crc, bytes);
          if (hash_) hash.update(bytes);
          sink_.write_at(at, bytes);
          at += bytes.size();
        }
        done[p].input_crc = transform.input_crc();
        done[p].stats = transform.stats();
        if (hash_) done[p].hash = hash.digest(), hash.reset();
        if (read_back_here) {
          const uint64_t part_at = offset + p * kPart;
          readback_->check_part(record, offset, part_at, std::span(own.read_back).first(at - part_at), done[p].hash);
        }
        written.fetch_add(at - offset - p * kPart);
        if (reporting) {
          const uint64_t now = written.load();
          wrote(now - std::exchange(reported, now));
        }
      }
    } catch (...) {
      stop = true;  // the other threads stop at their next part
      throw;
    }
  };
  // The worker and as many helpers as there are parts for the others to take.
  start_helpers();
  std::vector<std::future<void>> others;
  const uint64_t other_threads = std::min<uint64_t>(threads_ - 1, parts - 1);
  for (uint64_t t = 0; t < other_threads; ++t) {
    Background& thread = t == 0 ? worker_ : *helpers_[t - 1];
    Buffers& own = per_thread_[t + 1];
    others.push_back(thread.run([&work, &own] { work(own, false); }));
  }
  run_beside([&] { work(per_thread_[0], true); }, others, stop);
  wrote(size - reported);
  zip_.note_direct_head(std::span(head).first(std::min<uint64_t>(size, head.size())));
  Pumped out;
  uint32_t input_crc = 0;
  RecordHash hash;
  const Crc32Join after_input(in_part), after_output(kPart);
  for (uint64_t p = 0; p < parts; ++p) {
    if (p + 1 < parts) {
      input_crc = after_input(input_crc, done[p].input_crc);
      out.crc = after_output(out.crc, done[p].output_crc);
    } else {  // the last part, perhaps shorter
      const uint64_t out_bytes = size - p * kPart;
      input_crc = crc32_combine(input_crc, done[p].input_crc, shape.input_size(out_bytes));
      out.crc = crc32_combine(out.crc, done[p].output_crc, out_bytes);
    }
    if (hash_) hash.add_piece(done[p].hash);
    out.stats += done[p].stats;
  }
  if (hash_) out.hash = hash.digest();
  check_input(s, input_crc);
  out.read_back = read_back_here;
  if (read_back_here) {
    readback_->add_checked(size);
    if (readback_->loads_on_device()) load_on_device(s, record, offset, size);
  }
  return out;
}

void StoragePipeline::check_input(const Storage& s, uint32_t actual) const {
  check_input_record(checkpoint_.input_of(s), s, actual);
}

void StoragePipeline::read_back(const Storage& s, const WrittenRecord& r, std::optional<uint64_t> hash,
                                bool crc_from_input) {
  sink_.flush();  // the record's last bytes may still be in the sink's buffer
  // A record checked by its CRC-32 (a copy) with threads to spare: its parts
  // are read back by the helpers (and the worker, unless it loads the record
  // on the device meanwhile).
  const bool in_parts = !hash && threads_ > 2;
  if (in_parts) start_helpers();
  checks_.push_back(worker_.run([this, &s, r, hash, crc_from_input, in_parts] {
    try {
      if (in_parts) {
        read_back_in_parts(r, s.output_dtype());
      } else {
        readback_->check(r.name, r.data_offset, r.size, r.crc32, hash, s.output_dtype());
      }
    } catch (const Error& e) {
      // The expected CRC came from the input archive: a mismatch may mean the
      // input itself is damaged, which is a different message.
      if (crc_from_input && e.kind() == ErrorKind::kVerification) check_input(s, input_record_crc(checkpoint_.input_of(s), s));
      throw;
    }
  }));
}

// On the worker, which takes parts itself and waits for the helpers' (they
// never wait for the worker, so this cannot hold them up); with the GPU load
// test, it loads the record on the device instead while the helpers take
// every part. Each part's CRC-32 is joined in order (Crc32Join) and the
// whole compared as check() would.
void StoragePipeline::read_back_in_parts(const WrittenRecord& r, DType device_dtype) {
  const uint64_t parts = (r.size + kPart - 1) / kPart;
  std::vector<uint32_t> crcs(parts);
  std::atomic<uint64_t> next_part{0};
  std::atomic<bool> stop{false};
  auto work = [&](std::vector<std::byte>& buffer) {
    if (buffer.size() < kPart) buffer.resize(kPart);
    try {
      for (uint64_t p = next_part.fetch_add(1); p < parts && !stop.load(std::memory_order_relaxed);
           p = next_part.fetch_add(1)) {
        const auto part = std::span(buffer).first(std::min(kPart, r.size - p * kPart));
        readback_->read_part(r.name, r.data_offset + p * kPart, part);
        crcs[p] = crc32_update(0, part);
      }
    } catch (...) {
      stop = true;
      throw;
    }
  };
  std::vector<std::future<void>> others;
  const uint64_t helping = std::min<uint64_t>(helpers_.size(), readback_->loads_on_device() ? parts : parts - 1);
  for (uint64_t t = 0; t < helping; ++t) {
    std::vector<std::byte>& buffer = per_thread_[t + 2].read_back;
    others.push_back(helpers_[t]->run([&work, &buffer] { work(buffer); }));
  }
  run_beside(
      [&] {
        if (readback_->loads_on_device()) {
          readback_->load_on_device(r.name, r.data_offset, r.size, device_dtype);
        } else {
          work(per_thread_[1].read_back);
        }
      },
      others, stop);
  uint32_t crc = 0;
  const Crc32Join after(kPart);
  for (uint64_t p = 0; p < parts; ++p) {
    crc = p + 1 < parts ? after(crc, crcs[p]) : crc32_combine(crc, crcs[p], r.size - p * kPart);
  }
  readback_->check_crc(r.name, crc, r.crc32);
  readback_->add_checked(r.size);
}

void StoragePipeline::load_on_device(const Storage& s, const std::string& record, uint64_t offset, uint64_t size) {
  sink_.flush();
  checks_.push_back(worker_.run([this, record, offset, size, dtype = s.output_dtype()] {
    readback_->load_on_device(record, offset, size, dtype);
  }));
}

void StoragePipeline::finish() {
  const auto began = std::chrono::steady_clock::now();
  wait_for_all(checks_);  // the first failure, if any, is thrown here
  checks_.clear();
  if (readback_ != nullptr) {
    readback_->writer_waited(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
}

}  // namespace ckptfix
