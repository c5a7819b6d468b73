// Fuzz target: option and size parsing (core/option_table.h, flatcake/options.h): the text forms
// the CLI flags, the Python module and the daemon's config file hand to the option table. The
// first byte picks what parses the rest: one row of the table (SetOptionFromText, then the
// whole-options check and the text form back), the size syntax, the path-list split or the
// enums' parsers. A size that parses must print and parse back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/option_table.h"
#include "flatcake/options.h"

namespace {

using namespace flatcake;

void ParseRow(const OptionSpec& spec, std::string_view text) {
  StoreOptions options;
  if (!SetOptionFromText(spec, text, &options).ok()) return;
  (void)ValidateStoreOptions(options);
  const OptionValue value = GetOption(spec, options);
  // What an accepted value prints as reads back as the same value.
  StoreOptions again;
  if (!SetOptionFromText(spec, FormatOption(spec, value), &again).ok() ||
      GetOption(spec, again) != value) {
    std::abort();
  }
}

void ParseSize(std::string_view text) {
  auto bytes = ParseSizeText(text, "size");
  if (!bytes.ok()) return;
  // Every size prints in a unit ParseSizeText reads back (dram_bytes is a kSize row).
  const OptionSpec* spec = FindStoreOption("dram_bytes");
  if (spec == nullptr) std::abort();
  auto back = ParseSizeText(FormatOption(*spec, OptionValue(*bytes)), "size");
  if (!back.ok() || *back != *bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::span<const OptionSpec> table = StoreOptionTable();
  const size_t pick = data[0] % (table.size() + 4);
  if (pick < table.size()) {
    ParseRow(table[pick], text);
  } else if (pick == table.size()) {
    ParseSize(text);
  } else if (pick == table.size() + 1) {
    (void)SplitPathList(text);
  } else if (pick == table.size() + 2) {
    (void)FindStoreOption(text);
    (void)ParseHugePageMode(text);
    (void)ParseDirectIoMode(text);
  } else {
    (void)ParseIoEngineKind(text);
    (void)ParseRestoreScheduler(text);
    (void)ParseSyncMode(text);
  }
  return 0;
}
