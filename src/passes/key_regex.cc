#include "passes/key_regex.h"

#include <memory>

#include "ckptfix/error.h"

namespace ckptfix {
namespace {

Error bad_pattern(const std::string& what, size_t at) {
  return Error(ErrorKind::kInvalidArgument, what + " at offset " + std::to_string(at));
}

// The syntax tree of a pattern.
struct Node {
  enum class Kind { kEmpty, kByte, kClass, kAny, kBegin, kEnd, kConcat, kAlternation, kGroup, kRepeat };
  Kind kind = Kind::kEmpty;
  uint8_t byte = 0;
  uint32_t klass = 0;
  int group = -1;  // kGroup: the capture index, -1 for (?: )
  size_t min = 0, max = 0;  // kRepeat; max SIZE_MAX: no bound
  bool greedy = true;
  std::vector<std::unique_ptr<Node>> children;
};

constexpr size_t kUnbounded = SIZE_MAX;
constexpr size_t kMaxNesting = 100;
constexpr size_t kMaxCount = 1000;  // {m,n}

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<std::vector<bool>>& classes) : p_(pattern), classes_(classes) {}

  std::unique_ptr<Node> parse() {
    auto node = alternation(0);
    if (at_ < p_.size()) throw bad_pattern("unbalanced ')'", at_);
    return node;
  }
  size_t groups() const { return groups_; }

 private:
  bool more() const { return at_ < p_.size(); }
  char peek() const { return p_[at_]; }

  std::unique_ptr<Node> alternation(size_t depth) {
    auto first = concatenation(depth);
    if (!more() || peek() != '|') return first;
    auto alt = std::make_unique<Node>();
    alt->kind = Node::Kind::kAlternation;
    alt->children.push_back(std::move(first));
    while (more() && peek() == '|') {
      ++at_;
      alt->children.push_back(concatenation(depth));
    }
    return alt;
  }

  std::unique_ptr<Node> concatenation(size_t depth) {
    auto cat = std::make_unique<Node>();
    cat->kind = Node::Kind::kConcat;
    while (more() && peek() != '|' && peek() != ')') cat->children.push_back(repetition(depth));
    return cat;
  }

