// The option table against what it describes: StoreOptions' fields (read from the public
// header), the checks of ValidateStoreOptions, the enum names, and the generated options tables
// in README.md and docs/sglang.md. The CLI's side is store_flags_test (src/cli/), Python's
// python/tests/test_options.py.
#include "core/option_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "testing/param_names.h"

namespace flatcake {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(FLATCAKE_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The data members of `struct StoreOptions` in include/flatcake/options.h, in order: every
// line of the struct's body that declares `name = default;` or `name;`.
std::vector<std::string> StoreOptionsFields() {
  const std::string header = ReadSource("include/flatcake/options.h");
  const size_t begin = header.find("struct StoreOptions {");
  const size_t end = header.find("\n};", begin);
  EXPECT_NE(begin, std::string::npos);
  std::istringstream body(header.substr(begin, end - begin));
  const std::regex field(R"(^\s+[A-Za-z_][\w:<>, ]*[\s>]([a-z_][a-z0-9_]*)\s*(=[^;]*)?;)");
  std::vector<std::string> names;
  std::string line;
  std::getline(body, line);  // "struct StoreOptions {"
  while (std::getline(body, line)) {
    std::smatch m;
    if (std::regex_search(line, m, field)) names.push_back(m[1]);
  }
  return names;
}

TEST(OptionTable, HasOneRowPerStoreOptionsFieldInDeclarationOrder) {
  std::vector<std::string> rows;
  for (const OptionSpec& spec : StoreOptionTable()) rows.emplace_back(spec.name);
  EXPECT_EQ(rows, StoreOptionsFields())
      << "include/flatcake/options.h and src/core/option_table.cc disagree: each StoreOptions "
         "field needs one row, in the same order";
}

TEST(OptionTable, RowsAreWellFormed) {
  std::set<std::string_view> names, flags;
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    EXPECT_TRUE(names.insert(spec.name).second) << "duplicate name";
    EXPECT_TRUE(flags.insert(spec.flag).second) << "duplicate flag";
    EXPECT_TRUE(spec.flag.starts_with("--"));
    EXPECT_FALSE(spec.help.empty());
    // One Markdown table cell, one --help line.
    EXPECT_EQ(spec.help.find_first_of("|\n"), std::string_view::npos);
    EXPECT_EQ(FindStoreOption(spec.name), &spec);
    // The kind matches the field's type.
    const bool integer = std::holds_alternative<uint32_t StoreOptions::*>(spec.member) ||
                         std::holds_alternative<uint64_t StoreOptions::*>(spec.member);
    switch (spec.kind) {
      case OptionKind::kSize:
      case OptionKind::kCount:
        EXPECT_TRUE(integer);
        EXPECT_LE(spec.min, OptionMax(spec));
        EXPECT_GE(spec.multiple, 1u);
        break;
      case OptionKind::kRatio:
        EXPECT_TRUE(std::holds_alternative<double StoreOptions::*>(spec.member));
        break;
      case OptionKind::kBool:
        EXPECT_TRUE(std::holds_alternative<bool StoreOptions::*>(spec.member));
        break;
      case OptionKind::kEnum: EXPECT_GE(spec.choices.size(), 2u); break;
      case OptionKind::kPathList:
        EXPECT_TRUE(std::holds_alternative<std::vector<std::string> StoreOptions::*>(spec.member));
        break;
      case OptionKind::kPath:
        EXPECT_TRUE(std::holds_alternative<std::string StoreOptions::*>(spec.member));
        break;
    }
    EXPECT_EQ(spec.kind == OptionKind::kEnum, !spec.choices.empty());
    EXPECT_TRUE(spec.kind == OptionKind::kBool || !spec.flag_clears);
    // Sizes are named *_bytes, and only sizes.
    EXPECT_EQ(spec.kind == OptionKind::kSize, spec.name.ends_with("_bytes"));
  }
  EXPECT_EQ(FindStoreOption("no_such_option"), nullptr);
}

TEST(OptionTable, DefaultsAreValidAndRoundTrip) {
  const StoreOptions defaults;
  EXPECT_TRUE(ValidateStoreOptions(defaults).ok()) << ValidateStoreOptions(defaults).ToString();
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    const OptionValue value = GetOption(spec, defaults);
    EXPECT_TRUE(CheckOption(spec, value).ok());
    StoreOptions copy;
    ASSERT_TRUE(SetOption(spec, value, &copy).ok());
    EXPECT_EQ(GetOption(spec, copy), value);
    // Only path options may default to nothing.
    EXPECT_FALSE(FormatOption(spec, value).empty() && spec.kind != OptionKind::kPathList &&
                 spec.kind != OptionKind::kPath);
  }
}

