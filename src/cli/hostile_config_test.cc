// Hostile configurations (docs/reliability.md): a read-only pool directory, a full disk at open
// and during writes, zero and absurd sizes, too few file descriptors, a pool on tmpfs and two
// daemons racing for one pool. Each must end in a clear message and a non-zero exit status (or a
// documented fallback), and none may damage a pool: every test that runs against a pool holding
// blocks checks it afterwards with CheckPool (`flatcake fsck`) and by reopening it and reading
// every block back. The mounts need root (CAP_SYS_ADMIN); where mount(2) is refused those tests
// skip with the reason.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flatcake/store.h"
#include "store/pool_check.h"
#include "testing/child_process.h"
#include "testing/command_run.h"
#include "testing/durable_pool_model.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

constexpr KvLayout kLayout{2, 2, 4096};  // 16 KiB blocks
constexpr uint64_t kBlocks = 24;
constexpr uint64_t kNs = 0x4057;

using testing::CommandRun;

// Runs `flatcake args...` (through bash when `ulimit` is given: `ulimit -n N; exec ...`).
CommandRun Flatcake(const TempDir& scratch, std::vector<std::string> args, int ulimit_n = 0) {
  std::vector<std::string> argv = {FLATCAKE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  if (ulimit_n > 0) {
    std::string cmd = "ulimit -n " + std::to_string(ulimit_n) + " && exec";
    for (const std::string& a : argv) cmd += " '" + a + "'";
    argv = {"/bin/bash", "-c", cmd};
  }
  return testing::RunProcess(argv, scratch.File("stderr-" + std::to_string(::getpid()) + ".txt"));
}

// The pool every test uses (testing::SmallDurablePool): 4 MiB in four 1 MiB files, a 2 MiB
// arena; PoolFlags gives `flatcake` the same geometry.
StoreOptions PoolOptions(const std::string& dir) { return testing::SmallDurablePool(dir); }
std::vector<std::string> PoolFlags(const std::string& dir) {
  return {"--ssd-dir",    dir,  "--ssd-bytes",  "4M", "--ssd-file-bytes", "1M",
          "--dram-bytes", "2M", "--max-scopes", "64", "--io-engine",      "posix"};
}
std::vector<std::string> Info(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"info"};
  for (const std::string& f : PoolFlags(dir)) a.push_back(f);
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<Key> Keys(uint64_t first, uint64_t n) { return MakeKeys(kNs, first, n); }

Status PutBlocks(Store& s, const std::vector<Key>& keys) {
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  WriteHints h;
  h.force_medium = MediaType::kSsd;
  return s.Put(keys, kLayout, src.buffers(), h).status();
}

// Writes kBlocks blocks to a new pool in `dir`.
void Populate(const std::string& dir) {
  auto s = Store::Open(PoolOptions(dir));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(PutBlocks(**s, Keys(0, kBlocks)).ok());
}

// The pool in `dir` is clean (fsck) and serves `keys`, byte-exact.
void ExpectIntact(const std::string& dir, const std::vector<Key>& keys) {
  PoolCheckOptions c;
  c.dirs = {dir};
  c.deep = true;
  auto report = CheckPool(c);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->clean()) << report->damaged.size() << " damaged";
  auto s = Store::Open(PoolOptions(dir));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  HostBlocks want(kLayout, keys.size()), got(kLayout, keys.size());
  want.Fill(keys);
  auto r = (*s)->Get(keys, kLayout, got.buffers());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hits, keys.size());
  EXPECT_TRUE(got.bytes == want.bytes);
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A tmpfs of `bytes` mounted on a fresh directory; unmounted on destruction.
class Tmpfs {
 public:
  explicit Tmpfs(uint64_t bytes) {
    const std::string opts = "size=" + std::to_string(bytes);
    if (::mount("flatcake-test", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      why_ = std::string("mount(tmpfs) refused: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_{"hostile-tmpfs"};
  bool mounted_ = false;
  std::string why_;
};

class HostileConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(scratch_.ok() && pool_.ok()); }
  TempDir scratch_{"hostile-scratch"};
  TempDir pool_{"hostile-pool"};
};

TEST_F(HostileConfigTest, ReadOnlyPoolDirectoryIsRefusedAndLeftIntact) {
  Populate(pool_.path());
  // A read-only mount of the pool (root ignores permission bits; a mount binds everyone).
  TempDir ro("hostile-ro");
  if (::mount(pool_.path().c_str(), ro.path().c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "bind mount refused: " << std::strerror(errno);
  }
  const bool remounted =
      ::mount(nullptr, ro.path().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
  CommandRun r;
  if (remounted) r = Flatcake(scratch_, Info(ro.path()));
  ::umount2(ro.path().c_str(), MNT_DETACH);
  ASSERT_TRUE(remounted);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "is not writable (a read-only file system)")) << r.err;
  // Without write permission, for a user other than root.
  if (::getuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0) {
    ASSERT_EQ(::chmod(pool_.path().c_str(), 0555), 0);
    std::vector<std::string> a = {"--reuid=65534", "--regid=65534", "--clear-groups",
                                  FLATCAKE_BINARY};
    for (const std::string& f : Info(pool_.path())) a.push_back(f);
    testing::Child child(
        [&] {
          std::vector<std::string> argv = {"/usr/bin/setpriv"};
          argv.insert(argv.end(), a.begin(), a.end());
          return argv;
        }(),
        scratch_.File("setpriv.txt"));
    (void)child.ReadAll();
    EXPECT_EQ(child.Wait(), 2);
    EXPECT_TRUE(Contains(testing::ReadWholeFile(scratch_.File("setpriv.txt")), "is not writable"));
    ASSERT_EQ(::chmod(pool_.path().c_str(), 0700), 0);
  }
  ExpectIntact(pool_.path(), Keys(0, kBlocks));
}

TEST_F(HostileConfigTest, FullDiskAtOpenIsRefusedAndCreatesNothing) {
  Tmpfs fs(2 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  const CommandRun r = Flatcake(scratch_, Info(fs.path()));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "NoSpace: SSD directory")) << r.err;
  EXPECT_TRUE(Contains(r.err, "bytes available, needs")) << r.err;
  struct stat st {};
  EXPECT_NE(::stat((fs.path() + "/flatcake-pool-0.dat").c_str(), &st), 0);
}

// The pool files are pre-allocated, so a full disk stops the journal: puts fail with NoSpace
// (their commit records cannot be written) and publish nothing, reads go on, and once space is
// back the store writes again; the pool stays clean and serves everything published.
TEST_F(HostileConfigTest, FullDiskDuringWritesFailsPutsAndKeepsThePool) {
  Tmpfs fs(5 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  std::vector<Key> published;
  {
    auto s = Store::Open(PoolOptions(fs.path()));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(PutBlocks(**s, Keys(0, 4)).ok());
    for (uint64_t i = 0; i < 4; ++i) published.push_back(Keys(i, 1)[0]);
    // Fill the rest of the file system.
    const std::string filler = fs.path() + "/filler";
    const int fd = ::open(filler.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> chunk(4096, 0xEE);
    while (::write(fd, chunk.data(), chunk.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    ::close(fd);
    uint64_t failed = 0, next = 4;
    for (int i = 0; i < 40; ++i, next += 2) {
      const std::vector<Key> keys = Keys(next, 2);
      Status st = PutBlocks(**s, keys);
      if (st.ok()) {
        published.insert(published.end(), keys.begin(), keys.end());
        continue;
      }
      failed++;
      EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.ToString();
      EXPECT_EQ((*s)->Exists(keys), 0u) << "a failed put published nothing";
    }
    EXPECT_GT(failed, 0u) << "the journal never ran out of space";
    HostBlocks got(kLayout, published.size());
    auto r = (*s)->Get(published, kLayout, got.buffers());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->hits, published.size());
    // Space again: puts work again.
    ASSERT_EQ(::unlink(filler.c_str()), 0);
    const std::vector<Key> after = Keys(1000, 2);
    ASSERT_TRUE(PutBlocks(**s, after).ok());
    published.insert(published.end(), after.begin(), after.end());
  }
  ExpectIntact(fs.path(), published);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  std::fclose(f);
}

// Hostile configuration files: a key of 50,000 dotted parts and a table header 50,000 levels
// deep (the TOML parser recursed once per level: SIGSEGV), /dev/zero (read without bound), a
// FIFO nobody writes (the open waited forever), a file over the size limit. Each gets exit 2
// and a message at once; serve starts nothing.
TEST_F(HostileConfigTest, HostileConfigFilesAreRefusedAtOnce) {
  std::string dotted(50000 * 2, '.');
  for (size_t i = 0; i < dotted.size(); i += 2) dotted[i] = 'a';
  dotted.back() = ' ';
  const std::string deep_key = scratch_.File("deep-key.toml");
  WriteFile(deep_key, dotted + "= 1\n");
  std::string header = "[";
  for (int i = 0; i < 50000; ++i) header += i ? ".t" : "t";
  const std::string deep_table = scratch_.File("deep-table.toml");
  WriteFile(deep_table, header + "]\n");
  const std::string nested = scratch_.File("nested.toml");
  WriteFile(nested, "x = " + std::string(50000, '[') + std::string(50000, ']') + "\n");
  const std::string big = scratch_.File("big.toml");
  WriteFile(big, std::string(2 << 20, '#'));
  const std::string fifo = scratch_.File("fifo.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const struct {
    std::string path, message;
  } cases[] = {
      {deep_key, "nested deeper than 64 levels"},
      {deep_table, "nested deeper than 64 levels"},
      {nested, "nested deeper than 64 levels"},
      {"/dev/zero", "not a regular file"},
      {fifo, "not a regular file"},
      {big, "at most 1048576 are read"},
  };
  for (const auto& c : cases) {
    const CommandRun r =
        Flatcake(scratch_, {"serve", "--socket", scratch_.File("s.sock"), "--config", c.path});
    EXPECT_EQ(r.status, 2) << c.path << "\n" << r.err;
    EXPECT_TRUE(Contains(r.out + r.err, c.message)) << c.path << "\n" << r.out << r.err;
  }
}

TEST_F(HostileConfigTest, ZeroAndAbsurdSizesGetClearMessages) {
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string message;
  };
  const std::string d = pool_.path();
  auto sized = [&](const std::string& ssd_bytes, const std::string& file_bytes) {
    return std::vector<std::string>{"info",    "--ssd-dir",   d,         "--dram-bytes",
                                    "2M",      "--ssd-bytes", ssd_bytes, "--ssd-file-bytes",
                                    file_bytes};
  };
  const std::vector<Case> cases = {
      {sized("0", "1M"), 2, "smaller than one pool file"},
      {sized("4M", "0"), 2, "out of range (>= 4KiB, multiple of 4KiB)"},
      {sized("4M", "5000"), 2, "out of range (>= 4KiB, multiple of 4KiB)"},
      {sized("-5", "1M"), 2, "must be a size in bytes"},
      {sized("99999999999999999999", "1M"), 2, "must be a size in bytes"},
      {sized("1E", "1G"), 1, "open-file limit"},
      {sized("1P", "1T"), 1, "bytes available, needs"},
      {{"info", "--dram-bytes", "0"}, 2, "both media are disabled"},
      {{"info", "--dram-bytes", "64T"}, 1, "mmap DRAM arena"},
      {{"info", "--dram-bytes", "2M", "--max-scopes", "0"}, 2, "out of range"},
      {{"info", "--dram-bytes", "2M", "--index-capacity", "1000000000000"},
       1,
       "cannot allocate a block index"},
      {{"info", "--dram-bytes", "2M", "--read-window-bytes", "0"}, 2, "out of range"},
  };
  for (const Case& c : cases) {
    const CommandRun r = Flatcake(scratch_, c.args);
    std::string line;
    for (const std::string& a : c.args) line += a + " ";
    EXPECT_EQ(r.status, c.status) << line << "\n" << r.err;
    EXPECT_TRUE(Contains(r.out + r.err, c.message)) << line << "\n" << r.out << r.err;
  }
  // None of them left a pool file behind.
  struct stat st {};
  EXPECT_NE(::stat((d + "/flatcake-pool-0.dat").c_str(), &st), 0);
}

TEST_F(HostileConfigTest, TooFewFileDescriptorsAreRefusedAndLeaveNoDebris) {
  Populate(pool_.path());
  const CommandRun r = Flatcake(scratch_, Info(pool_.path()), /*ulimit_n=*/24);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "the open-file limit (ulimit -n) is 24")) << r.err;
  ExpectIntact(pool_.path(), Keys(0, kBlocks));
  // A new pool: refused the same way, and nothing is created that a later open would refuse.
  TempDir fresh("hostile-fresh");
  EXPECT_EQ(Flatcake(scratch_, Info(fresh.path()), 24).status, 1);
  const CommandRun later = Flatcake(scratch_, Info(fresh.path()));
  EXPECT_EQ(later.status, 0) << later.err;
  EXPECT_TRUE(Contains(later.out, "recovered   : nothing (a new pool)")) << later.out;
}

TEST_F(HostileConfigTest, PoolOnTmpfsUsesODirectOrFallsBackWithANote) {
  Tmpfs fs(8 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  const CommandRun r = Flatcake(scratch_, Info(fs.path()));
  ASSERT_EQ(r.status, 0) << r.err;
  const bool direct = Contains(r.out, "O_DIRECT\n");
  const CommandRun on = Flatcake(scratch_, Info(fs.path(), {"--direct-io", "on"}));
  if (direct) {
    EXPECT_EQ(on.status, 0) << on.err;  // tmpfs takes O_DIRECT (Linux 6.6 and later)
  } else {
    EXPECT_TRUE(Contains(r.out, "buffered")) << r.out;
    EXPECT_EQ(on.status, 1) << on.err;
    EXPECT_TRUE(Contains(on.err, "O_DIRECT refused")) << on.err;
  }
  const CommandRun off = Flatcake(scratch_, Info(fs.path(), {"--direct-io", "off"}));
  EXPECT_EQ(off.status, 0) << off.err;
  EXPECT_TRUE(Contains(off.out, "buffered")) << off.out;
}

TEST_F(HostileConfigTest, TwoDaemonsRacingForOnePoolOneWinsTheOtherSaysWhy) {
  Populate(pool_.path());
  auto serve = [&](const std::string& name) {
    std::vector<std::string> a = {FLATCAKE_BINARY, "serve", "--socket", scratch_.File(name)};
    for (const std::string& f : PoolFlags(pool_.path())) a.push_back(f);
    return std::make_unique<testing::Child>(a, scratch_.File(name + ".log"));
  };
  auto a = serve("a.sock");
  auto b = serve("b.sock");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string log_a, log_b;
  while (std::chrono::steady_clock::now() < deadline) {
    log_a = testing::ReadWholeFile(scratch_.File("a.sock.log"));
    log_b = testing::ReadWholeFile(scratch_.File("b.sock.log"));
    if ((Contains(log_a, "Busy") || Contains(log_b, "Busy")) &&
        (Contains(log_a, "listening on") || Contains(log_b, "listening on"))) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool a_lost = Contains(log_a, "Busy");
  EXPECT_NE(a_lost, Contains(log_b, "Busy")) << log_a << "\n" << log_b;
  const std::string& lost = a_lost ? log_a : log_b;
  EXPECT_TRUE(Contains(lost, "another daemon or store holds the pool")) << lost;
  a->Kill(SIGTERM);
  b->Kill(SIGTERM);
  EXPECT_EQ((a_lost ? a : b)->Wait(), 1);
  EXPECT_EQ((a_lost ? b : a)->Wait(), 0) << (a_lost ? log_b : log_a);
  ExpectIntact(pool_.path(), Keys(0, kBlocks));
}

}  // namespace
}  // namespace flatcake::cli
