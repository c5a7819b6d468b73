// The daemon's configuration: a full file, each malformed case with its message (file, line,
// key), flags over the file, the whole-config checks, and docs/serve.example.toml against
// RenderServeConfigToml.
#include "serve/serve_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/option_table.h"
#include "testing/param_names.h"
#include "util/temp_dir.h"

namespace flatcake::serve {
namespace {

constexpr char kExamplePath[] = "docs/serve.example.toml";

std::string SourcePath(const std::string& relative) {
  return std::string(FLATCAKE_SOURCE_DIR) + "/" + relative;
}

// Every field of two configurations, the store's by option-table row.
void ExpectSameConfig(const ServeConfig& a, const ServeConfig& b) {
  for (const OptionSpec& spec : StoreOptionTable()) {
    EXPECT_EQ(GetOption(spec, a.store), GetOption(spec, b.store)) << "store." << spec.name;
  }
  EXPECT_EQ(a.socket_path, b.socket_path);
  EXPECT_EQ(a.metrics_addr, b.metrics_addr);
  EXPECT_EQ(a.allow.uids, b.allow.uids);
  EXPECT_EQ(a.allow.gids, b.allow.gids);
  EXPECT_EQ(a.tenants, b.tenants);
  EXPECT_EQ(a.default_quota, b.default_quota);
  EXPECT_EQ(a.max_clients, b.max_clients);
  EXPECT_EQ(a.log_level, b.log_level);
}

constexpr char kFullConfig[] = R"(# a node of eight GPUs
socket = "/run/flatcake/node.sock"
metrics_addr = "127.0.0.1:9464"
max_clients = 64
log_level = "debug"

[allow]
uids = [1000, 1001]
gids = [2000]

[default_quota]
dram_bytes = "8GiB"
ssd_bytes = 0

[tenants.sglang-prod]
dram_bytes = "64GiB"
ssd_bytes = 2199023255552

[tenants."team.b"]
ssd_bytes = "1T"

[store]
node_id = 7
dram_bytes = "96GiB"
dram_path = "/dev/shm/flatcake-arena"
huge_pages = "thp"
ssd_dirs = ["/mnt/nvme0/fc", "/mnt/nvme1/fc"]
ssd_bytes = "2TiB"
ssd_file_bytes = 1073741824
direct_io = "on"
tau_tokens = 1024
high_watermark = 0.9
low_watermark = 1  # an integer is a number too
io_workers = 8
scheduler = "fcfs"
verify_checksums = false
sync = "every"
)";

TEST(ServeConfig, ReadsEveryKindOfSetting) {
  const Result<ServeConfig> r = ParseServeConfig(kFullConfig, "node.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServeConfig& c = *r;
  EXPECT_EQ(c.socket_path, "/run/flatcake/node.sock");
  EXPECT_EQ(c.metrics_addr, "127.0.0.1:9464");
  EXPECT_EQ(c.max_clients, 64u);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.allow.uids, (std::vector<uid_t>{1000, 1001}));
  EXPECT_EQ(c.allow.gids, (std::vector<gid_t>{2000}));
  EXPECT_EQ(c.default_quota, (TenantQuota{8 * kGiB, 0}));
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants.at("sglang-prod"), (TenantQuota{64 * kGiB, 2048 * kGiB}));
  EXPECT_EQ(c.tenants.at("team.b"), (TenantQuota{0, 1024 * kGiB}));
  EXPECT_EQ(c.QuotaFor("sglang-prod").dram_bytes, 64 * kGiB);
  EXPECT_EQ(c.QuotaFor("someone-else"), c.default_quota);
  EXPECT_EQ(c.QuotaFor("team.b").bytes(MediaType::kSsd), 1024 * kGiB);

