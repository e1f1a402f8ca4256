// load_state_dict: checkpoint tensors as at::Tensors, sharing what the file
// shares, zero-copy where the file allows it.

#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "ckptfix/torch.h"
#include "libtorch/libtorch_errors.h"
#include "libtorch/scalar_types.h"

namespace ckptfix::torch {
namespace {

// A private, copy-on-write mapping of the whole file: tensors may be
// written to without touching the file, and pages nobody writes are shared
// with the page cache instead of copied.
class Loader {
 public:
  Loader(const Checkpoint& checkpoint, const LoadOptions& options) : ck_(checkpoint), options_(options) {
    device_ = parse_device(options.map_location);
  }

  // A 1-D tensor over a whole storage, cast and moved as asked: every
  // tensor of that storage is a view of it, so sharing is kept.
  const at::Tensor& base(int32_t index) {
    auto it = bases_.find(index);
    if (it != bases_.end()) return it->second;
    const StorageInfo& s = ck_.storages()[static_cast<size_t>(index)];
    const std::optional<c10::ScalarType> type = to_scalar_type(s.dtype);
    if (!type || c10::isQIntType(*type)) {
      throw Error(ErrorKind::kUnsupported, "storage '" + s.key + "' holds " + std::string(dtype_name(s.dtype)) +
                                               ", which load_state_dict does not support");
    }
    const int64_t numel = static_cast<int64_t>(s.nbytes / element_size(s.dtype));
    const bool cast = options_.dtype && is_castable_float(s.dtype) && *options_.dtype != *type;
    at::Tensor t;
    Checkpoint::PrivateBytes mapped;
    if (zero_copy_possible(s, cast)) mapped = ck_.map_storage_private(static_cast<size_t>(index));
    if (!mapped.bytes.empty()) {
      auto* owner = new std::shared_ptr<void>(std::move(mapped.owner));  // released by the DataPtr's deleter
      at::DataPtr data(mapped.bytes.data(), owner, [](void* ctx) { delete static_cast<std::shared_ptr<void>*>(ctx); },
                       at::Device(at::kCPU));
      at::Storage storage(at::Storage::use_byte_size_t(), s.nbytes, std::move(data), nullptr, false);
      t = at::empty({0}, at::TensorOptions().dtype(*type)).set_(storage, 0, {numel}, {1});
      ++zero_copy_;
    } else {
      t = at::empty({numel}, at::TensorOptions().dtype(*type));
      ck_.read_storage(static_cast<size_t>(index), 0,
                       std::span(static_cast<std::byte*>(t.data_ptr()), static_cast<size_t>(s.nbytes)));
    }
    if (cast) t = t.to(*options_.dtype);
    if (!device_.is_cpu()) t = t.to(device_);
    return bases_.emplace(index, std::move(t)).first->second;
  }

  at::Tensor tensor(const TensorInfo& t) {
    const at::Tensor& b = base(t.storage);
    at::Tensor view = at::empty({0}, b.options()).set_(b.storage(), t.storage_offset, t.shape, t.stride);
    if (t.requires_grad && (view.is_floating_point() || view.is_complex())) view.set_requires_grad(true);
    return view;
  }

 private:
  static at::Device parse_device(const std::string& text) {
    try {
      return at::Device(text);
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::kInvalidArgument, "map_location '" + text + "': " + first_line(e));
    }
  }

  bool zero_copy_possible(const StorageInfo& s, bool cast) const {
    return !cast && device_.is_cpu() && s.source.encoding == StorageSource::Encoding::kStored && !s.big_endian &&
           s.nbytes > 0 && s.source.offset % element_size(s.dtype) == 0;
  }

  const Checkpoint& ck_;
  const LoadOptions& options_;
  at::Device device_{at::kCPU};
  std::unordered_map<int32_t, at::Tensor> bases_;
  size_t zero_copy_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> load_state_dict(const std::filesystem::path& file,
                                                                 const LoadOptions& options) {
  const Checkpoint ck = Checkpoint::open(file);
  std::string where;
  try {
    const std::vector<StateDictEntry> entries = select_state_dict(ck, options.key);
    Loader loader(ck, options);
    std::vector<std::pair<std::string, at::Tensor>> out;
    std::unordered_set<std::string> seen;
    for (const StateDictEntry& e : entries) {
      where = "key '" + e.key + "'";
      std::string name = e.key;
      if (!options.strip_prefix.empty() && name.compare(0, options.strip_prefix.size(), options.strip_prefix) == 0) {
        name.erase(0, options.strip_prefix.size());
      }
      if (!seen.insert(name).second) {
        throw Error(ErrorKind::kConflict, "stripping '" + options.strip_prefix + "' makes two keys '" + name + "'");
      }
      out.emplace_back(std::move(name), loader.tensor(ck.tensors()[e.tensor]));
    }
    return out;
  } catch (Error& e) {
    e.in_file(file.string());
    if (!where.empty()) e.at(where);
    throw;
  } catch (const c10::Error& e) {
    Error error = from_libtorch(e);
    error.in_file(file.string());
    if (!where.empty()) error.at(where);
    throw error;
  }
}

}  // namespace ckptfix::torch
