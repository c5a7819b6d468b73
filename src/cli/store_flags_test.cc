// The CLI's store flags against the option table: one flag per row with the row's help and
// range, nothing else, and every value parsed and checked as the row says.
#include "cli/store_flags.h"

#include <gtest/gtest.h>

#include <set>

#include "core/option_table.h"

namespace flatcake::cli {
namespace {

// A value for `spec` other than its default, as a flag argument (empty for a bool flag), and the
// value it must parse to.
std::pair<std::string, OptionValue> OtherValue(const OptionSpec& spec) {
  const OptionValue current = GetOption(spec, StoreOptions{});
  switch (spec.kind) {
    case OptionKind::kSize: return {"8M", uint64_t{8} << 20};
    case OptionKind::kCount: {
      const uint64_t v =
          std::get<uint64_t>(current) == OptionMax(spec) ? spec.min : OptionMax(spec);
      return {std::to_string(v), v};
    }
    case OptionKind::kRatio: return {"0.5", 0.5};
    case OptionKind::kBool:
      // A flag that is on by default and does not clear (--recover) is turned off with =false.
      if (std::get<bool>(current) && !spec.flag_clears) return {"=false", false};
      return {"", !std::get<bool>(current)};
    case OptionKind::kEnum:
      return {std::string(spec.choices.back()), std::string(spec.choices.back())};
    case OptionKind::kPathList: return {"/a", std::vector<std::string>{"/a"}};
    case OptionKind::kPath: return {"/dev/shm/arena", std::string("/dev/shm/arena")};
  }
  return {};
}

TEST(StoreFlags, OneFlagPerRowWithItsHelpAndRange) {
  CLI::App app;
  StoreOptions o;
  AddStoreFlags(&app, &o);
  std::set<std::string> flags;
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    flags.emplace(spec.flag);
    const CLI::Option* opt = app.get_option_no_throw(std::string(spec.flag));
    ASSERT_NE(opt, nullptr) << spec.flag << " is not registered";
    EXPECT_NE(opt->get_description().find(spec.help), std::string::npos);
    const std::string range = OptionRangeText(spec);
    if (spec.kind == OptionKind::kEnum) {
      EXPECT_EQ(opt->get_type_name(), range);
    } else if (!range.empty()) {
      EXPECT_NE(opt->get_description().find(range), std::string::npos);
    }
  }
  // Nothing but the rows (and --help): a flag registered by hand beside the table fails here.
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_name() == "--help") continue;
    EXPECT_TRUE(flags.count(opt->get_name())) << opt->get_name() << " has no option-table row";
  }
  const std::string help = app.help();
  for (const std::string& flag : flags) EXPECT_NE(help.find(flag), std::string::npos) << flag;
}

TEST(StoreFlags, EveryFlagSetsItsField) {
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    CLI::App app;
    StoreOptions o;
    AddStoreFlags(&app, &o);
    const auto [text, want] = OtherValue(spec);
    const std::string sep = text.empty() || text[0] == '=' ? "" : " ";
    ASSERT_NO_THROW(app.parse(std::string(spec.flag) + sep + text, false));
    EXPECT_EQ(GetOption(spec, o), want);
  }
  CLI::App app;
  StoreOptions o;
  AddStoreFlags(&app, &o);
  app.parse("--ssd-dir /a --ssd-dir /b --io-engine posix --scheduler fcfs --dram-bytes 1G", false);
  EXPECT_EQ(o.ssd_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(o.io_engine, IoEngineKind::kPosix);
  EXPECT_EQ(o.scheduler, RestoreScheduler::kFcfs);
  EXPECT_EQ(o.dram_bytes, kGiB);
}

// A value the row rejects is a command-line error (main turns it into exit status 2).
TEST(StoreFlags, ValuesOutsideTheRowAreParseErrors) {
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    std::vector<std::string> bad;
    if (spec.kind == OptionKind::kEnum) bad = {"bogus"};
    if (spec.kind == OptionKind::kRatio) bad = {"1.5", "x"};
    if (spec.kind == OptionKind::kCount) {
      bad = {"x", "-1"};
      if (OptionMax(spec) < UINT64_MAX) bad.push_back(std::to_string(OptionMax(spec) + 1));
      if (spec.min > 0) bad.push_back(std::to_string(spec.min - 1));
    }
    if (spec.kind == OptionKind::kSize && spec.multiple > 1) bad = {"5000"};
    for (const std::string& value : bad) {
      CLI::App app;
      StoreOptions o;
      AddStoreFlags(&app, &o);
      EXPECT_THROW(app.parse(std::string(spec.flag) + " " + value, false), CLI::ParseError)
          << value;
    }
  }
}

TEST(StoreFlags, GivenFlagsAreTheOnesOnTheCommandLine) {
  CLI::App app;
  StoreOptions o;
  AddStoreFlags(&app, &o);
  EXPECT_TRUE(GivenStoreFlags(app).empty());
  // A value equal to the default counts as given: the user said it.
  app.parse("--io-workers 2 --no-verify --ssd-dir /a --ssd-dir /b --recover=false", false);
  EXPECT_EQ(GivenStoreFlags(app),
            (std::vector<std::string>{"ssd_dirs", "io_workers", "verify_checksums", "recover"}));
}

TEST(StoreFlags, OneRowBoundToAnotherStruct) {
  CLI::App app;
  IoEngineKind engine = IoEngineKind::kPreadv;
  const CLI::Option* opt = AddStoreFlag(&app, "io_engine", &engine);
  EXPECT_EQ(opt->get_default_str(), "preadv");
  app.parse("--io-engine uring", false);
  EXPECT_EQ(engine, IoEngineKind::kUring);
  CLI::App bad;
  AddStoreFlag(&bad, "io_engine", &engine);
  EXPECT_THROW(bad.parse("--io-engine spdk", false), CLI::ParseError);
}

}  // namespace
}  // namespace flatcake::cli