  const StoreOptions& s = c.store;
  EXPECT_EQ(s.node_id, 7u);
  EXPECT_EQ(s.dram_bytes, 96 * kGiB);
  EXPECT_EQ(s.dram_path, "/dev/shm/flatcake-arena");
  EXPECT_EQ(s.huge_pages, HugePageMode::kTransparent);
  EXPECT_EQ(s.ssd_dirs, (std::vector<std::string>{"/mnt/nvme0/fc", "/mnt/nvme1/fc"}));
  EXPECT_EQ(s.ssd_bytes, 2048 * kGiB);
  EXPECT_EQ(s.ssd_file_bytes, kGiB);
  EXPECT_EQ(s.direct_io, DirectIoMode::kOn);
  EXPECT_EQ(s.tau_tokens, 1024u);
  EXPECT_EQ(s.high_watermark, 0.9);
  EXPECT_EQ(s.low_watermark, 1.0);
  EXPECT_EQ(s.io_workers, 8u);
  EXPECT_EQ(s.scheduler, RestoreScheduler::kFcfs);
  EXPECT_FALSE(s.verify_checksums);
  EXPECT_EQ(s.sync, SyncMode::kEvery);
  // Keys the file leaves out keep their defaults.
  EXPECT_EQ(s.max_scopes, StoreOptions{}.max_scopes);
  EXPECT_EQ(s.io_queue_depth, StoreOptions{}.io_queue_depth);
  // low_watermark 1 > high 0.9: a file may hold it, the whole-config check refuses it.
  const Status valid = ValidateServeConfig(c);
  EXPECT_TRUE(valid.IsInvalidArgument());
  EXPECT_NE(valid.message().find("watermark"), std::string_view::npos) << valid.ToString();
}

