// Subcommands of the `flatcake` tool. Each Register* function adds its subcommand(s) to `app`;
// the subcommand's callback stores the process exit status in *exit_code (0 = success).
// Errors are printed to stderr as "flatcake <cmd>: <Status>" and give a non-zero status.
#pragma once

#include <CLI/CLI.hpp>

namespace flatcake::cli {

void RegisterInfoCommand(CLI::App& app, int* exit_code);
void RegisterOptionsCommand(CLI::App& app, int* exit_code);
void RegisterTraceCommands(CLI::App& app, int* exit_code);
void RegisterReplayCommand(CLI::App& app, int* exit_code);
void RegisterFsckCommand(CLI::App& app, int* exit_code);
void RegisterSimulateCommand(CLI::App& app, int* exit_code);
// `flatcake torture`: the fault campaign (torture_cmd.cc, eval/torture.h).
void RegisterTortureCommand(CLI::App& app, int* exit_code);
// The daemon's commands: `flatcake serve` (serve_cmd.cc), `flatcake stats` (stats_cmd.cc) and
// `flatcake cluster status` (cluster_cmd.cc);
// without the serve library (protobuf or toml++ missing at build time) serve_commands_absent.cc
// registers them as commands that say so and fail.
void RegisterServeCommand(CLI::App& app, int* exit_code);
void RegisterStatsCommand(CLI::App& app, int* exit_code);
void RegisterClusterCommand(CLI::App& app, int* exit_code);
// `flatcake soak` (soak_cmd.cc) runs a daemon; serve_commands_absent.cc has its stand-in.
void RegisterSoakCommand(CLI::App& app, int* exit_code);

// `flatcake bench <name>`: `bench` is the parent subcommand created by main.
void RegisterRestoreBench(CLI::App& bench, int* exit_code);
void RegisterIndexBench(CLI::App& bench, int* exit_code);
void RegisterCoalesceBench(CLI::App& bench, int* exit_code);
void RegisterSchedBench(CLI::App& bench, int* exit_code);
void RegisterRoundTripBench(CLI::App& bench, int* exit_code);
void RegisterRecoverBench(CLI::App& bench, int* exit_code);
void RegisterPathsBench(CLI::App& bench, int* exit_code);
// `bench gpu` (bench_gpu.cc): the GPU data path; exits 1 without a GPU unless --fake.
void RegisterGpuBench(CLI::App& bench, int* exit_code);
// `bench daemon` (bench_daemon.cc) needs the daemon; serve_commands_absent.cc has its stand-in.
void RegisterDaemonBench(CLI::App& bench, int* exit_code);
// `bench vllm` (bench_vllm.cc) runs the Python package's connector benchmark.
void RegisterVllmBench(CLI::App& bench, int* exit_code);
// `bench cluster` (bench_cluster.cc) needs the daemon and UCX; serve_commands_absent.cc has its
// stand-in.
void RegisterClusterBench(CLI::App& bench, int* exit_code);

}  // namespace flatcake::cli
