// Command-line flags for StoreOptions, shared by every subcommand that opens a store. Every flag
// comes from a row of the option table (core/option_table.h): its name, help, range and checks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "flatcake/options.h"

namespace flatcake::cli {

// Adds one flag per option-table row (--dram-bytes, --ssd-dir, ..., --no-verify) to `app`, bound
// to `options`: a value is checked against its row as it is parsed, and a rejected one is a
// command-line error (exit 2). Sizes accept unit suffixes (4K, 256M, 2G, 1GiB).
void AddStoreFlags(CLI::App* app, StoreOptions* options);
// The option-table names (StoreOptions fields) of the store flags given on the command line that
// `app` parsed, in table order: only these should replace values from elsewhere (a config file,
// serve::ServeOverrides::store_given), since the others hold their defaults. REQUIRES: `app`
// has the flags of AddStoreFlags.
std::vector<std::string> GivenStoreFlags(const CLI::App& app);
// The flag of the store option `name` alone, bound to a field of another struct that carries the
// same option (the replay's and `bench restore`'s --io-engine).
CLI::Option* AddStoreFlag(CLI::App* app, std::string_view name, IoEngineKind* target);

// Prints "flatcake <command>: <status>" to stderr and returns 1 (or 0 when ok).
int ReportStatus(std::string_view command, const Status& status);
// The same for a bad command-line argument: returns 2, the exit status of every command-line
// error (see main.cc).
int ReportArgError(std::string_view command, const Status& status);
// The same for a failure to open a store whose options all come from flags: an option the store
// rejects (InvalidArgument) is a command-line error (2), anything else a failure (1).
int ReportOpenError(std::string_view command, const Status& status);

}  // namespace flatcake::cli
