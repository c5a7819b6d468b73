// The store flags over a daemon config file, the way `flatcake serve` combines them: the flags
// bound to ServeOverrides::store by AddStoreFlags, the given ones named by GivenStoreFlags,
// ApplyOverrides replacing only those.
#include <gtest/gtest.h>

#include "cli/store_flags.h"
#include "serve/serve_config.h"

namespace flatcake::cli {
namespace {

constexpr char kFile[] =
    "[store]\ndram_bytes = \"96GiB\"\nio_workers = 8\nssd_dirs = [\"/a\", \"/b\"]\n"
    "verify_checksums = false\n";

// kFile's configuration with the store flags of `command_line` over it.
serve::ServeConfig FileWithFlags(const std::string& command_line) {
  const Result<serve::ServeConfig> file = serve::ParseServeConfig(kFile, "node.toml");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  CLI::App app;
  serve::ServeOverrides overrides;
  AddStoreFlags(&app, &overrides.store);
  app.parse(command_line, false);
  overrides.store_given = GivenStoreFlags(app);
  serve::ServeConfig config = *file;
  EXPECT_TRUE(serve::ApplyOverrides(overrides, &config).ok());
  return config;
}

TEST(ServeFlags, OnlyGivenStoreFlagsReplaceTheFilesValues) {
  // --io-workers at its default value still overrides: the user gave it.
  const serve::ServeConfig config = FileWithFlags("--io-workers 2 --ssd-dir /nvme0 --sync every");
  EXPECT_EQ(config.store.io_workers, 2u);
  EXPECT_EQ(config.store.ssd_dirs, std::vector<std::string>{"/nvme0"});
  EXPECT_EQ(config.store.sync, SyncMode::kEvery);
  EXPECT_EQ(config.store.dram_bytes, 96 * kGiB);  // not given: the file's, not the default
  EXPECT_FALSE(config.store.verify_checksums);
}

TEST(ServeFlags, WithoutFlagsTheFileStands) {
  const serve::ServeConfig config = FileWithFlags("");
  EXPECT_EQ(config.store.io_workers, 8u);
  EXPECT_EQ(config.store.ssd_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(config.store.dram_bytes, 96 * kGiB);
}

}  // namespace
}  // namespace flatcake::cli