  std::unique_ptr<Node> repetition(size_t depth) {
    const size_t start = at_;
    auto node = atom(depth);
    if (!more()) return node;
    size_t min = 0, max = 0;
    const char c = peek();
    if (c == '*') {
      min = 0, max = kUnbounded, ++at_;
    } else if (c == '+') {
      min = 1, max = kUnbounded, ++at_;
    } else if (c == '?') {
      min = 0, max = 1, ++at_;
    } else if (c == '{' && counted(min, max)) {
      // at_ is past the '}'
    } else {
      return node;
    }
    if (node->kind == Node::Kind::kBegin || node->kind == Node::Kind::kEnd) throw bad_pattern("nothing to repeat", start);
    auto rep = std::make_unique<Node>();
    rep->kind = Node::Kind::kRepeat;
    rep->min = min;
    rep->max = max;
    if (more() && peek() == '?') {
      rep->greedy = false;
      ++at_;
    }
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      size_t m = 0, n = 0;
      const size_t save = at_;
      if (peek() != '{' || counted(m, n)) throw bad_pattern("multiple repeat", save);
    }
    rep->children.push_back(std::move(node));
    return rep;
  }

  // {m}, {m,}, {m,n} at at_ (as Python, a '{' that does not start one is a literal).
  bool counted(size_t& min, size_t& max) {
    size_t i = at_ + 1;
    auto number = [&](size_t& out) {
      const size_t begin = i;
      out = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9' && i - begin < 5) out = out * 10 + (p_[i++] - '0');
      return i > begin;
    };
    const bool has_min = number(min);
    if (i < p_.size() && p_[i] == '}') {
      if (!has_min) return false;
      max = min;
    } else if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(max)) max = kUnbounded;
      if (i >= p_.size() || p_[i] != '}') return false;
      if (!has_min) min = 0;
    } else {
      return false;
    }
    if (min > kMaxCount || (max != kUnbounded && max > kMaxCount)) throw bad_pattern("repeat count above 1000", at_);
    if (max < min) throw bad_pattern("min repeat greater than max repeat", at_);
    at_ = i + 1;
    return true;
  }

  std::unique_ptr<Node> atom(size_t depth) {
    auto node = std::make_unique<Node>();
    const size_t start = at_;
    const char c = p_[at_++];
    switch (c) {
      case '(': {
        if (depth >= kMaxNesting) throw bad_pattern("groups nested more than 100 deep", start);
        node->kind = Node::Kind::kGroup;
        if (p_.substr(at_, 2) == "?:") {
          at_ += 2;
        } else if (more() && peek() == '?') {
          throw bad_pattern("unsupported group '(?' (only (?:...) is)", start);
        } else {
          if (groups_ >= KeyRegex::kMaxGroups) throw bad_pattern("more than 9 groups", start);
          node->group = static_cast<int>(++groups_);
        }
        node->children.push_back(alternation(depth + 1));
        if (!more() || peek() != ')') throw bad_pattern("missing ')'", start);
        ++at_;
        return node;
      }
      case ')': throw bad_pattern("unbalanced ')'", start);
      case '*':
      case '+':
      case '?': throw bad_pattern("nothing to repeat", start);
      case '.': node->kind = Node::Kind::kAny; return node;
      case '^': node->kind = Node::Kind::kBegin; return node;
      case '$': node->kind = Node::Kind::kEnd; return node;
      case '[': return character_class(start);
      case '\\': return escape(start);
      default:
        node->kind = Node::Kind::kByte;
        node->byte = static_cast<uint8_t>(c);
        return node;
    }
  }

  // \d, \w, \s and their complements as a class; nullopt for another escape.
  static bool named_class(char c, std::vector<bool>& set) {
    auto add = [&](bool (*in)(int)) {
      for (int b = 0; b < 256; ++b) set[static_cast<size_t>(b)] = set[static_cast<size_t>(b)] || in(b);
    };
    auto negated = [&](bool (*in)(int)) {
      for (int b = 0; b < 256; ++b) set[static_cast<size_t>(b)] = set[static_cast<size_t>(b)] || !in(b);
    };
    static constexpr auto digit = [](int b) { return b >= '0' && b <= '9'; };
    static constexpr auto word = [](int b) {
      return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_';
    };
    static constexpr auto space = [](int b) { return b == ' ' || (b >= '\t' && b <= '\r'); };
    switch (c) {
      case 'd': add(digit); return true;
      case 'D': negated(digit); return true;
      case 'w': add(word); return true;
      case 'W': negated(word); return true;
      case 's': add(space); return true;
      case 'S': negated(space); return true;
      default: return false;
    }
  }

  // The byte an escape stands for (\t, \n, \. ...); throws for an unknown letter.
  uint8_t escaped_byte(char c, size_t at) const {
    if (c == 't') return '\t';
    if (c == 'n') return '\n';
    if (c == 'r') return '\r';
    const auto u = static_cast<unsigned char>(c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      throw bad_pattern(std::string("unsupported escape '\\") + c + "'", at);
    }
    return u;
  }

  std::unique_ptr<Node> escape(size_t start) {
    if (!more()) throw bad_pattern("a pattern ending in '\\'", start);
    const char c = p_[at_++];
    auto node = std::make_unique<Node>();
    std::vector<bool> set(256, false);
    if (named_class(c, set)) {
      node->kind = Node::Kind::kClass;
      node->klass = add_class(std::move(set));
      return node;
    }
    node->kind = Node::Kind::kByte;
    node->byte = escaped_byte(c, start);
    return node;
  }

  std::unique_ptr<Node> character_class(size_t start) {
    std::vector<bool> set(256, false);
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++at_;
    }
    bool first = true;
    for (;;) {
      if (!more()) throw bad_pattern("unterminated character set", start);
      char c = p_[at_++];
      if (c == ']' && !first) break;
      first = false;
      int lo;
      if (c == '\\') {
        if (!more()) throw bad_pattern("unterminated character set", start);
        const char e = p_[at_++];
        if (named_class(e, set)) continue;
        lo = escaped_byte(e, at_ - 2);
      } else {
        lo = static_cast<unsigned char>(c);
      }
      int hi = lo;
      if (at_ + 1 < p_.size() && peek() == '-' && p_[at_ + 1] != ']') {
        ++at_;
        char h = p_[at_++];
        if (h == '\\') {
          if (!more()) throw bad_pattern("unterminated character set", start);
          const char e = p_[at_++];
          h = static_cast<char>(escaped_byte(e, at_ - 2));
        }
        hi = static_cast<unsigned char>(h);
        if (hi < lo) throw bad_pattern("bad character range", at_ - 3);
      }
      for (int b = lo; b <= hi; ++b) set[static_cast<size_t>(b)] = true;
    }
    if (negate) set.flip();
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kClass;
    node->klass = add_class(std::move(set));
    return node;
  }

  uint32_t add_class(std::vector<bool> set) {
    classes_.push_back(std::move(set));
    return static_cast<uint32_t>(classes_.size() - 1);
  }

  std::string_view p_;
  size_t at_ = 0;
  size_t groups_ = 0;
  std::vector<std::vector<bool>>& classes_;
};

