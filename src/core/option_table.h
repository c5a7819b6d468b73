// The option table: one row per StoreOptions field, the one home of what each option is called,
// what values it takes and what it means. Everything that names store options is driven by it:
//   - the CLI registers one flag per row (cli/store_flags.cc), with the row's help and range;
//   - the Python binding accepts exactly the rows' names and checks values by kind and range
//     (python/src/py_convert.cc; `flatcake._core.option_specs()` exposes the rows);
//   - ValidateStoreOptions checks every field against its row before the cross-field relations;
//   - the options tables in README.md and docs/sglang.md are rendered from it
//     (RenderOptionTableMarkdown; `flatcake options --update-docs` rewrites them) and
//     option_table_test fails when they, the CLI or StoreOptions' fields disagree with it.
//
// The table is immutable after static initialisation: every function here is safe to call
// concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flatcake/options.h"
#include "flatcake/status.h"

namespace flatcake {

enum class OptionKind : uint8_t {
  kSize,      // bytes; the CLI and Python accept unit suffixes (256M, 4GiB)
  kCount,     // a non-negative integer
  kRatio,     // a fraction in [0, 1]
  kBool,      // true or false
  kEnum,      // one of the row's choices
  kPathList,  // directories, in order
  kPath,      // one file path; empty for none
};
std::string_view OptionKindName(OptionKind kind);  // "size", "count", "ratio", ...

// The value names of each enum option, indexed by the enum's value (0, 1, ...). The Name/Parse
// functions of include/flatcake/options.h read them.
inline constexpr std::array<std::string_view, 4> kHugePageModeNames = {"auto", "hugetlb", "thp",
                                                                       "none"};
inline constexpr std::array<std::string_view, 3> kDirectIoModeNames = {"auto", "on", "off"};
inline constexpr std::array<std::string_view, 4> kIoEngineKindNames = {"auto", "uring", "preadv",
                                                                       "posix"};
inline constexpr std::array<std::string_view, 2> kRestoreSchedulerNames = {"mas", "fcfs"};
inline constexpr std::array<std::string_view, 3> kSyncModeNames = {"none", "interval", "every"};

// Where a row's value lives in StoreOptions.
using OptionMember =
    std::variant<uint32_t StoreOptions::*, uint64_t StoreOptions::*, double StoreOptions::*,
                 bool StoreOptions::*, std::vector<std::string> StoreOptions::*,
                 HugePageMode StoreOptions::*, DirectIoMode StoreOptions::*,
                 IoEngineKind StoreOptions::*, RestoreScheduler StoreOptions::*,
                 SyncMode StoreOptions::*, std::string StoreOptions::*>;

inline constexpr uint64_t kNoOptionMax = UINT64_MAX;  // the field type's maximum

struct OptionSpec {
  std::string_view name;  // the StoreOptions field; the Python option name
  std::string_view flag;  // the CLI flag ("--dram-bytes")
  OptionKind kind;
  OptionMember member;
  std::string_view help;  // one line, for --help and the docs
  // kSize, kCount: the inclusive range (max is clamped to the field's type) and, for sizes, the
  // alignment every value must have.
  uint64_t min = 0;
  uint64_t max = kNoOptionMax;
  uint64_t multiple = 1;
  std::span<const std::string_view> choices = {};  // kEnum: the value names
  bool flag_clears = false;  // kBool: the flag sets the option to false (--no-verify)
};

// A value in the form its kind takes: kSize and kCount a uint64_t, kRatio a double, kBool a bool,
// kEnum the value's name (and kPath the path), kPathList the directories.
using OptionValue = std::variant<uint64_t, double, bool, std::string, std::vector<std::string>>;

// Every row, in StoreOptions' declaration order.
std::span<const OptionSpec> StoreOptionTable();
// The row named `name` (a field name), or nullptr.
const OptionSpec* FindStoreOption(std::string_view name);
// "dram_bytes, huge_pages, ..." for messages that list the valid names.
std::string StoreOptionNameList();

// The largest value the row's field can hold (kSize, kCount).
uint64_t OptionMax(const OptionSpec& spec);
// The row's range in words: "1..64", ">= 4096, multiple of 4096", "auto|uring|preadv|posix",
// "0..1"; empty when any value of the kind is accepted.
std::string OptionRangeText(const OptionSpec& spec);

OptionValue GetOption(const OptionSpec& spec, const StoreOptions& options);
// Checks `value` against the row (kind, range, multiple, choice) and stores it. On error, returns
// InvalidArgument naming the option and what it accepts, and leaves `options` unchanged.
Status SetOption(const OptionSpec& spec, const OptionValue& value, StoreOptions* options);
// The same check without storing.
Status CheckOption(const OptionSpec& spec, const OptionValue& value);

// Text forms, as the CLI and the daemon's config file take them and the docs print them. Sizes
// print in the largest binary unit that divides them ("256MiB") and parse from what
// ParseSizeText takes, so that a printed value reads back; true/false/1/0 for bools,
// comma-separated path lists (SplitPathList).
std::string FormatOption(const OptionSpec& spec, const OptionValue& value);
Status SetOptionFromText(const OptionSpec& spec, std::string_view text, StoreOptions* options);

// A byte count: digits, then optionally (spaces and) a binary unit, any case: B; K, KB, KiB;
// M, MB, MiB; G, GB, GiB; T, TB, TiB (all powers of 1024, as the CLI's size flags take them).
// InvalidArgument, naming `what`, for anything else or a value past 2^64 - 1.
Result<uint64_t> ParseSizeText(std::string_view text, std::string_view what);
// A byte count in the largest binary unit that divides it ("256MiB", "3TiB", "4097"), as
// FormatOption prints sizes; ParseSizeText reads it back.
std::string FormatSizeText(uint64_t bytes);
// "a, b,,c" -> {"a", "b", "c"}: split at commas, spaces and tabs trimmed, empty entries dropped.
std::vector<std::string> SplitPathList(std::string_view text);

// The rows as one JSON array of objects: name, flag, kind, default (its text form), range, help,
// and by kind choices / min, max, multiple / flag_clears. `flatcake options --json` prints it;
// the Python module's option_specs() parses it.
std::string RenderOptionTableJson();

// The options table of README.md and docs/sglang.md: a Markdown table, one row per option
// (Python name, CLI flag, default, range or values, help), ending in a newline.
std::string RenderOptionTableMarkdown();
// The markers around the generated table in a document.
inline constexpr std::string_view kOptionTableBegin =
    "<!-- option-table:begin (generated: flatcake options --update-docs FILE) -->";
inline constexpr std::string_view kOptionTableEnd = "<!-- option-table:end -->";
// `document` with the lines between its markers replaced by `table`; InvalidArgument when the
// markers are missing, repeated or out of order.
Result<std::string> ReplaceOptionTable(std::string_view document, std::string_view table);

}  // namespace flatcake
