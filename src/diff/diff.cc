#include "ckptfix/diff.h"
#include "model/checkpoint_impl.h"
#include "model/payloads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "ckptfix/prefixes.h"
#include "diff/element_reader.h"
#include "error_boundary.h"
#include "model/dict_selection.h"
#include "model/graph_walk.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

constexpr size_t kBatch = 1 << 16;
// Bytes of each file compared at once by compare_bytes_first.
constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

// Compared bit for bit: integers (float64 cannot hold every int64) and the
// packed types, whose bytes hold several values or none with a numeric meaning.
bool compares_bits(DType d) {
  switch (d) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kBool:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kBits8:
    case DType::kBits16:
    case DType::kBits1x8:
    case DType::kBits2x4:
    case DType::kBits4x2:
    case DType::kFloat4E2M1FnX2:
    case DType::kQUInt4x2:
    case DType::kQUInt2x4:
    case DType::kUntyped: return true;
    default: return false;
  }
}

std::string strip_element(std::string element, const DiffOptions& options) {
  auto starts = [&](std::string_view p) { return element.size() >= p.size() && element.compare(0, p.size(), p) == 0; };
  for (const std::string& prefix : options.strip_prefixes) {
    if (!prefix.empty() && starts(prefix)) element.erase(0, prefix.size());
  }
  for (bool again = options.strip_wrappers; again;) {
    again = false;
    for (std::string_view wrapper : known_wrapper_prefixes()) {
      if (starts(wrapper)) {
        element.erase(0, wrapper.size());
        again = true;
      }
    }
  }
  return element;
}

std::string match_key(const Path& path, const DiffOptions& options) {
  Path stripped;
  for (const PathElement& e : path) {
    if (const auto* s = std::get_if<std::string>(&e)) {
      stripped.push_back(strip_element(*s, options));
    } else {
      stripped.push_back(e);
    }
  }
  return path_to_string(stripped);
}

// Elements of a tensor as float64 (and their first 8 bytes, for integers
// float64 cannot hold), a batch at a time.
struct Values {
  std::vector<double> re, im;
  std::vector<uint64_t> raw;
  void clear() { re.clear(), im.clear(), raw.clear(); }
};

// Compares n elements of A and B, adding what differs to `out`.
void compare_elements(size_t n, const Values& a, const Values& b, bool exact_ints, const DiffOptions& options,
                      TensorDiff& out) {
  for (size_t i = 0; i < n; ++i) {
    if (exact_ints) {
      if (a.raw[i] != b.raw[i]) {
        ++out.mismatched;
        const double d = std::fabs(a.re[i] - b.re[i]);
        out.max_abs_diff = std::max(out.max_abs_diff, d);
        if (b.re[i] != 0) out.max_rel_diff = std::max(out.max_rel_diff, d / std::fabs(b.re[i]));
      }
      continue;
    }
    const bool a_nan = std::isnan(a.re[i]) || std::isnan(a.im[i]);
    const bool b_nan = std::isnan(b.re[i]) || std::isnan(b.im[i]);
    if (a_nan || b_nan) {
      if (a_nan != b_nan) ++out.mismatched;  // NaN equals NaN, nothing else
      continue;
    }
    if (a.re[i] == b.re[i] && a.im[i] == b.im[i]) continue;  // includes equal infinities and -0 == 0
    const double d = std::hypot(a.re[i] - b.re[i], a.im[i] - b.im[i]);
    const double mag = std::hypot(b.re[i], b.im[i]);
    out.max_abs_diff = std::max(out.max_abs_diff, d);
    if (mag != 0) out.max_rel_diff = std::max(out.max_rel_diff, d / mag);
    if (!(d <= options.atol + options.rtol * mag)) ++out.mismatched;  // inf - x is inf: never close
  }
}

void compare_values(const Checkpoint& a, const Tensor& ta, const Checkpoint& b, const Tensor& tb,
                    const DiffOptions& options, TensorDiff& out) {
  ElementReader ra(a, ta), rb(b, tb);
  const bool exact_ints = ta.dtype == tb.dtype && compares_bits(ta.dtype);
  Values va, vb;
  for (uint64_t done = 0; done < out.numel;) {
    va.clear(), vb.clear();
    const size_t n = ra.next(kBatch, va.re, va.im, va.raw);
    rb.next(kBatch, vb.re, vb.im, vb.raw);
    compare_elements(n, va, vb, exact_ints, options, out);
    done += n;
    if (n == 0) break;
  }
}