TEST(ServeConfig, AnEmptyFileIsTheDefaults) {
  const Result<ServeConfig> r = ParseServeConfig("# nothing\n", "empty.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameConfig(*r, ServeConfig{});
  EXPECT_EQ(r->allow.uids, std::vector<uid_t>{::geteuid()});
  EXPECT_TRUE(r->allow.gids.empty());
}

TEST(ServeConfig, StringPathListAndEmptyAllowTable) {
  const Result<ServeConfig> r =
      ParseServeConfig("[store]\nssd_dirs = \"/a, /b\"\n[allow]\ngids = [10]\n", "x.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->store.ssd_dirs, (std::vector<std::string>{"/a", "/b"}));
  // [allow] replaces the default: the daemon's own uid is no longer admitted by uid.
  EXPECT_TRUE(r->allow.uids.empty());
  EXPECT_EQ(r->allow.gids, std::vector<gid_t>{10});
}

struct Malformed {
  const char* what;
  const char* toml;
  // Every one of these must appear in the message.
  std::vector<std::string> message_has;
};

class ServeConfigMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(ServeConfigMalformed, IsRefusedNamingFileLineAndKey) {
  const Malformed& m = GetParam();
  const Result<ServeConfig> r = ParseServeConfig(m.toml, "bad.toml");
  ASSERT_FALSE(r.ok()) << m.what;
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  for (const std::string& part : m.message_has) {
    EXPECT_NE(r.status().message().find(part), std::string_view::npos)
        << m.what << ": '" << part << "' not in: " << r.status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ServeConfigMalformed,
    ::testing::Values(
        Malformed{"malformed TOML",
                  "socket = \"/a\"\nmax_clients = = 3\n",
                  {"bad.toml:2:", "malformed TOML"}},
        Malformed{"an unterminated string", "socket = \"/a\n", {"bad.toml:1:", "malformed TOML"}},
        Malformed{"a key given twice",
                  "log_level = \"info\"\nlog_level = \"warn\"\n",
                  {"bad.toml:2:", "malformed TOML"}},
        Malformed{"an unknown top-level key",
                  "\n\nsockett = \"/a\"\n",
                  {"bad.toml:3:", "unknown key 'sockett'", "socket", "[store]"}},
        Malformed{"an unknown store option",
                  "[store]\ndram_bytes = 0\ndram_byte = 4\n",
                  {"bad.toml:3:", "unknown key 'store.dram_byte'", "ssd_bytes"}},
        Malformed{"an unknown table", "[stor]\ndram_bytes = 1\n", {"bad.toml:1:", "'stor'"}},
        Malformed{"a store option of the wrong type",
                  "[store]\nio_workers = \"8\"\n",
                  {"bad.toml:2:", "store.io_workers must be an integer, not a string"}},
        Malformed{"a bool for a size",
                  "[store]\n\ndram_bytes = true\n",
                  {"bad.toml:3:", "store.dram_bytes must be a size", "not a boolean"}},
        Malformed{"a bad size text",
                  "[store]\ndram_bytes = \"12 parsecs\"\n",
                  {"bad.toml:2:", "store.dram_bytes must be a size in bytes", "12 parsecs"}},
        Malformed{"a negative count",
                  "[store]\ntau_tokens = -1\n",
                  {"bad.toml:2:", "store.tau_tokens = -1 is out of range"}},
        Malformed{"a store option out of range",
                  "[store]\nio_workers = 65\n",
                  {"bad.toml:2:", "store.io_workers", "out of range (1..64)"}},
        Malformed{"a size off its multiple",
                  "[store]\nmax_io_bytes = 5000\n",
                  {"bad.toml:2:", "store.max_io_bytes", "multiple of 4KiB"}},
        Malformed{"a ratio past 1",
                  "[store]\nhigh_watermark = 1.5\n",
                  {"bad.toml:2:", "store.high_watermark", "0..1"}},
        Malformed{"an unknown enum value",
                  "[store]\nio_engine = \"spdk\"\n",
                  {"bad.toml:2:", "store.io_engine", "auto, uring, preadv, posix", "spdk"}},
        Malformed{"a string for a bool",
                  "[store]\nrecover = \"yes\"\n",
                  {"bad.toml:2:", "store.recover must be true or false, not a string"}},
        Malformed{"a directory that is no string",
                  "[store]\nssd_dirs = [\"/a\", 3]\n",
                  {"bad.toml:2:", "store.ssd_dirs must hold directories", "an integer"}},
        Malformed{
            "store that is no table", "store = 3\n", {"bad.toml:1:", "store must be a table"}},
        Malformed{"a bad log level",
                  "log_level = \"loud\"\n",
                  {"bad.toml:1:", "log_level", "error, warn, info, debug", "loud"}},
        Malformed{"max_clients 0",
                  "max_clients = 0\n",
                  {"bad.toml:1:", "max_clients = 0 is out of range"}},
        Malformed{"a malformed metrics address",
                  "metrics_addr = \"localhost\"\n",
                  {"bad.toml:1:", "metrics_addr", "HOST:PORT"}},
        Malformed{"a port past 65535",
                  "metrics_addr = \"127.0.0.1:70000\"\n",
                  {"bad.toml:1:", "metrics_addr", "0 to 65535"}},
        Malformed{"a negative uid",
                  "[allow]\nuids = [1000, -1]\n",
                  {"bad.toml:2:", "allow.uids = -1 is out of range"}},
        Malformed{"uids not an array",
                  "[allow]\nuids = 1000\n",
                  {"bad.toml:2:", "allow.uids must be an array"}},
        Malformed{"an unknown allow key",
                  "[allow]\nusers = [1]\n",
                  {"bad.toml:2:", "unknown key 'allow.users'"}},
        Malformed{"a bad tenant name",
                  "[tenants.\"a b\"]\ndram_bytes = 1\n",
                  {"bad.toml:1:", "tenants.a b", "[A-Za-z0-9._-]"}},
        Malformed{"an unknown quota key",
                  "[tenants.t1]\nhbm_bytes = 1\n",
                  {"bad.toml:2:", "unknown key 'tenants.t1.hbm_bytes'", "dram_bytes, ssd_bytes"}},
        Malformed{"a quota of the wrong type",
                  "[default_quota]\nssd_bytes = 1.5\n",
                  {"bad.toml:2:", "default_quota.ssd_bytes must be a size", "a float"}},
        Malformed{"a tenant that is no table",
                  "[tenants]\nt1 = 5\n",
                  {"bad.toml:2:", "tenants.t1 must be a table"}}),
    testing::CaseWhatParamName<Malformed>);

TEST(ServeConfig, LoadsAFileAndNamesAMissingOne) {
  TempDir dir;
  const std::string path = dir.path() + "/serve.toml";
  std::ofstream(path) << "socket = \"/tmp/x.sock\"\n[store]\nio_workers = 99\n";
  const Result<ServeConfig> bad = LoadServeConfig(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":3: store.io_workers"), std::string_view::npos)
      << bad.status().ToString();
  std::ofstream(path) << "socket = \"/tmp/x.sock\"\n";
  const Result<ServeConfig> good = LoadServeConfig(path);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->socket_path, "/tmp/x.sock");
  const Result<ServeConfig> missing = LoadServeConfig(dir.path() + "/none.toml");
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_TRUE(LoadServeConfig(dir.path()).status().IsInvalidArgument());
}

TEST(ServeConfig, GivenFlagsOverrideTheFileAndOnlyThose) {
  Result<ServeConfig> file = ParseServeConfig(kFullConfig, "node.toml");
  ASSERT_TRUE(file.ok());
  ServeConfig config = *file;
  ServeOverrides flags;
  flags.socket_path = "/tmp/other.sock";
  flags.log_level = LogLevel::kWarning;
  // The store flags' values: given ones and, as a command-line parser leaves them, defaults for
  // the rest. Only the given ones may replace the file's.
  flags.store.io_workers = 3;
  flags.store.ssd_dirs = {"/mnt/nvme9"};
  flags.store.verify_checksums = true;
  flags.store_given = {"io_workers", "ssd_dirs"};
  ASSERT_TRUE(ApplyOverrides(flags, &config).ok());
  EXPECT_EQ(config.socket_path, "/tmp/other.sock");
  EXPECT_EQ(config.log_level, LogLevel::kWarning);
  EXPECT_EQ(config.metrics_addr, "127.0.0.1:9464");  // not given: the file's
  EXPECT_EQ(config.max_clients, 64u);
  EXPECT_EQ(config.store.io_workers, 3u);
  EXPECT_EQ(config.store.ssd_dirs, std::vector<std::string>{"/mnt/nvme9"});  // replaced
  EXPECT_FALSE(config.store.verify_checksums);                               // the file's
  EXPECT_EQ(config.store.dram_bytes, 96 * kGiB);                             // the file's
  EXPECT_EQ(config.tenants.size(), 2u);

  ServeOverrides unknown;
  unknown.store_given = {"dram_byte"};
  const ServeConfig before = config;
  const Status s = ApplyOverrides(unknown, &config);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("dram_byte"), std::string_view::npos);
  ExpectSameConfig(config, before);
}

