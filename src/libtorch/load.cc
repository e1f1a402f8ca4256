// load_state_dict: checkpoint tensors as at::Tensors, sharing what the file
// shares, zero-copy where the file allows it, and onto a device through
// pinned staging buffers (device_staging.h).

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>
#include <unordered_map>
#include <unordered_set>

#include <ATen/Parallel.h>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "ckptfix/state_dict.h"
#include "ckptfix/libtorch.h"
#include "libtorch/device_staging.h"
#include "libtorch/libtorch_errors.h"
#include "libtorch/read_threads.h"
#include "libtorch/scalar_types.h"

namespace ckptfix::libtorch {
namespace {

// A private, copy-on-write mapping of the whole file: tensors may be
// written to without touching the file, and pages nobody writes are shared
// with the page cache instead of copied.
class Loader {
 public:
  Loader(const Checkpoint& checkpoint, const LoadOptions& options) : ck_(checkpoint), options_(options) {
    device_ = parse_device(options.map_location);
    require_usable(device_, options.map_location, checkpoint);
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
    if (options_.zero_copy && zero_copy_possible(s, cast)) mapped = ck_.map_storage_private(static_cast<size_t>(index));
    if (!device_.is_cpu() || !options_.zero_copy) {
      // Through the staging buffers onto the device (or, not zero-copy, into memory of our own).
      at::Tensor raw = at::empty({static_cast<int64_t>(s.nbytes)}, at::TensorOptions().dtype(at::kByte).device(device_));
      staged_copy(static_cast<size_t>(index), raw);
      t = s.nbytes > 0 ? raw.view(*type) : at::empty({0}, at::TensorOptions().dtype(*type).device(device_));
    } else if (!mapped.bytes.empty()) {
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
    if (cast) t = t.to(*options_.dtype);  // on the device, after the copy: Tensor::to there
    return bases_.emplace(index, std::move(t)).first->second;
  }

  /// Bytes staged so far (for tests and benchmarks).
  uint64_t staged_bytes() const { return staging_ ? staging_->bytes() : 0; }

  at::Tensor tensor(const TensorInfo& t) {
    if (t.kind == TensorKind::kMeta) {  // as torch.load makes it: empty_strided on the meta device, whatever the map
      const std::optional<c10::ScalarType> type = to_scalar_type(t.dtype);
      if (!type) throw Error(ErrorKind::kUnsupported, std::string(dtype_name(t.dtype)) + " has no LibTorch type");
      at::Tensor meta = at::empty_strided(t.shape, t.stride, at::TensorOptions().dtype(*type).device(at::kMeta));
      if (t.requires_grad && (meta.is_floating_point() || meta.is_complex())) meta.set_requires_grad(true);
      return meta;
    }
    const at::Tensor& b = base(t.storage);
    at::Tensor view = at::empty({0}, b.options()).set_(b.storage(), t.storage_offset, t.shape, t.stride);
    if (t.requires_grad && (view.is_floating_point() || view.is_complex())) view.set_requires_grad(true);
    return view;
  }

  // A sparse tensor from its parts, as torch._utils._rebuild_sparse_tensor makes it.
  at::Tensor sparse(const SparseTensorInfo& s) {
    std::vector<at::Tensor> parts;
    for (size_t p : s.parts) parts.push_back(tensor(ck_.tensors()[p]));
    if (s.layout == "sparse_coo") {
      at::Tensor out = at::sparse_coo_tensor(parts[0], parts[1], s.size);
      if (s.coalesced.value_or(false)) out._coalesced_(true);
      return out;
    }
    const at::Layout layout = s.layout == "sparse_csr"   ? at::kSparseCsr
                              : s.layout == "sparse_csc" ? at::kSparseCsc
                              : s.layout == "sparse_bsr" ? at::kSparseBsr
                                                         : at::kSparseBsc;
    return at::sparse_compressed_tensor(parts[0], parts[1], parts[2], s.size, parts[2].options().layout(layout));
  }

 private:
  static at::Device parse_device(const std::string& text) {
    try {
      return at::Device(text);
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::kInvalidArgument, "map_location '" + text + "': " + first_line(e));
    }
  }

  // A CUDA device this LibTorch cannot use fails here, in torch.load's
  // words and one line, before any tensor: LibTorch's own error is a
  // dispatcher dump of a thousand characters naming the first key.
  static void require_usable(const at::Device& device, const std::string& text, const Checkpoint& ck) {
    if (!device.is_cuda()) return;
    const int64_t count = at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
    std::string reason;
    if (count == 0) {
      reason = "this LibTorch cannot use CUDA (torch::cuda::is_available() is false)";
    } else if (device.has_index() && device.index() >= count) {
      reason = "this machine has " + std::to_string(count) + " CUDA device(s)";
    } else {
      return;
    }
    std::string saved;
    for (const StorageInfo& s : ck.storages()) {
      if (s.location != "cpu" && !s.location.empty()) {
        saved = s.location;
        break;
      }
    }
    throw Error(ErrorKind::kGpu, "Attempting to deserialize object on a CUDA device (map_location '" + text + "'" +
                                     (saved.empty() ? std::string() : ", the file saved on '" + saved + "'") + ") but " +
                                     reason + "; load with map_location = \"cpu\"");
  }