using Op = KeyRegex::Op;
using Instruction = KeyRegex::Instruction;

class Compiler {
 public:
  Compiler(std::vector<Instruction>& program, size_t first_loop_slot)
      : program_(program), next_loop_slot_(first_loop_slot) {}

  /// Slots used by loops (after the groups').
  size_t loops(size_t first_loop_slot) const { return next_loop_slot_ - first_loop_slot; }

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kEmpty: return;
      case Node::Kind::kByte: add({Op::kByte, n.byte, 0, 0}); return;
      case Node::Kind::kClass: add({Op::kClass, 0, n.klass, 0}); return;
      case Node::Kind::kAny: add({Op::kAny, 0, 0, 0}); return;
      case Node::Kind::kBegin: add({Op::kBegin, 0, 0, 0}); return;
      case Node::Kind::kEnd: add({Op::kEnd, 0, 0, 0}); return;
      case Node::Kind::kConcat:
        for (const auto& c : n.children) emit(*c);
        return;
      case Node::Kind::kGroup:
        if (n.group >= 0) add({Op::kSave, 0, static_cast<uint32_t>(2 * n.group), 0});
        emit(*n.children[0]);
        if (n.group >= 0) add({Op::kSave, 0, static_cast<uint32_t>(2 * n.group + 1), 0});
        return;
      case Node::Kind::kAlternation: {
        // split L1, next; L1: a; jmp end; next: split L2, next2; ... last: z
        std::vector<size_t> jumps;
        for (size_t i = 0; i < n.children.size(); ++i) {
          if (i + 1 < n.children.size()) {
            const size_t split = add({Op::kSplit, 0, 0, 0});
            program_[split].x = static_cast<uint32_t>(program_.size());
            emit(*n.children[i]);
            jumps.push_back(add({Op::kJump, 0, 0, 0}));
            program_[split].y = static_cast<uint32_t>(program_.size());
          } else {
            emit(*n.children[i]);
          }
        }
        for (size_t j : jumps) program_[j].x = static_cast<uint32_t>(program_.size());
        return;
      }
      case Node::Kind::kRepeat: {
        const Node& body = *n.children[0];
        for (size_t i = 0; i < n.min; ++i) emit(body);
        if (n.max == kUnbounded) {
          // As Python's re: iterate while an iteration takes a byte; an
          // iteration that matches the empty string is taken, keeping what
          // its groups captured, and ends the loop. In a Pike VM the
          // iteration that starts where the last one ended would meet that
          // one's instructions at the same position and die, so a body that
          // can match empty gets two copies that iterations alternate
          // between:
          //   La: split A, out;  A: enter s; BODY; back s (a byte: Lb; none: out)
          //   Lb: split B, out;  B: enter t; BODY; back t (a byte: La; none: out)
          //   out:
          // (lazy: each split tries out first). A body that always takes a
          // byte needs one copy.
          const size_t copies = nullable(body) ? 2 : 1;
          std::vector<size_t> splits, backs;
          for (size_t c = 0; c < copies; ++c) {
            splits.push_back(add({Op::kSplit, 0, 0, 0}));
            program_[splits.back()].x = static_cast<uint32_t>(program_.size());  // the body, for now
            backs.push_back(loop_body(body));
          }
          const auto out = static_cast<uint32_t>(program_.size());
          for (size_t c = 0; c < copies; ++c) {
            program_[backs[c]].x = static_cast<uint32_t>(splits[(c + 1) % copies]);
            program_[backs[c]].y = out;
            prefer(splits[c], program_[splits[c]].x, out, n.greedy);
          }
          return;
        }
        // (max - min) optional copies, each: split body, out; body; and,
        // as Python's re past the minimum, an iteration that matched the
        // empty string ends the repeat (back: a byte: the next copy; none: out).
        std::vector<size_t> splits, backs;
        for (size_t i = n.min; i < n.max; ++i) {
          splits.push_back(add({Op::kSplit, 0, 0, 0}));
          program_[splits.back()].x = static_cast<uint32_t>(program_.size());
          backs.push_back(loop_body(body));
        }
        const auto out = static_cast<uint32_t>(program_.size());
        for (size_t c = 0; c < splits.size(); ++c) {
          program_[backs[c]].x = c + 1 < splits.size() ? static_cast<uint32_t>(splits[c + 1]) : out;
          program_[backs[c]].y = out;
          prefer(splits[c], program_[splits[c]].x, out, n.greedy);
        }
        return;
      }
    }
  }

  // Whether `n` can match the empty string.
  static bool nullable(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kByte:
      case Node::Kind::kClass:
      case Node::Kind::kAny: return false;
      case Node::Kind::kConcat:
        for (const auto& c : n.children) {
          if (!nullable(*c)) return false;
        }
        return true;
      case Node::Kind::kAlternation:
        for (const auto& c : n.children) {
          if (nullable(*c)) return true;
        }
        return false;
      case Node::Kind::kGroup: return nullable(*n.children[0]);
      case Node::Kind::kRepeat: return n.min == 0 || nullable(*n.children[0]);
      default: return true;  // empty, ^, $
    }
  }

  // enter s; BODY; back s: one iteration of a loop, its exits left for the
  // caller to set. Returns the kLoopBack's index.
  size_t loop_body(const Node& body) {
    const auto slot = static_cast<uint32_t>(next_loop_slot_++);
    add({Op::kLoopEnter, 0, slot, 0});
    emit(body);
    const size_t back = add({Op::kLoopBack, 0, 0, 0});
    program_[back].z = slot;
    return back;
  }

  size_t add(Instruction i) {
    if (program_.size() >= KeyRegex::kMaxInstructions) {
      throw Error(ErrorKind::kInvalidArgument, "the pattern compiles to more than " +
                                                   std::to_string(KeyRegex::kMaxInstructions) +
                                                   " instructions (repeat counts multiply)");
    }
    program_.push_back(i);
    return program_.size() - 1;
  }

 private:
  // A split that tries `body` first when greedy, `out` first when lazy.
  void prefer(size_t split, size_t body, size_t out, bool greedy) {
    program_[split].x = static_cast<uint32_t>(greedy ? body : out);
    program_[split].y = static_cast<uint32_t>(greedy ? out : body);
  }

  std::vector<Instruction>& program_;
  size_t next_loop_slot_;
};

