// `flatcake bench vllm`: the vLLM connector's loads against the store's own restore. The
// connector is Python (flatcake.vllm), so this subcommand runs the benchmark module
// flatcake._bench_vllm (python/flatcake/_bench_vllm.py, which documents it) with every argument
// after `vllm`, in the interpreter that has the package: FLATCAKE_PYTHON, else the python3 beside
// this executable (a virtual environment's bin/, where pip put both), else python3 on PATH.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace flatcake::cli {
namespace {

std::string PythonInterpreter() {
  if (const char* env = std::getenv("FLATCAKE_PYTHON"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = exe.parent_path() / "python3";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "python3";
}

// Replaces this process with the benchmark module; returns only when that fails.
int RunPythonBench(const std::vector<std::string>& args) {
  const std::string python = PythonInterpreter();
  std::vector<std::string> argv = {python, "-m", "flatcake._bench_vllm"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(python.c_str(), cargv.data());
  std::fprintf(stderr,
               "flatcake bench vllm: cannot run %s (%s): the benchmark is the Python package's "
               "(pip install FlatCake; FLATCAKE_PYTHON names the interpreter that has it)\n",
               python.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

void RegisterVllmBench(CLI::App& bench, int* exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "vllm",
      "The vLLM connector's loads (start_load_kv + wait_for_layer_load) against the store's own "
      "restore of the same blocks into the same memory, per medium: connector_vs_store (target "
      ">= 0.9), time to first layer of a 2 GiB load, the step time an asynchronous SSD load "
      "saves; every byte verified (mismatches). Runs `python -m flatcake._bench_vllm` in the "
      "interpreter that has the flatcake package (FLATCAKE_PYTHON, else python3 beside this "
      "executable, else on PATH); its options: flatcake bench vllm --help");
  // Every argument goes to the module, --help included (the module's help lists its options).
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd, exit_code] { *exit_code = RunPythonBench(cmd->remaining()); });
}

}  // namespace flatcake::cli
