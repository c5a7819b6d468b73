// Helpers the `flatcake bench` subcommands share: medians over repetitions, host memory laid out
// as a serving engine's KV pool is, the check that a benchmark's memory fits this machine, and
// the flags that go with them.
// Pure functions; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "flatcake/options.h"
#include "flatcake/status.h"
#include "util/aligned_buffer.h"

namespace flatcake::cli {

// The median of `v` (the mean of the two middle values for an even count); 0 when empty.
double Median(std::vector<double> v);
// The value at quantile `q` (0..1) of `v`: its element at index floor(q * size), clamped; 0 when
// empty. Reorders `v` (nth_element).
double Percentile(std::vector<double>& v, double q);
// Seconds from `t0` to now, on the steady clock.
double SecondsSince(std::chrono::steady_clock::time_point t0);

// Host memory for restore destinations and raw I/O buffers: 2 MiB-aligned and advised for
// transparent huge pages when `huge` (a serving engine's host KV pool is huge-page backed), else
// for small pages, and faulted in now, before any timing: first touch costs far more than a copy
// on virtual machines (docs/performance.md).
Result<AlignedBuffer> AllocateHostMemory(uint64_t bytes, bool huge);

// InvalidArgument unless `need` bytes of host memory stay below 3/4 of this machine's; `what`
// says what needs them ("the session (--bytes, ...) needs N MiB of host memory for <for_what>").
Status CheckHostMemory(uint64_t need, const std::string& who, const std::string& for_what);

// The I/O flags of a benchmark that opens its own stores and engines: --io-engine (the store
// option's flag), --io-workers and --io-queue-depth, range-checked.
void AddBenchIoFlags(CLI::App* cmd, IoEngineKind* engine, uint32_t* workers, uint32_t* depth);
// --dest-pages thp|4k: the pages of `what` (AllocateHostMemory's `huge` when "thp").
void AddDestPagesFlag(CLI::App* cmd, std::string* pages, const std::string& what);

}  // namespace flatcake::cli