// The elements of `bytes` (whole elements of `dtype`) as Values.
void decode(DType dtype, std::span<const std::byte> bytes, Values& out) {
  const uint32_t size = element_size(dtype);
  const bool complex = is_complex_dtype(dtype);
  out.clear();
  for (size_t at = 0; at + size <= bytes.size(); at += size) {
    const std::byte* p = bytes.data() + at;
    out.re.push_back(element_value(dtype, p, false));
    out.im.push_back(complex ? element_value(dtype, p, true) : 0.0);
    uint64_t bits = 0;
    std::memcpy(&bits, p, std::min<uint32_t>(size, 8));
    out.raw.push_back(bits);
  }
}

// Compares two contiguous tensors of one dtype by their bytes, a chunk at a
// time, and element by element only the chunks whose bytes differ (equal
// bytes are equal values under any tolerance, NaN being equal to NaN).
// Returns false, comparing nothing, for the tensors it does not take.
bool compare_bytes_first(const Checkpoint& a, const Tensor& ta, const Checkpoint& b, const Tensor& tb,
                         const DiffOptions& options, TensorDiff& out) {
  if (ta.dtype != tb.dtype || packed_values(ta.dtype) != 1 || !is_contiguous(ta) || !is_contiguous(tb)) return false;
  const uint32_t size = element_size(ta.dtype);
  if (size == 0 || kChunkBytes % size != 0) return false;
  const Storage& sa = impl_of(a).storages[static_cast<size_t>(ta.storage)];
  const Storage& sb = impl_of(b).storages[static_cast<size_t>(tb.storage)];
  StorageReader ra(impl_of(a).input_of(sa), sa), rb(impl_of(b).input_of(sb), sb);
  ra.skip(static_cast<uint64_t>(ta.storage_offset) * size);
  rb.skip(static_cast<uint64_t>(tb.storage_offset) * size);
  const uint64_t total = out.numel * size;
  std::vector<std::byte> ba(static_cast<size_t>(std::min(kChunkBytes, total)));
  std::vector<std::byte> bb(ba.size());
  const bool exact_ints = compares_bits(ta.dtype);
  Values va, vb;
  for (uint64_t done = 0; done < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(ba.size(), total - done));
    const std::span<std::byte> pa(ba.data(), n), pb(bb.data(), n);
    if (ra.read(pa) != n) throw Error(ErrorKind::kCorrupt, "storage '" + sa.key + "' ends inside a tensor").in_file(a.file_name());
    if (rb.read(pb) != n) throw Error(ErrorKind::kCorrupt, "storage '" + sb.key + "' ends inside a tensor").in_file(b.file_name());
    done += n;
    if (std::memcmp(ba.data(), bb.data(), n) == 0) continue;
    decode(ta.dtype, pa, va);
    decode(tb.dtype, pb, vb);
    compare_elements(va.re.size(), va, vb, exact_ints, options, out);
  }
  return true;
}

// Every tensor position to compare: all of them, or those inside the dicts
// at options.keys (paths from the root either way).
std::vector<TensorPosition> positions_to_compare(const Checkpoint& ck, const DiffOptions& options) {
  if (options.keys.empty()) return ck.tensor_positions();
  const CheckpointImpl& impl = impl_of(ck);
  std::vector<TensorPosition> out;
  for (const TargetDict& d : select_dicts(impl, options.keys)) {
    walk_checkpoint(impl, d.dict, [&](Value& v, const Path& path) {
      const Tensor* t = impl.tensor_of(&v);
      if (t == nullptr) return true;
      Path full = d.path;
      full.insert(full.end(), path.begin(), path.end());
      out.push_back({std::move(full), static_cast<size_t>(t - impl.tensors.data())});
      return false;
    });
  }
  return out;
}

