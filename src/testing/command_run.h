// RunCommand: a shell command run to its end (popen), its stdout and exit status, for the tests
// that run the built `flatcake` binary as a process (bench_cluster_test, bench_daemon_test,
// soak_test); LastLine: the line a `--json` run ends its output with. Test-only.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace flatcake::testing {

struct CommandRun {
  int status = -1;  // its exit status; -1 when it could not run or was killed by a signal
  std::string out;  // its stdout
};

inline CommandRun RunCommand(const std::string& cmd) {
  CommandRun r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int w = pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

// The last line of `out` (which ends in a newline), when at least one line comes before it (a
// command's table before its JSON line); empty otherwise.
inline std::string LastLine(const std::string& out) {
  if (out.size() < 2) return "";
  const size_t before = out.rfind('\n', out.size() - 2);
  return before == std::string::npos ? "" : out.substr(before + 1);
}

}  // namespace flatcake::testing
