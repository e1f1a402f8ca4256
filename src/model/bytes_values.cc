#include "model/bytes_values.h"

#include <vector>

namespace ckptfix {

std::optional<std::string> utf8_to_latin1(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < text.size()) {
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(text[++i]) & 0x3F)));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::optional<std::string> bytes_of(const Value& v) {
  if (v.kind == ValueKind::kBytes && !v.in_file()) return v.text;
  if (!v.is_call_to("_codecs", "encode") || v.args() == nullptr || v.kwargs() != nullptr) return std::nullopt;
  const std::vector<Value*>& args = v.args()->items;
  if (args.size() != 2 || !args[0]->is_str() || args[0]->in_file() || !args[1]->is_str() ||
      args[1]->text != "latin1" || !v.entries().empty() || !v.items.empty() || !v.states().empty()) {
    return std::nullopt;
  }
  return utf8_to_latin1(args[0]->text);
}

bool is_bytes_io_class(const Value& global) {
  return global.kind == ValueKind::kGlobal && (global.text == "_io" || global.text == "io") &&
         global.name() == "BytesIO";
}

std::optional<BytesIOValue> bytes_io_of(const Value& v) {
  if (v.kind != ValueKind::kObject || v.callable() == nullptr || !is_bytes_io_class(*v.callable()) ||
      v.kwargs() != nullptr || !v.entries().empty() || !v.items.empty() || v.args() == nullptr) {
    return std::nullopt;
  }
  const std::vector<Value*>& args = v.args()->items;
  BytesIOValue out;
  if (v.states().empty()) {  // _io.BytesIO(bytes)
    if (args.size() != 1) return std::nullopt;
    std::optional<std::string> bytes = bytes_of(*args[0]);
    if (!bytes) return std::nullopt;
    out.bytes = std::move(*bytes);
    return out;
  }
  // NEWOBJ(_io.BytesIO, ()) then BUILD((bytes, position, dict or None)):
  // BytesIO.__setstate__ takes exactly that tuple.
  if (!args.empty() || v.creation() == ObjectCreation::kReduce || v.states().size() != 1) return std::nullopt;
  const Value* state = v.states()[0];
  if (state == nullptr || state->kind != ValueKind::kTuple || state->items.size() != 3) return std::nullopt;
  std::optional<std::string> bytes = bytes_of(*state->items[0]);
  const Value& position = *state->items[1];
  const Value& attributes = *state->items[2];
  if (!bytes || position.kind != ValueKind::kInt || position.integer < 0) return std::nullopt;
  if (attributes.kind != ValueKind::kNone && !(attributes.kind == ValueKind::kDict && attributes.entries().empty())) {
    return std::nullopt;
  }
  out.bytes = std::move(*bytes);
  out.position = position.integer;
  return out;
}

}  // namespace ckptfix
