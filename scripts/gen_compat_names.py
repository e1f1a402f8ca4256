#!/usr/bin/python3
"""Writes src/pickle/compat_names.cc from this Python's Lib/_compat_pickle.py:
the Python 2 names CPython's unpickler loads as Python 3 ones (find_class,
protocol < 3). Run with any CPython 3: the tables have not changed in
substance since 3.4.

    python3 scripts/gen_compat_names.py > src/pickle/compat_names.cc
"""
import _compat_pickle as c

print('''// Python 2 names as CPython's unpickler resolves them (Lib/_compat_pickle.py,
// NAME_MAPPING and IMPORT_MAPPING, used by find_class for pickles of
// protocol 0 to 2, which torch.save writes), so that a name is judged as
// what it loads: StringIO.open is io.open, the builtin open; itertools.imap
// is builtins.map. Written by scripts/gen_compat_names.py; do not edit.
#include "pickle/compat_names.h"

#include <algorithm>
#include <array>

namespace ckptfix {
namespace {

struct NameMapping {
  std::string_view module, name, to_module, to_name;
};
struct ImportMapping {
  std::string_view module, to_module;
};
''')
names = sorted(c.NAME_MAPPING.items())
print(f'constexpr std::array<NameMapping, {len(names)}> kNameMapping = {{{{')
for (m, n), (tm, tn) in names:
    print(f'    {{"{m}", "{n}", "{tm}", "{tn}"}},')
print('}};')
imports = sorted(c.IMPORT_MAPPING.items())
print(f'constexpr std::array<ImportMapping, {len(imports)}> kImportMapping = {{{{')
for m, tm in imports:
    print(f'    {{"{m}", "{tm}"}},')
print('}};')
print('''
}  // namespace

std::pair<std::string_view, std::string_view> python3_name(std::string_view module, std::string_view name) {
  const auto n = std::lower_bound(kNameMapping.begin(), kNameMapping.end(), std::pair(module, name),
                                  [](const NameMapping& m, const std::pair<std::string_view, std::string_view>& key) {
                                    return std::pair(m.module, m.name) < key;
                                  });
  if (n != kNameMapping.end() && n->module == module && n->name == name) return {n->to_module, n->to_name};
  const auto i = std::lower_bound(kImportMapping.begin(), kImportMapping.end(), module,
                                  [](const ImportMapping& m, std::string_view key) { return m.module < key; });
  if (i != kImportMapping.end() && i->module == module) return {i->to_module, name};
  return {module, name};
}

}  // namespace ckptfix''')
