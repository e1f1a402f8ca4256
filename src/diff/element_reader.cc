#include "diff/element_reader.h"

#include <algorithm>
#include <cstring>

#include "ckptfix/error.h"
#include "dtype_kernels/convert.h"
#include "diff/float8.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

constexpr uint64_t kChunkElements = 1 << 20;

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

ElementReader::ElementReader(const Checkpoint& checkpoint, const Tensor& tensor)
    : checkpoint_(checkpoint),
      tensor_(tensor),
      element_size_(element_size(tensor.dtype)),
      numel_(tensor.numel()),
      first_(static_cast<uint64_t>(tensor.storage_offset)),
      contiguous_(is_contiguous(tensor)),
      index_(tensor.shape.size(), 0) {
  if (const uint32_t per = packed_values(tensor.dtype); per > 1) {
    // quint4x2 / quint2x4 hold several values per byte: compare the bytes.
    numel_ = (numel_ + per - 1) / per;
    first_ /= per;
    contiguous_ = true;
  }
  if (!contiguous_ && numel_ > 0) {
    // The span of storage the view touches: offset .. offset + sum((size-1)*stride).
    uint64_t last = static_cast<uint64_t>(tensor.storage_offset);
    for (size_t i = 0; i < tensor.shape.size(); ++i) last += static_cast<uint64_t>((tensor.shape[i] - 1) * tensor.stride[i]);
    buffer_first_ = static_cast<uint64_t>(tensor.storage_offset);
    buffer_.resize((last - buffer_first_ + 1) * element_size_);
    checkpoint.read_storage(static_cast<size_t>(tensor.storage), buffer_first_ * element_size_, buffer_);
  }
}

bool is_complex_dtype(DType dtype) {
  return dtype == DType::kComplex32 || dtype == DType::kBComplex32 || dtype == DType::kComplex64 ||
         dtype == DType::kComplex128;
}

double element_value(DType dtype, const std::byte* p, bool imaginary) {
  const uint32_t size = element_size(dtype);
  switch (dtype) {
    case DType::kFloat16: return half_bits_to_float(load<uint16_t>(p));
    case DType::kBFloat16: return bfloat16_bits_to_float(load<uint16_t>(p));
    case DType::kFloat32: return load<float>(p);
    case DType::kFloat64: return load<double>(p);
    case DType::kInt8:
    case DType::kQInt8: return load<int8_t>(p);
    case DType::kUInt8:
    case DType::kQUInt8:
    case DType::kBool: return load<uint8_t>(p);
    case DType::kInt16: return load<int16_t>(p);
    case DType::kInt32:
    case DType::kQInt32: return load<int32_t>(p);
    case DType::kInt64: return static_cast<double>(load<int64_t>(p));
    case DType::kUInt16: return load<uint16_t>(p);
    case DType::kUInt32: return load<uint32_t>(p);
    case DType::kUInt64: return static_cast<double>(load<uint64_t>(p));
    case DType::kComplex32: return half_bits_to_float(load<uint16_t>(p + (imaginary ? 2 : 0)));
    case DType::kBComplex32: return bfloat16_bits_to_float(load<uint16_t>(p + (imaginary ? 2 : 0)));
    case DType::kComplex64: return load<float>(p + (imaginary ? 4 : 0));
    case DType::kComplex128: return load<double>(p + (imaginary ? 8 : 0));
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2:
    case DType::kFloat8E4M3Fnuz:
    case DType::kFloat8E5M2Fnuz:
    case DType::kFloat8E8M0Fnu: return float8_value(dtype, load<uint8_t>(p));
    default: {  // packed types (bits*, float4_e2m1fn_x2, sub-byte quantized): their raw bits, compared exactly
      uint64_t bits = 0;
      std::memcpy(&bits, p, std::min<uint32_t>(size, 8));
      return static_cast<double>(bits);
    }
  }
}

size_t ElementReader::next(size_t max, std::vector<double>& re, std::vector<double>& im, std::vector<uint64_t>& raw) {
  const bool complex = is_complex_dtype(tensor_.dtype);
  const uint64_t n = std::min<uint64_t>(max, numel_ - done_);
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t element;  // index in the storage
    if (contiguous_) {
      element = first_ + done_;
      if (buffer_.empty() || element < buffer_first_ || element >= buffer_first_ + buffer_.size() / element_size_) {
        const uint64_t count = std::min(kChunkElements, numel_ - done_);
        buffer_.resize(count * element_size_);
        buffer_first_ = element;
        if (!reader_) {
          const Storage& s = impl_of(checkpoint_).storages[static_cast<size_t>(tensor_.storage)];
          reader_ = std::make_unique<StorageReader>(impl_of(checkpoint_).input_of(s), s);
          reader_->skip(element * element_size_);
        }
        if (reader_->read(buffer_) != buffer_.size()) {
          throw Error(ErrorKind::kCorrupt, "storage '" + impl_of(checkpoint_).storages[static_cast<size_t>(tensor_.storage)].key +
                                               "' ends inside a tensor");
        }
      }
    } else {
      element = static_cast<uint64_t>(tensor_.storage_offset);
      for (size_t d = 0; d < index_.size(); ++d) element += static_cast<uint64_t>(index_[d] * tensor_.stride[d]);
      for (size_t d = index_.size(); d-- > 0;) {  // advance the row-major multi-index
        if (++index_[d] < tensor_.shape[d]) break;
        index_[d] = 0;
      }
    }
    const std::byte* p = buffer_.data() + (element - buffer_first_) * element_size_;
    re.push_back(element_value(tensor_.dtype, p, false));
    im.push_back(complex ? element_value(tensor_.dtype, p, true) : 0.0);
    uint64_t bits = 0;  // exact comparison of integers that float64 cannot hold
    std::memcpy(&bits, p, std::min<uint32_t>(element_size_, 8));
    raw.push_back(bits);
    ++done_;
  }
  return n;
}

}  // namespace ckptfix