// One thread of the Pike VM: where it is and what its groups captured.
struct Thread {
  uint32_t pc;
  std::vector<int64_t> slots;
};

class Vm {
 public:
  // `groups` captures (slots 0 .. 2 * groups + 1, the match's own first),
  // then a slot per loop.
  Vm(const std::vector<Instruction>& program, const std::vector<std::vector<bool>>& classes, size_t groups, size_t loops)
      : program_(program), classes_(classes), groups_(groups), slots_(2 * (groups + 1) + loops), seen_(program.size(), 0) {}

  std::optional<std::vector<int64_t>> search(std::string_view text, size_t from, size_t no_empty_at) {
    std::vector<Thread> current, next;
    std::optional<std::vector<int64_t>> matched;
    for (size_t pos = from; pos <= text.size(); ++pos) {
      ++generation_;
      // A new start, at the lowest priority (after the threads already
      // running), until something matched: the leftmost match wins.
      if (!matched) {
        for (const Thread& t : current) seen_[t.pc] = generation_;
        add(current, 0, std::vector<int64_t>(slots_, -1), pos, text.size());
      }
      if (current.empty()) {
        if (matched) break;
        continue;  // nothing can start here (a ^ or $ not met): the next position
      }
      ++generation_;
      next.clear();
      for (Thread& t : current) {
        const Instruction& in = program_[t.pc];
        if (in.op == Op::kMatch) {
          if (t.slots[0] == t.slots[1] && static_cast<size_t>(t.slots[0]) == no_empty_at) continue;
          t.slots.resize(2 * (groups_ + 1));
          matched = std::move(t.slots);
          break;  // the threads after it have a lower priority
        }
        if (pos < text.size() && consumes(in, static_cast<unsigned char>(text[pos]))) {
          add(next, t.pc + 1, std::move(t.slots), pos + 1, text.size());
        }
      }
      current.swap(next);
    }
    return matched;
  }

