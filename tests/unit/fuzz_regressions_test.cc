// Replays every committed fuzz finding (tests/fuzz_regressions/<target>/*)
// through its target (fuzz/targets/targets.h), each in a child process so
// that one crash names its input and does not hide the others. A target
// must return normally: a clean ckptfix::Error inside it is fine, a crash,
// sanitizer report, abort or hang is not.
//
// Inputs listed in tests/fuzz_regressions/PENDING fail today in code another
// branch is fixing; they are replayed and reported, never failed. Delete a
// line from PENDING to make its input a regression test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "targets/targets.h"

namespace {

namespace fs = std::filesystem;
using Target = void (*)(const uint8_t*, size_t);

const std::map<std::string, Target> kTargets = {
    {"checkpoint", ckptfix::fuzz::checkpoint}, {"unpickle", ckptfix::fuzz::unpickle},
    {"pickle_roundtrip", ckptfix::fuzz::pickle_roundtrip}, {"zip", ckptfix::fuzz::zip},
    {"legacy", ckptfix::fuzz::legacy}, {"safetensors", ckptfix::fuzz::safetensors},
    {"shard_index", ckptfix::fuzz::shard_index},
    {"fit", ckptfix::fuzz::fit},
    {"made_from", ckptfix::fuzz::made_from},
    {"dcp_metadata", ckptfix::fuzz::dcp_metadata}, {"file_graph", ckptfix::fuzz::file_graph},
    {"salvage", ckptfix::fuzz::salvage}, {"call_policy", ckptfix::fuzz::call_policy},
    {"nested", ckptfix::fuzz::nested}};

std::set<std::string> pending_inputs(const fs::path& dir) {
  std::set<std::string> out;
  std::ifstream in(dir / "PENDING");
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) out.insert(line);
  }
  return out;
}

constexpr int kEscaped = 86;

// "" when the target returned normally in a child process, else what happened.
std::string replay(Target target, const fs::path& input) {
  std::ifstream in(input, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    try {
      target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {  // under libFuzzer: terminate
      std::fprintf(stderr, "%s: %s\n", input.c_str(), e.what());
      _exit(kEscaped);
    } catch (...) {
      _exit(kEscaped);
    }
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return "could not run it";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kEscaped) return "an exception other than ckptfix::Error escaped";
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

TEST(FuzzRegressions, EveryCommittedFindingIsRefusedCleanly) {
  const fs::path dir = CKPTFIX_FUZZ_REGRESSIONS;
  const std::set<std::string> pending = pending_inputs(dir);
  size_t replayed = 0;
  for (const auto& [name, target] : kTargets) {
    if (!fs::is_directory(dir / name)) continue;
    for (const auto& entry : fs::directory_iterator(dir / name)) {
      const std::string id = name + "/" + entry.path().filename().string();
      const std::string failure = replay(target, entry.path());
      ++replayed;
      if (pending.count(id)) {
        std::cout << "[ PENDING  ] " << id << ": " << (failure.empty() ? "passes in this build; once it also passes in the ASan build, delete it from PENDING" : failure)
                  << "\n";
      } else {
        EXPECT_EQ(failure, "") << id;
      }
    }
  }
  for (const std::string& id : pending) EXPECT_TRUE(fs::exists(dir / id)) << "PENDING names a missing input " << id;
  std::cout << "replayed " << replayed << " fuzz findings\n";
}

}  // namespace
