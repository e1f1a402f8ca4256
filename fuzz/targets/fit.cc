// The fit's own parsers and rules on hostile text: a JSON model reference,
// --rename patterns and the keys of a state dict, planned against each other
// (passes/fit_plan.h). Invariants checked: the plan is one-to-one (no two
// inputs on one model key, no input on two), what it places is a key of the
// model, and an acceptable plan leaves no model key both filled and missing.
//
// Input: the JSON reference, a NUL, rename lines ("REGEX=REPL", at most 8),
// a NUL, then the state dict's keys, one per line as "KEY|D0,D1,...".
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/error.h"
#include "ckptfix/fit.h"
#include "passes/fit_plan.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {
namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    out.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace

void fit(const uint8_t* data, size_t size) {
  const std::string bytes = bytes_of(data, size);
  const std::string_view all(bytes);
  const size_t first = all.find('\0');
  if (first == std::string_view::npos) {
    expect_clean([&] { (void)model_reference_from_json(all, "fuzz.json"); });
    return;
  }
  const size_t second = all.find('\0', first + 1);
  const std::string_view renames = all.substr(first + 1, second == std::string_view::npos ? 0 : second - first - 1);
  const std::string_view keys = second == std::string_view::npos ? all.substr(first + 1) : all.substr(second + 1);
  expect_clean([&] {
    const ModelReference model = model_reference_from_json(all.substr(0, first), "fuzz.json");
    FitOptions options;
    for (std::string_view line : lines_of(renames)) {
      if (options.renames.size() == 8) break;
      const size_t eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      options.renames.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    }
    std::vector<FitInput> inputs;
    for (std::string_view line : lines_of(keys)) {
      FitInput in;
      const size_t bar = line.find('|');
      in.key = std::string(line.substr(0, bar));
      if (bar != std::string_view::npos) {
        std::string_view dims = line.substr(bar + 1);
        while (!dims.empty() && in.shape.size() < 8) {
          const size_t comma = dims.find(',');
          int64_t n = 0;
          for (char c : dims.substr(0, comma)) n = c >= '0' && c <= '9' ? (n * 10 + (c - '0')) % 100000 : n;
          in.shape.push_back(n);
          if (comma == std::string_view::npos) break;
          dims.remove_prefix(comma + 1);
        }
      } else {
        in.tensor = !in.key.empty() && in.key.back() != 'x';
      }
      inputs.push_back(std::move(in));
    }
    for (bool rules : {true, false}) {
      const FitPlan plan = plan_fit(inputs, model, options, rules);
      std::set<int64_t> taken;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int64_t r = plan.placed[i];
        if (r < 0) continue;
        if (static_cast<size_t>(r) >= model.entries.size() || !taken.insert(r).second) std::abort();
        if (plan.source[static_cast<size_t>(r)] != static_cast<int64_t>(i)) std::abort();
        if (plan.names[i] != model.entries[static_cast<size_t>(r)].key) std::abort();
      }
      for (size_t m : plan.missing) {
        if (plan.source[m] >= 0) std::abort();
      }
      (void)refusal_lines(plan, inputs, model, options);
    }
  });
}

}  // namespace ckptfix::fuzz