 private:
  bool consumes(const Instruction& in, unsigned char c) const {
    switch (in.op) {
      case Op::kByte: return in.byte == c;
      case Op::kAny: return c != '\n';
      case Op::kClass: return classes_[in.x][c];
      default: return false;
    }
  }

  // Follows the zero-width instructions from `pc` (iteratively: a file's
  // keys decide the text, the pattern its size, neither the stack depth),
  // appending the threads that wait on a byte or match, in priority order.
  void add(std::vector<Thread>& list, uint32_t pc, std::vector<int64_t> slots, size_t pos, size_t length) {
    struct Pending {
      uint32_t pc;
      std::vector<int64_t> slots;
    };
    std::vector<Pending> stack;
    stack.push_back({pc, std::move(slots)});
    while (!stack.empty()) {
      Pending p = std::move(stack.back());
      stack.pop_back();
      if (seen_[p.pc] == generation_) continue;
      seen_[p.pc] = generation_;
      const Instruction& in = program_[p.pc];
      switch (in.op) {
        case Op::kJump: stack.push_back({in.x, std::move(p.slots)}); break;
        case Op::kSplit:
          stack.push_back({in.y, p.slots});  // popped after x's whole subtree: lower priority
          stack.push_back({in.x, std::move(p.slots)});
          break;
        case Op::kSave:
        case Op::kLoopEnter:
          p.slots[in.x] = static_cast<int64_t>(pos);
          stack.push_back({p.pc + 1, std::move(p.slots)});
          break;
        case Op::kLoopBack:
          stack.push_back({p.slots[in.z] < static_cast<int64_t>(pos) ? in.x : in.y, std::move(p.slots)});
          break;
        case Op::kBegin:
          if (pos == 0) stack.push_back({p.pc + 1, std::move(p.slots)});
          break;
        case Op::kEnd:
          if (pos == length) stack.push_back({p.pc + 1, std::move(p.slots)});
          break;
        case Op::kFail: break;
        default: list.push_back({p.pc, std::move(p.slots)}); break;
      }
    }
  }

  const std::vector<Instruction>& program_;
  const std::vector<std::vector<bool>>& classes_;
  size_t groups_;
  size_t slots_;
  std::vector<uint64_t> seen_;
  uint64_t generation_ = 0;
};

// The replacement's pieces: literal text, or a group's number.
struct Piece {
  std::string text;
  int group = -1;
};

