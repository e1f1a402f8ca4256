// key_regex_tool: the --rename regexes (src/passes/key_regex.*) on lines of
// stdin, for tests/interop/test_key_regex.py, which asks Python's re the same.
// Each input line is PATTERN \t REPLACEMENT \t TEXT (\\, \t and \n escaped
// as \\\\, \\t, \\n); each output line is "sub\t<result>" (nothing matched:
// the text itself, as re.sub gives it), "search\t<begin> <end> <g1b> <g1e> ...",
// or "error\t<message>" for a pattern or replacement the engine refuses.
#include <iostream>
#include <string>

#include "ckptfix/error.h"
#include "passes/key_regex.h"

namespace {

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 't' ? '\t' : c == 'n' ? '\n' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    const std::string pattern = unescape(line.substr(0, a)), repl = unescape(line.substr(a + 1, b - a - 1)),
                      text = unescape(line.substr(b + 1));
    try {
      const ckptfix::KeyRegex re = ckptfix::KeyRegex::compile(pattern);
      const auto replaced = re.replace_all(text, repl);
      std::cout << "sub\t" << escape(replaced.value_or(text)) << "\n";
      const auto m = re.search(text);
      std::cout << "search\t";
      if (m) {
        for (size_t i = 0; i < m->size(); ++i) std::cout << (i ? " " : "") << (*m)[i];
      } else {
        std::cout << "none";
      }
      std::cout << "\n";
    } catch (const ckptfix::Error& e) {
      std::cout << "error\t" << escape(e.message()) << "\nsearch\t-\n";
    }
  }
  return 0;
}