// Every row's checks are ValidateStoreOptions' checks: a value just outside a row's range is
// rejected, naming the option, and SetOption leaves the field unchanged.
TEST(OptionTable, ValidationRejectsValuesOutsideEachRow) {
  for (const OptionSpec& spec : StoreOptionTable()) {
    SCOPED_TRACE(spec.name);
    std::vector<OptionValue> bad;
    switch (spec.kind) {
      case OptionKind::kSize:
      case OptionKind::kCount:
        if (spec.min > 0) bad.push_back(spec.min - 1);
        if (OptionMax(spec) < UINT64_MAX) bad.push_back(OptionMax(spec) + 1);
        if (spec.multiple > 1) bad.push_back(spec.min + spec.multiple + 1);
        bad.push_back(0.5);  // wrong kind
        break;
      case OptionKind::kRatio: bad = {1.5, -0.1, uint64_t{1}}; break;
      case OptionKind::kEnum: bad = {std::string("bogus"), uint64_t{0}}; break;
      case OptionKind::kBool: bad = {std::string("true")}; break;
      case OptionKind::kPathList: bad = {std::string("/tmp")}; break;
      case OptionKind::kPath: bad = {std::vector<std::string>{"/tmp"}, uint64_t{0}}; break;
    }
    for (const OptionValue& value : bad) {
      StoreOptions o;
      const OptionValue before = GetOption(spec, o);
      const Status s = SetOption(spec, value, &o);
      EXPECT_TRUE(s.IsInvalidArgument()) << FormatOption(spec, value);
      EXPECT_NE(s.message().find(spec.name), std::string_view::npos) << s.ToString();
      EXPECT_EQ(GetOption(spec, o), before);
    }
  }
  // The same checks through ValidateStoreOptions, on a field set directly.
  StoreOptions o;
  o.io_workers = 65;
  EXPECT_NE(ValidateStoreOptions(o).message().find("io_workers"), std::string_view::npos);
  o = StoreOptions{};
  o.io_engine = static_cast<IoEngineKind>(7);
  EXPECT_TRUE(ValidateStoreOptions(o).IsInvalidArgument());
  o = StoreOptions{};
  o.low_watermark = 0.99;
  o.high_watermark = 0.5;
  EXPECT_NE(ValidateStoreOptions(o).message().find("watermark"), std::string_view::npos);
}

TEST(OptionTable, TextFormsParse) {
  StoreOptions o;
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("io_engine"), "posix", &o).ok());
  EXPECT_EQ(o.io_engine, IoEngineKind::kPosix);
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("scheduler"), "fcfs", &o).ok());
  EXPECT_EQ(o.scheduler, RestoreScheduler::kFcfs);
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("io_workers"), "8", &o).ok());
  EXPECT_EQ(o.io_workers, 8u);
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("high_watermark"), "0.9", &o).ok());
  EXPECT_EQ(o.high_watermark, 0.9);
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("verify_checksums"), "false", &o).ok());
  EXPECT_FALSE(o.verify_checksums);
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("ssd_dirs"), "/a, /b,,", &o).ok());
  EXPECT_EQ(o.ssd_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("io_workers"), "8x", &o).IsInvalidArgument());
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("io_workers"), "", &o).IsInvalidArgument());
  EXPECT_TRUE(SetOptionFromText(*FindStoreOption("io_workers"), "-1", &o).IsInvalidArgument());
  EXPECT_EQ(o.io_workers, 8u);
  EXPECT_EQ(FormatOption(*FindStoreOption("dram_bytes"), uint64_t{3} << 30), "3GiB");
  EXPECT_EQ(FormatOption(*FindStoreOption("dram_bytes"), uint64_t{4097}), "4097");
  EXPECT_EQ(OptionRangeText(*FindStoreOption("io_workers")), "1..64");
  EXPECT_EQ(OptionRangeText(*FindStoreOption("max_io_bytes")), ">= 4KiB, multiple of 4KiB");
  EXPECT_EQ(OptionRangeText(*FindStoreOption("io_engine")), "auto|uring|preadv|posix");
}