TEST(ServeConfig, WholeConfigChecks) {
  ServeConfig c;
  EXPECT_NE(ValidateServeConfig(c).message().find("--socket"), std::string_view::npos);
  c.socket_path = "/tmp/flatcake.sock";
  EXPECT_TRUE(ValidateServeConfig(c).ok()) << ValidateServeConfig(c).ToString();
  c.socket_path = "/" + std::string(200, 'x');
  EXPECT_NE(ValidateServeConfig(c).message().find("107 bytes"), std::string_view::npos);
  c.socket_path = "/tmp/flatcake.sock";
  c.metrics_addr = "nope";
  EXPECT_NE(ValidateServeConfig(c).message().find("metrics_addr"), std::string_view::npos);
  c.metrics_addr = "[::1]:0";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.allow = {};
  EXPECT_NE(ValidateServeConfig(c).message().find("admits nobody"), std::string_view::npos);
  c.allow.gids = {0};
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.max_clients = 0;
  EXPECT_NE(ValidateServeConfig(c).message().find("max_clients"), std::string_view::npos);
  c.max_clients = 1;
  c.tenants["no/slash"] = {};
  EXPECT_NE(ValidateServeConfig(c).message().find("tenants.no/slash"), std::string_view::npos);
  c.tenants.clear();
  c.store.io_workers = 0;
  EXPECT_NE(ValidateServeConfig(c).message().find("store: io_workers"), std::string_view::npos)
      << ValidateServeConfig(c).ToString();
}

