#include "ckptfix/diff.h"
#include "model/checkpoint_impl.h"
#include "model/payloads.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "ckptfix/prefixes.h"
#include "diff/element_reader.h"
#include "error_boundary.h"

namespace ckptfix {
namespace {

constexpr size_t kBatch = 1 << 16;

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
  if (options.strip_prefix && !options.strip_prefix->empty() && starts(*options.strip_prefix)) {
    element.erase(0, options.strip_prefix->size());
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

void compare_values(const Checkpoint& a, const Tensor& ta, const Checkpoint& b, const Tensor& tb,
                    const DiffOptions& options, TensorDiff& out) {
  ElementReader ra(a, ta), rb(b, tb);
  const bool exact_ints = ta.dtype == tb.dtype && compares_bits(ta.dtype);
  std::vector<double> are, aim, bre, bim;
  std::vector<uint64_t> araw, braw;
  for (uint64_t done = 0; done < out.numel;) {
    are.clear(), aim.clear(), bre.clear(), bim.clear(), araw.clear(), braw.clear();
    const size_t n = ra.next(kBatch, are, aim, araw);
    rb.next(kBatch, bre, bim, braw);
    for (size_t i = 0; i < n; ++i) {
      if (exact_ints) {
        if (araw[i] != braw[i]) {
          ++out.mismatched;
          const double d = std::fabs(are[i] - bre[i]);
          out.max_abs_diff = std::max(out.max_abs_diff, d);
          if (bre[i] != 0) out.max_rel_diff = std::max(out.max_rel_diff, d / std::fabs(bre[i]));
        }
        continue;
      }
      const bool a_nan = std::isnan(are[i]) || std::isnan(aim[i]);
      const bool b_nan = std::isnan(bre[i]) || std::isnan(bim[i]);
      if (a_nan || b_nan) {
        if (a_nan != b_nan) ++out.mismatched;  // NaN equals NaN, nothing else
        continue;
      }
      if (are[i] == bre[i] && aim[i] == bim[i]) continue;  // includes equal infinities and -0 == 0
      const double d = std::hypot(are[i] - bre[i], aim[i] - bim[i]);
      const double mag = std::hypot(bre[i], bim[i]);
      out.max_abs_diff = std::max(out.max_abs_diff, d);
      if (mag != 0) out.max_rel_diff = std::max(out.max_rel_diff, d / mag);
      if (!(d <= options.atol + options.rtol * mag)) ++out.mismatched;  // inf - x is inf: never close
    }
    done += n;
    if (n == 0) break;
  }
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
  const auto pa = a.tensor_positions();
  const auto pb = b.tensor_positions();
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
    TensorDiff d;
    d.key = key;
    d.dtype_a = dtype_name(ta.dtype);
    d.dtype_b = dtype_name(tb.dtype);
    d.shape_a = ta.shape;
    d.shape_b = tb.shape;
    d.device_a = impl_of(a).storages[static_cast<size_t>(ta.storage)].location;
    d.device_b = impl_of(b).storages[static_cast<size_t>(tb.storage)].location;
    d.numel = ta.numel();
    if (!d.shape_differs()) {
      spent += read_cost(a, ta) + read_cost(b, tb);
      if (spent > budget) {
        throw Error(ErrorKind::kLimit, "comparing the tensors reads more than " + std::to_string(budget) +
                                           " elements: the files' views repeat or overlap (limit "
                                           "max_compared_elements = " + std::to_string(budget) + ")")
            .in_file(a.file_name())
            .at("key '" + key + "'");
      }
      compare_values(a, ta, b, tb, options, d);
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