  // Copies storage `index`'s bytes into `target` through the staging buffers.
  // Stored bytes are read where they lie, each buffer's share on several
  // threads; others (deflated, a numpy array's text, assembled from chunks)
  // are read once, in order, into memory first: reading them at an offset
  // means reading everything before it.
  void staged_copy(size_t index, at::Tensor& target) {
    const StorageInfo& s = ck_.storages()[index];
    if (!staging_) staging_.emplace(device_, options_.staging_bytes);
    const bool random_access = s.source.encoding == StorageSource::Encoding::kStored ||
                               s.source.encoding == StorageSource::Encoding::kMemory;
    if (random_access) {
      staging_->copy(target, [&](uint64_t offset, std::span<std::byte> out) { read_parallel(index, offset, out); });
      return;
    }
    at::Tensor host = at::empty({static_cast<int64_t>(s.nbytes)}, at::TensorOptions().dtype(at::kByte));
    const auto* bytes = static_cast<const std::byte*>(host.data_ptr());
    ck_.read_storage(index, 0, std::span(static_cast<std::byte*>(host.data_ptr()), static_cast<size_t>(s.nbytes)));
    staging_->copy(target, [&](uint64_t offset, std::span<std::byte> out) {
      std::memcpy(out.data(), bytes + offset, out.size());
    });
  }

  // Bytes [offset, offset + out.size()) of a stored storage, in pieces of
  // 1 MiB on as many threads as ATen's (read_threads.h), so that a 16 MiB
  // storage keeps 16 threads reading: the page cache gives one thread about
  // 6 GB/s, eight 16 (the GPU machine). A big-endian storage is read in
  // whole elements (they are swapped), so a range that cuts one (a tiny
  // buffer) goes through the whole elements around it.
  void read_parallel(size_t index, uint64_t offset, std::span<std::byte> out) {
    const StorageInfo& s = ck_.storages()[index];
    const uint64_t unit = s.big_endian ? element_size(s.dtype) : 1;
    if (offset % unit != 0 || out.size() % unit != 0) {
      const uint64_t first = offset / unit * unit;
      const uint64_t last = std::min<uint64_t>((offset + out.size() + unit - 1) / unit * unit, s.nbytes);
      std::vector<std::byte> whole(static_cast<size_t>(last - first));
      ck_.read_storage(index, first, whole);
      std::memcpy(out.data(), whole.data() + (offset - first), out.size());
      return;
    }
    constexpr uint64_t kPiece = uint64_t{1} << 20;  // a multiple of every element size
    if (!read_threads_) read_threads_.emplace(static_cast<size_t>(std::max(1, at::get_num_threads())));
    read_threads_->run(static_cast<size_t>((out.size() + kPiece - 1) / kPiece), [&](size_t p) {
      const uint64_t at = static_cast<uint64_t>(p) * kPiece;
      ck_.read_storage(index, offset + at, out.subspan(at, std::min<uint64_t>(kPiece, out.size() - at)));
    });
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
  std::optional<DeviceStaging> staging_;  // made when the first storage goes through it
  std::optional<ReadThreads> read_threads_;  // made with the first staged read
};

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> load_state_dict(const std::filesystem::path& file,
                                                                 const LoadOptions& options) {
  Checkpoint ck = Checkpoint::open(file);
  std::string where;
  try {
    std::string key = options.key;
    if (options.like != nullptr) {
      // The fit makes the state dict, fitted to the module, the root.
      if (!options.strip_prefix.empty()) {
        throw Error(ErrorKind::kInvalidArgument, "`like` chooses the prefixes itself: give no strip_prefix with it");
      }
      PassOptions passes;
      if (!key.empty()) passes.keys.push_back(key);
      passes.like = std::make_shared<const ModelReference>(model_reference(*options.like));
      passes.fit = options.fit;
      apply_passes(ck, passes);
      key.clear();
    }
    const std::vector<StateDictEntry> entries = select_state_dict(ck, key);
    Loader loader(ck, options);
    std::vector<std::pair<std::string, at::Tensor>> out;
    std::unordered_set<std::string> seen;
    for (const StateDictEntry& e : entries) {
      std::string name = e.key;
      if (!options.strip_prefix.empty() && name.compare(0, options.strip_prefix.size(), options.strip_prefix) == 0) {
        name.erase(0, options.strip_prefix.size());
      }
      where = "key '" + name + "'";  // as the caller knows it: after strip_prefix
      // A module's extra state that is not a tensor is Python data, which no
      // LibTorch module has (include/ckptfix/libtorch.h): left out.
      if (e.kind == StateDictEntry::Kind::kData) continue;
      if (!seen.insert(name).second) {
        throw Error(ErrorKind::kConflict, "stripping '" + options.strip_prefix + "' makes two keys '" + name + "'");
      }
      out.emplace_back(std::move(name), e.kind == StateDictEntry::Kind::kSparseTensor ? loader.sparse(e.sparse)
                                                                                     : loader.tensor(ck.tensors()[e.tensor]));
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

}  // namespace ckptfix::libtorch