std::vector<Piece> parse_replacement(std::string_view r, size_t groups) {
  std::vector<Piece> out;
  auto literal = [&](char c) {
    if (out.empty() || out.back().group >= 0) out.push_back({});
    out.back().text.push_back(c);
  };
  auto bad = [&](const std::string& what, size_t at) {
    return Error(ErrorKind::kInvalidArgument, "replacement: " + what + " at offset " + std::to_string(at));
  };
  auto group = [&](size_t g, size_t at) {
    if (g > groups) throw bad("group " + std::to_string(g) + " does not exist (the pattern has " + std::to_string(groups) + ")", at);
    out.push_back({"", static_cast<int>(g)});
  };
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] != '\\') {
      literal(r[i]);
      continue;
    }
    const size_t at = i;
    if (++i >= r.size()) throw bad("a replacement ending in '\\'", at);
    const char c = r[i];
    if (c >= '1' && c <= '9') {
      size_t g = static_cast<size_t>(c - '0');
      if (i + 1 < r.size() && r[i + 1] >= '0' && r[i + 1] <= '9') g = g * 10 + static_cast<size_t>(r[++i] - '0');
      group(g, at);
    } else if (c == 'g') {
      const size_t close = r.find('>', i);
      if (i + 1 >= r.size() || r[i + 1] != '<' || close == std::string_view::npos) throw bad("expected \\g<N>", at);
      const std::string_view digits = r.substr(i + 2, close - i - 2);
      if (digits.empty() || digits.size() > 2 || digits.find_first_not_of("0123456789") != std::string_view::npos) {
        throw bad("\\g<...> takes a group number", at);
      }
      group(static_cast<size_t>(std::stoul(std::string(digits))), at);
      i = close;
    } else if (c == '\\') {
      literal('\\');
    } else if (c == 'n') {
      literal('\n');
    } else if (c == 't') {
      literal('\t');
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '0') {
      throw bad(std::string("bad escape '\\") + c + "'", at);
    } else {  // as Python: an escape of punctuation stays as written
      literal('\\');
      literal(c);
    }
  }
  return out;
}

}  // namespace

KeyRegex KeyRegex::compile(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes) {
    throw Error(ErrorKind::kInvalidArgument, "the pattern is longer than " + std::to_string(kMaxPatternBytes) + " bytes");
  }
  KeyRegex re;
  Parser parser(pattern, re.classes_);
  const std::unique_ptr<Node> tree = parser.parse();
  re.groups_ = parser.groups();
  const size_t first_loop_slot = 2 * (re.groups_ + 1);
  Compiler compiler(re.program_, first_loop_slot);
  compiler.add({Op::kSave, 0, 0, 0});
  compiler.emit(*tree);
  compiler.add({Op::kSave, 0, 1, 0});
  compiler.add({Op::kMatch, 0, 0, 0});
  re.loops_ = compiler.loops(first_loop_slot);
  return re;
}

std::optional<std::vector<int64_t>> KeyRegex::search(std::string_view text, size_t from) const {
  if (from > text.size()) return std::nullopt;
  Vm vm(program_, classes_, groups_, loops_);
  return vm.search(text, from, std::string_view::npos);
}

void KeyRegex::check_replacement(std::string_view replacement) const { (void)parse_replacement(replacement, groups_); }

std::optional<std::string> KeyRegex::replace_all(std::string_view text, std::string_view replacement) const {
  const std::vector<Piece> pieces = parse_replacement(replacement, groups_);
  std::string out;
  bool any = false;
  size_t pos = 0;  // copied up to here
  size_t no_empty_at = std::string_view::npos;
  Vm vm(program_, classes_, groups_, loops_);
  while (pos <= text.size()) {
    // As CPython's re.sub (3.7 on): after an empty match, the next one may
    // start at the same place only if it is not empty.
    const auto m = vm.search(text, pos, no_empty_at);
    if (!m) break;
    any = true;
    const auto begin = static_cast<size_t>((*m)[0]), end = static_cast<size_t>((*m)[1]);
    out.append(text.substr(pos, begin - pos));
    for (const Piece& p : pieces) {
      if (p.group < 0) {
        out += p.text;
      } else if ((*m)[2 * static_cast<size_t>(p.group)] >= 0) {
        const auto b = static_cast<size_t>((*m)[2 * static_cast<size_t>(p.group)]);
        const auto e = static_cast<size_t>((*m)[2 * static_cast<size_t>(p.group) + 1]);
        out.append(text.substr(b, e - b));
      }
    }
    pos = end;
    no_empty_at = end == begin ? end : std::string_view::npos;
  }
  if (!any) return std::nullopt;
  if (pos < text.size()) out.append(text.substr(pos));
  return out;
}

}  // namespace ckptfix
