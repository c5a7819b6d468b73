// Command-line flags for StoreOptions, shared by every subcommand that opens a store.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "flatcake/options.h"

namespace flatcake::cli {

// Text form of the enum options, converted by Finish().
struct StoreFlagText {
  std::string huge_pages = "auto";
  std::string direct_io = "auto";
};

// Adds --dram-bytes, --ssd-dir, --ssd-bytes, ... (one flag per StoreOptions field) to `app`.
// Sizes accept unit suffixes (4K, 256M, 2G, 1GiB).
void AddStoreFlags(CLI::App* app, StoreOptions* options, StoreFlagText* text);
// Converts the text flags; call in the subcommand's callback.
Status FinishStoreFlags(const StoreFlagText& text, StoreOptions* options);

// Prints "flatcake <command>: <status>" to stderr and returns 1 (or 0 when ok).
int ReportStatus(std::string_view command, const Status& status);
// The same for a bad command-line argument: returns 2, the exit status of every command-line
// error (see main.cc).
int ReportArgError(std::string_view command, const Status& status);
// The same for a failure to open a store whose options all come from flags: an option the store
// rejects (InvalidArgument) is a command-line error (2), anything else a failure (1).
int ReportOpenError(std::string_view command, const Status& status);

}  // namespace flatcake::cli