TEST(OptionTable, SizesTakeBinaryUnitsAndPrintedValuesReadBack) {
  EXPECT_EQ(*ParseSizeText("4096", "x"), 4096u);
  EXPECT_EQ(*ParseSizeText("4K", "x"), 4096u);
  EXPECT_EQ(*ParseSizeText("256MiB", "x"), 256 * kMiB);
  EXPECT_EQ(*ParseSizeText("2 gb", "x"), 2 * kGiB);
  EXPECT_EQ(*ParseSizeText("1TiB", "x"), 1024 * kGiB);
  EXPECT_EQ(*ParseSizeText("16777215T", "x"), uint64_t{16777215} << 40);
  for (const char* bad :
       {"", "K", "-1", "+1", "1.5G", "4 KX", "16777216T", "99999999999999999999"}) {
    const Result<uint64_t> r = ParseSizeText(bad, "dram_bytes");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("dram_bytes"), std::string_view::npos);
  }
  // Every size row's default, printed by FormatOption, parses back to itself.
  const StoreOptions defaults;
  for (const OptionSpec& spec : StoreOptionTable()) {
    if (spec.kind != OptionKind::kSize) continue;
    SCOPED_TRACE(spec.name);
    StoreOptions o;
    o.*std::get<uint64_t StoreOptions::*>(spec.member) = 12345;
    ASSERT_TRUE(SetOptionFromText(spec, FormatOption(spec, GetOption(spec, defaults)), &o).ok());
    EXPECT_EQ(GetOption(spec, o), GetOption(spec, defaults));
  }
  EXPECT_EQ(SplitPathList(" /a ,\t/b c,,"), (std::vector<std::string>{"/a", "/b c"}));
  EXPECT_TRUE(SplitPathList("").empty());
}

TEST(OptionTable, EnumNamesRoundTripAndRejectOthers) {
  for (IoEngineKind k :
       {IoEngineKind::kAuto, IoEngineKind::kUring, IoEngineKind::kPreadv, IoEngineKind::kPosix}) {
    EXPECT_EQ(*ParseIoEngineKind(IoEngineKindName(k)), k);
  }
  for (RestoreScheduler s : {RestoreScheduler::kMas, RestoreScheduler::kFcfs}) {
    EXPECT_EQ(*ParseRestoreScheduler(RestoreSchedulerName(s)), s);
  }
  EXPECT_EQ(RestoreSchedulerName(RestoreScheduler::kFcfs), "fcfs");
  for (HugePageMode m : {HugePageMode::kAuto, HugePageMode::kHugeTlb, HugePageMode::kTransparent,
                         HugePageMode::kNone}) {
    EXPECT_EQ(*ParseHugePageMode(HugePageModeName(m)), m);
  }
  for (DirectIoMode m : {DirectIoMode::kAuto, DirectIoMode::kOn, DirectIoMode::kOff}) {
    EXPECT_EQ(*ParseDirectIoMode(DirectIoModeName(m)), m);
  }
  const Result<IoEngineKind> bad = ParseIoEngineKind("spdk");
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("auto, uring, preadv, posix"), std::string_view::npos);
}

TEST(OptionTable, ReplaceOptionTableNeedsOneMarkerPair) {
  const std::string begin(kOptionTableBegin), end(kOptionTableEnd);
  const std::string doc = "intro\n" + begin + "\nold\n" + end + "\nrest\n";
  EXPECT_EQ(*ReplaceOptionTable(doc, "new\n"), "intro\n" + begin + "\nnew\n" + end + "\nrest\n");
  EXPECT_FALSE(ReplaceOptionTable("no markers\n", "t\n").ok());
  EXPECT_FALSE(ReplaceOptionTable(end + "\n" + begin + "\n", "t\n").ok());
  EXPECT_FALSE(ReplaceOptionTable(doc + doc, "t\n").ok());
}

// The lines of `text`, for a readable comparison.
std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A line diff of the marked region: "-" lines the document has, "+" lines the table renders.
std::string RegionDiff(const std::string& have, const std::string& want) {
  const std::vector<std::string> a = Lines(have), b = Lines(want);
  std::string out;
  for (const std::string& line : a) {
    if (std::find(b.begin(), b.end(), line) == b.end()) out += "- " + line + "\n";
  }
  for (const std::string& line : b) {
    if (std::find(a.begin(), a.end(), line) == a.end()) out += "+ " + line + "\n";
  }
  return out;
}

class OptionTableDocs : public ::testing::TestWithParam<std::string> {};

TEST_P(OptionTableDocs, MatchesTheGeneratedTable) {
  const std::string doc = ReadSource(GetParam());
  ASSERT_FALSE(doc.empty()) << GetParam() << " not found";
  const Result<std::string> updated = ReplaceOptionTable(doc, RenderOptionTableMarkdown());
  ASSERT_TRUE(updated.ok()) << GetParam() << ": " << updated.status().ToString();
  if (*updated != doc) {
    const size_t begin = doc.find(kOptionTableBegin);
    const size_t end = doc.find(kOptionTableEnd);
    ADD_FAILURE() << GetParam() << "'s options table differs from the option table "
                  << "(src/core/option_table.cc):\n"
                  << RegionDiff(doc.substr(begin, end - begin),
                                updated->substr(begin, updated->find(kOptionTableEnd) - begin))
                  << "Regenerate it with: build/flatcake options --update-docs " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Docs, OptionTableDocs, ::testing::Values("README.md", "docs/sglang.md"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::TestNameFrom(info.param);
                         });

}  // namespace
}  // namespace flatcake