// Elements comparing `t` reads (see DiffOptions::max_compared_elements).
uint64_t read_cost(const Checkpoint& ck, const Tensor& t) {
  uint64_t cost = t.numel();
  uint64_t span = 1;  // views are checked to fit their storage, so this cannot overflow
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] == 0) return cost;
    span += static_cast<uint64_t>(t.shape[i] - 1) * static_cast<uint64_t>(t.stride[i]);
  }
  if (span != cost) cost += span;  // strided: the span is read
  const StorageSource::Encoding encoding = impl_of(ck).storages[static_cast<size_t>(t.storage)].source.encoding;
  if (encoding == StorageSource::Encoding::kDeflated || encoding == StorageSource::Encoding::kLatin1Text) {
    cost += static_cast<uint64_t>(t.storage_offset);  // decoded from the start to get there
  }
  return cost;
}

uint64_t storage_elements(const Checkpoint& ck) {
  uint64_t n = 0;
  for (const Storage& s : impl_of(ck).storages) n += s.nbytes / std::max<uint32_t>(1, element_size(s.dtype));
  return n;
}

DiffReport compare(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options) {
  DiffReport report;
  const uint64_t budget = options.max_compared_elements != 0
                              ? options.max_compared_elements
                              : (uint64_t{1} << 26) + 4 * (storage_elements(a) + storage_elements(b));
  uint64_t spent = 0;
  const auto pa = error_boundary(a.file_name(), [&] { return positions_to_compare(a, options); });
  const auto pb = error_boundary(b.file_name(), [&] { return positions_to_compare(b, options); });
  std::unordered_map<std::string, size_t> in_b;
  std::vector<std::string> keys_b;
  for (size_t i = 0; i < pb.size(); ++i) {
    keys_b.push_back(match_key(pb[i].path, options));
    in_b.emplace(keys_b.back(), i);
  }
  std::unordered_map<std::string, bool> seen_in_a;
  for (const TensorPosition& p : pa) {
    const std::string key = match_key(p.path, options);
    seen_in_a[key] = true;
    auto it = in_b.find(key);
    if (it == in_b.end()) {
      report.only_in_a.push_back(key);
      continue;
    }
    const Tensor& ta = impl_of(a).tensors[p.tensor];
    const Tensor& tb = impl_of(b).tensors[pb[it->second].tensor];
    const bool meta = ta.kind == TensorKind::kMeta || tb.kind == TensorKind::kMeta;  // no values to compare
    TensorDiff d;
    d.key = key;
    d.dtype_a = dtype_name(ta.dtype);
    d.dtype_b = dtype_name(tb.dtype);
    d.shape_a = ta.shape;
    d.shape_b = tb.shape;
    d.device_a = ta.storage < 0 ? "meta" : impl_of(a).storages[static_cast<size_t>(ta.storage)].location;
    d.device_b = tb.storage < 0 ? "meta" : impl_of(b).storages[static_cast<size_t>(tb.storage)].location;
    d.numel = ta.numel();
    if (!d.shape_differs() && !meta) {
      spent += read_cost(a, ta) + read_cost(b, tb);
      if (spent > budget) {
        throw Error(ErrorKind::kLimit, "comparing the tensors reads more than " + std::to_string(budget) +
                                           " elements: the files' views repeat or overlap (limit "
                                           "max_compared_elements = " + std::to_string(budget) + ")")
            .in_file(a.file_name())
            .at("key '" + key + "'");
      }
      if (!compare_bytes_first(a, ta, b, tb, options, d)) compare_values(a, ta, b, tb, options, d);
    }
    d.equal = !d.shape_differs() && d.mismatched == 0 && (options.ignore_dtype || !d.dtype_differs()) &&
              (options.ignore_device || !d.device_differs());
    report.equal &= d.equal;
    report.tensors.push_back(std::move(d));
  }
  for (const std::string& key : keys_b) {
    if (!seen_in_a.count(key)) report.only_in_b.push_back(key);
  }
  report.equal &= report.only_in_a.empty() && report.only_in_b.empty();
  return report;
}

}  // namespace

DiffReport diff_checkpoints(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options) {
  // Errors name their file where they know it; anything else names A.
  return error_boundary(a.file_name(), [&] {
    read_in_left_payloads(a);  // values are compared by their `text`
    read_in_left_payloads(b);
    return compare(a, b, options);
  }, false);
}

}  // namespace ckptfix
