// For the tests that run the built `flatcake` binary as a process: RunCommand, a shell command
// run to its end (popen), its stdout and exit status (bench_cluster_test, bench_daemon_test,
// soak_test); RunProcess, an argv run to its end with its stderr too (hostile_config_test,
// serve_systemd_test); LastLine: the line a `--json` run ends its output with. Test-only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/child_process.h"

namespace flatcake::testing {

struct CommandRun {
  int status = -1;  // its exit status; -1 when it could not run or was killed by a signal
  std::string out;  // its stdout
  std::string err;  // its stderr (RunProcess only)
};

// The whole file at `path`; empty when it cannot be read.
inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs `argv` (argv[0] a path) as a child process to its end: its exit status (-1 when it ran
// past `timeout` and was killed), stdout and stderr. The stderr goes through the file
// `stderr_path`, which is replaced.
inline CommandRun RunProcess(const std::vector<std::string>& argv, const std::string& stderr_path,
                             std::chrono::seconds timeout = std::chrono::seconds(60)) {
  ::unlink(stderr_path.c_str());
  Child child(argv, stderr_path);
  CommandRun r;
  r.out = child.ReadAll();
  r.status = child.Wait(timeout);
  r.err = ReadWholeFile(stderr_path);
  return r;
}

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
