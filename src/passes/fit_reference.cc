// Reading what a model expects (fit.h's ModelReference): from a checkpoint
// ckptfix reads (a meta-device state dict is the smallest) or from a JSON
// document any program can write.
#include <algorithm>
#include <unordered_set>

#include "ckptfix/error.h"
#include "ckptfix/fit.h"
#include "ckptfix/state_dict.h"
#include "io/input_file.h"
#include "json/json.h"
#include "model/state_dict_values.h"

namespace ckptfix {
namespace {

// A JSON reference of 1,000,000 keys is some 80 MB; four times the largest
// model known fits in this.
constexpr uint64_t kMaxJsonReferenceBytes = uint64_t{1} << 30;
constexpr size_t kMaxReferenceEntries = 10'000'000;
// Dimensions of one tensor: torch allows 64.
constexpr size_t kMaxDimensions = 64;

Error json_error(const std::string& name, const std::string& key, const std::string& message) {
  return std::move(Error(ErrorKind::kInvalidArgument, message).at("key '" + printable(key) + "'").in_file(name));
}

// A shape of the JSON form: an array of non-negative integers.
std::vector<int64_t> json_shape(const std::string& name, const std::string& key, const JsonValue& shape) {
  if (shape.kind != JsonValue::Kind::kArray) {
    throw json_error(name, key, "\"shape\" is " + std::string(shape.kind_name()) + ", not an array of sizes");
  }
  if (shape.items.size() > kMaxDimensions) {
    throw json_error(name, key, "\"shape\" has " + std::to_string(shape.items.size()) + " dimensions, more than torch's " +
                                    std::to_string(kMaxDimensions));
  }
  std::vector<int64_t> out;
  for (const JsonValue& size : shape.items) {
    const std::optional<uint64_t> n = size.as_uint();
    if (!n || *n > static_cast<uint64_t>(INT64_MAX)) {
      throw json_error(name, key, "\"shape\" holds " + (size.kind == JsonValue::Kind::kNumber ? "'" + size.text + "'"
                                                                                               : std::string(size.kind_name())) +
                                      ", not a size (a non-negative integer)");
    }
    out.push_back(static_cast<int64_t>(*n));
  }
  return out;
}

ExpectedEntry json_entry(const std::string& name, std::string key, const JsonValue& value) {
  if (value.kind != JsonValue::Kind::kObject) {
    throw json_error(name, key, "the value is " + std::string(value.kind_name()) +
                                    ", not an object such as {\"shape\": [3, 4], \"dtype\": \"float32\"}");
  }
  ExpectedEntry e;
  e.key = std::move(key);
  for (const JsonMember& m : value.members) {
    if (m.key != "shape" && m.key != "dtype") {
      throw json_error(name, e.key, "unknown field \"" + printable(m.key) + "\" (an entry has \"shape\" and \"dtype\")");
    }
  }
  const JsonValue* shape = value.find("shape");
  const JsonValue* dtype = value.find("dtype");
  if (shape == nullptr && dtype == nullptr) {
    if (!is_extra_state_key(e.key)) {
      throw json_error(name, e.key, "no \"shape\" ({} is for a module's extra state, a key ending in '_extra_state')");
    }
    e.tensor = false;
    return e;
  }
  if (shape == nullptr) throw json_error(name, e.key, "no \"shape\"");
  e.shape = json_shape(name, e.key, *shape);
  e.dtype = DType::kUntyped;  // not said: --dtype like leaves the tensor as it is
  if (dtype != nullptr) {
    if (dtype->kind != JsonValue::Kind::kString) {
      throw json_error(name, e.key, "\"dtype\" is " + std::string(dtype->kind_name()) + ", not a string such as \"float32\"");
    }
    std::string_view text = dtype->text;
    if (text.substr(0, 6) == "torch.") text.remove_prefix(6);  // str(t.dtype) as it is
    const std::optional<DType> d = dtype_from_torch_attribute(text);
    if (!d || *d == DType::kUntyped) {
      throw json_error(name, e.key, "\"dtype\" '" + printable(dtype->text) + "' is no torch dtype");
    }
    e.dtype = *d;
  }
  return e;
}

}  // namespace

ModelReference model_reference_from_json(std::string_view json, const std::string& name) {
  ModelReference reference;
  reference.name = name;
  try {
    parse_json_members(json, [&](std::string key, JsonValue value) {
      if (reference.entries.size() >= kMaxReferenceEntries) {
        throw Error(ErrorKind::kLimit, "more than " + std::to_string(kMaxReferenceEntries) + " keys").in_file(name);
      }
      reference.entries.push_back(json_entry(name, std::move(key), value));
    });
  } catch (Error& e) {
    if (e.file().empty()) {
      throw Error(ErrorKind::kInvalidArgument,
                  e.message() + " (a JSON reference is one object: {\"key\": {\"shape\": [3, 4], \"dtype\": \"float32\"}, ...})")
          .in_file(name);
    }
    throw;
  }
  return reference;
}

ModelReference read_model_reference(const std::filesystem::path& path, const std::string& key,
                                    const OpenOptions& options) {
  const std::shared_ptr<const InputFile> file = InputFile::open(path);
  // JSON begins with '{' (after space, within its first 4 KiB); a torch file with "PK" or a pickle opcode.
  const FileBytes head = file->head(4096);
  const auto* begin = reinterpret_cast<const char*>(head.data());
  const std::string_view start(begin, head.size());
  const size_t first = start.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && start[first] == '{') {
    if (!key.empty()) {
      throw Error(ErrorKind::kInvalidArgument, "a JSON reference is one state dict: it takes no `like_key`").in_file(file->name());
    }
    if (file->size() > kMaxJsonReferenceBytes) {
      throw Error(ErrorKind::kLimit, "a JSON reference of " + std::to_string(file->size()) + " bytes, more than " +
                                         std::to_string(kMaxJsonReferenceBytes))
          .in_file(file->name());
    }
    const FileBytes text = file->read_bytes(0, file->size(), "JSON reference");
    return model_reference_from_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                                     file->name());
  }
  const Checkpoint checkpoint = Checkpoint::open(path, options);
  ModelReference reference;
  reference.name = checkpoint.file_name();
  const auto tensors = checkpoint.tensors();
  for (const StateDictEntry& e : select_state_dict(checkpoint, key)) {
    ExpectedEntry expected;
    expected.key = e.key;
    switch (e.kind) {
      case StateDictEntry::Kind::kTensor:
        expected.shape = tensors[e.tensor].shape;
        expected.dtype = tensors[e.tensor].dtype;
        break;
      case StateDictEntry::Kind::kSparseTensor:
        expected.shape = e.sparse.size;
        expected.dtype = tensors[e.sparse.parts.back()].dtype;  // its values'
        break;
      case StateDictEntry::Kind::kData:
        expected.tensor = false;
        break;
    }
    reference.entries.push_back(std::move(expected));
  }
  return reference;
}

}  // namespace ckptfix