TEST(ServeConfig, DescribesWhatItRunsOnOneLine) {
  ServeConfig c;
  c.socket_path = "/run/flatcake/flatcake.sock";
  c.allow = {{7}, {}};
  c.store.dram_bytes = 0;
  c.store.ssd_dirs = {"/var/lib/flatcake"};
  c.store.ssd_bytes = 3 * kGiB * 1024;
  c.store.ssd_file_bytes = kGiB;
  c.etcd = "http://10.0.0.1:2379";
  c.tenants["a"] = {};
  c.tenants["b"] = {};
  EXPECT_EQ(DescribeServeConfig(c),
            "socket /run/flatcake/flatcake.sock (mode 0600), allow uids 7 gids -, dram off, ssd "
            "3TiB in 1 dir (1GiB files, sync interval), metrics none, cluster default at "
            "http://10.0.0.1:2379, 2 tenant quotas, max_clients 256, log info");
  c.store.dram_bytes = 100 * kMiB + 1;
  c.store.ssd_dirs.clear();
  c.allow = {{}, {0, 2000}};
  c.etcd.clear();
  const std::string line = DescribeServeConfig(c);
  EXPECT_NE(line.find("allow uids - gids 0,2000, dram 104857601, ssd off"), std::string::npos)
      << line;
  EXPECT_NE(line.find(", one node,"), std::string::npos) << line;
}

TEST(ServeConfig, TheRenderedExampleParsesToTheDefaults) {
  const std::string text = RenderServeConfigToml();
  const Result<ServeConfig> r = ParseServeConfig(text, "rendered");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameConfig(*r, ServeConfig{});
  // Every store option and daemon setting is there, with its help.
  for (const OptionSpec& spec : StoreOptionTable()) {
    EXPECT_NE(text.find("\n" + std::string(spec.name) + " = "), std::string::npos) << spec.name;
    EXPECT_NE(text.find(std::string(spec.help.substr(0, 40))), std::string::npos) << spec.name;
  }
  for (const ServeSettingSpec& setting : ServeSettingTable()) {
    EXPECT_NE(text.find("\n" + std::string(setting.key) + " = "), std::string::npos);
  }
  // The commented-out examples are valid too.
  std::string uncommented;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("# [") ||
        (line.starts_with("# ") && line.find(" = ") != std::string::npos &&
         line.find(' ', 2) == line.find(" = "))) {
      line = line.substr(2);
    }
    uncommented += line + "\n";
  }
  const Result<ServeConfig> examples = ParseServeConfig(uncommented, "uncommented");
  ASSERT_TRUE(examples.ok()) << examples.status().ToString() << "\n" << uncommented;
  EXPECT_EQ(examples->allow.uids, std::vector<uid_t>{1000});
  EXPECT_EQ(examples->tenants.at("sglang"), (TenantQuota{64 * kGiB, 2048 * kGiB}));
}

// docs/serve.example.toml is RenderServeConfigToml's output. FLATCAKE_UPDATE_EXAMPLE=1 rewrites
// it instead of failing.
TEST(ServeConfig, CheckedInExampleIsCurrent) {
  const std::string path = SourcePath(kExamplePath);
  const std::string want = RenderServeConfigToml();
  if (const char* update = std::getenv("FLATCAKE_UPDATE_EXAMPLE"); update && *update == '1') {
    std::ofstream(path, std::ios::trunc) << want;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " not found";
  std::stringstream have;
  have << in.rdbuf();
  EXPECT_TRUE(have.str() == want)
      << kExamplePath << " differs from RenderServeConfigToml() (a store option or a daemon "
      << "setting changed). Regenerate it with: FLATCAKE_UPDATE_EXAMPLE=1 "
         "build/src/serve/serve_config_test "
      << "--gtest_filter=ServeConfig.CheckedInExampleIsCurrent";
}

TEST(ServeConfig, LogLevelNamesRoundTrip) {
  for (size_t i = 0; i < 4; ++i) {  // error, warn, info, debug
    const auto level = static_cast<LogLevel>(i);
    EXPECT_EQ(*ParseLogLevel(LogLevelName(level)), level);
  }
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_TRUE(ParseLogLevel("verbose").status().IsInvalidArgument());
}

}  // namespace
}  // namespace flatcake::serve
