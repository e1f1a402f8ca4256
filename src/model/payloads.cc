// Reading in payloads left in the input file. An explicit stack and a
// visited set, as in reachable_globals.cc: linear in the graph, however deep
// or shared it is. Every child is followed (dict keys, callables, persistent
// ids too), since the pickler writes them all.
#include "model/payloads.h"

#include <vector>

#include "ckptfix/error.h"
#include "model/graph_walk.h"
#include "pickle/text_codecs.h"
#include "pickle/value_map.h"

namespace ckptfix {

void read_in_payload(CheckpointImpl& checkpoint, Value& v) {
  if (!v.in_file()) return;
  // Leaving payloads in the file only spares memory for those that stay
  // there: one read in costs what it would have cost in the pickle, so a
  // pickle of one huge str is refused as it is without the option.
  const uint64_t limit = checkpoint.limits.max_pickle_bytes;
  const uint64_t held = checkpoint.pickle_bytes_held;
  if (held > limit || v.in_file_length() > limit - held) {
    throw Error(ErrorKind::kLimit, "the object pickle holds more than " + std::to_string(limit) +
                                       " bytes in memory once its " + std::to_string(v.in_file_length()) +
                                       "-byte str or bytes payload is read in (limit max_pickle_bytes = " +
                                       std::to_string(limit) + ")")
        .at(object_pickle_name(checkpoint));
  }
  checkpoint.pickle_bytes_held = held + v.in_file_length();
  std::string text(v.in_file_length(), '\0');
  checkpoint.file->read(v.in_file_offset(), std::as_writable_bytes(std::span(text)), object_pickle_name(checkpoint));
  if (v.kind == ValueKind::kStr && !is_utf8_surrogatepass(text)) {  // as the unpickler checks the str it reads
    throw Error(ErrorKind::kCorrupt, "a str that is not UTF-8 (CPython refuses to load it)")
        .at(object_pickle_name(checkpoint));
  }
  v.text = std::move(text);
  v.set_in_file(0, 0);
}

void read_in_left_payloads(const Checkpoint& checkpoint) {
  // The impl lives on the heap, never a const object, so writing through
  // it is sound; to callers nothing changes but where the text lies.
  auto& impl = const_cast<CheckpointImpl&>(impl_of(checkpoint));
  if (!impl.payloads_in_file) return;
  try {
    read_in_payloads(impl);
  } catch (Error& e) {
    e.in_file(impl.file->name());
    throw;
  }
}

void read_in_payloads(CheckpointImpl& checkpoint, const std::unordered_set<const Value*>& keep) {
  ValueSet seen;
  std::vector<Value*> stack;
  auto push = [&](Value* v) {
    // A leaf has no parts, so no payload left in the file.
    if (v != nullptr && !v->refers_to_nothing() && seen.insert(v)) stack.push_back(v);
  };
  push(checkpoint.root);
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    if (v->in_file() && keep.count(v) == 0) read_in_payload(checkpoint, *v);
    for_each_child(*v, push);
  }
  if (keep.empty()) checkpoint.payloads_in_file = false;
}

}  // namespace ckptfix
