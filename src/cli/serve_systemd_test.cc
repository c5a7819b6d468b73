// What the systemd unit (packaging/systemd/flatcake.service) relies on from `flatcake serve`, run
// as a process.
//
// `--check-config FILE` (its ExecStartPre): a valid configuration exits 0 with its summary and
// creates nothing (no socket, lock, pool file, arena file or directory), also beside a daemon
// serving that very configuration; an invalid value, or a missing file, exits 2 with the message
// serve itself gives; the flags given with it are merged over the file as serve merges them.
//
// Type=notify: READY=1 to $NOTIFY_SOCKET once the socket listens, STOPPING=1 at SIGTERM.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/command_run.h"
#include "util/temp_dir.h"
#include "util/unique_fd.h"

namespace flatcake::cli {
namespace {

using testing::CommandRun;
using testing::ReadWholeFile;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every path under `dir` (recursively), relative to it.
std::set<std::string> Tree(const std::string& dir, const std::string& prefix = "") {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    out.insert(prefix + name);
    struct stat st {};
    if (::lstat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      out.merge(Tree(dir + "/" + name, prefix + name + "/"));
    }
  }
  ::closedir(d);
  return out;
}

class ServeSystemdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok() && logs_.ok());
    ASSERT_EQ(::mkdir(Path("pool").c_str(), 0700), 0);
  }

  std::string Path(const std::string& name) const { return dir_.File(name); }

  // node.toml in the test's directory: `text` after the [store] table of a small pool in
  // pool/ (which exists) with its DRAM arena in the file shm/arena (whose directory does not).
  std::string WriteConfig(const std::string& top, const std::string& store = "") const {
    const std::string path = Path("node.toml");
    std::ofstream(path) << top << "\n[store]\ndram_bytes = \"32MiB\"\ndram_path = \""
                        << Path("shm/arena") << "\"\nssd_dirs = [\"" << Path("pool")
                        << "\"]\nssd_bytes = \"128MiB\"\nssd_file_bytes = \"16MiB\"\n"
                        << "io_engine = \"posix\"\n"
                        << store;
    return path;
  }
  // socket = run/flatcake.sock: a directory that does not exist, as /run/flatcake before
  // systemd makes it.
  std::string SocketLine() const { return "socket = \"" + Path("run/flatcake.sock") + "\"\n"; }

  // Runs `flatcake serve args...` to its end.
  CommandRun Serve(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FLATCAKE_BINARY, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv, logs_.File("stderr-" + std::to_string(runs_++) + ".txt"));
  }

  // Whether `log` says `what` within 30 s, while `daemon` runs.
  static bool WaitForLog(testing::Child& daemon, const std::string& log, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!Contains(ReadWholeFile(log), what) && std::chrono::steady_clock::now() < deadline &&
           !daemon.TryWait()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Contains(ReadWholeFile(log), what);
  }

  TempDir dir_{"check-config"};  // what the configuration names; nothing else goes here
  TempDir logs_{"check-config-logs"};
  int runs_ = 0;
};

TEST_F(ServeSystemdTest, AValidFileExitsZeroWithItsSummaryAndCreatesNothing) {
  const std::string config = WriteConfig(SocketLine() +
                                         "socket_mode = \"0660\"\n"
                                         "metrics_addr = \"127.0.0.1:0\"\n"
                                         "[allow]\nuids = [1000]\ngids = [2000]\n"
                                         "[tenants.sglang]\ndram_bytes = \"8MiB\"\n");
  const std::set<std::string> before = Tree(dir_.path());
  const CommandRun r = Serve({"--check-config", config});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "config ok: socket " + Path("run/flatcake.sock") +
                       " (mode 0660), allow uids 1000 gids 2000, dram 32MiB (file " +
                       Path("shm/arena") +
                       "), ssd 128MiB in 1 dir (16MiB files, sync interval), metrics "
                       "127.0.0.1:0, one node, 1 tenant quota, max_clients 256, log info\n");
  EXPECT_EQ(r.err, "");
  // No socket directory, socket or lock, no arena file, nothing in the pool directory.
  EXPECT_EQ(Tree(dir_.path()), before);
}

TEST_F(ServeSystemdTest, ChecksBesideADaemonServingTheSameConfiguration) {
  ASSERT_EQ(::mkdir(Path("run").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(Path("shm").c_str(), 0700), 0);
  const std::string config = WriteConfig(SocketLine());
  const std::string log = logs_.File("daemon.txt");
  testing::Child daemon({FLATCAKE_BINARY, "serve", "--config", config}, log);
  ASSERT_TRUE(WaitForLog(daemon, log, "listening on")) << ReadWholeFile(log);
  const std::set<std::string> serving = Tree(dir_.path());
  // Its socket, lock and pool are held: a check that took any of them would fail or disturb it.
  const CommandRun r = Serve({"--check-config", config});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "config ok: socket " + Path("run/flatcake.sock"))) << r.out;
  EXPECT_EQ(Tree(dir_.path()), serving);
  daemon.Kill(SIGTERM);
  EXPECT_EQ(daemon.Wait(), 0) << ReadWholeFile(log);
}

TEST_F(ServeSystemdTest, AnInvalidValueExitsTwoWithTheMessageServeGives) {
  const std::string config = WriteConfig(SocketLine(), "io_workers = 99\n");
  const std::set<std::string> before = Tree(dir_.path());
  const CommandRun check = Serve({"--check-config", config});
  EXPECT_EQ(check.status, 2);
  EXPECT_EQ(check.out, "");
  EXPECT_TRUE(Contains(check.err, "node.toml:")) << check.err;
  EXPECT_TRUE(Contains(check.err, "store.io_workers")) << check.err;
  EXPECT_TRUE(Contains(check.err, "out of range")) << check.err;
  const CommandRun serve = Serve({"--config", config});
  EXPECT_EQ(serve.status, 2);
  EXPECT_EQ(serve.err, check.err);
  EXPECT_EQ(Tree(dir_.path()), before);
}

TEST_F(ServeSystemdTest, AMissingFileExitsTwo) {
  const CommandRun check = Serve({"--check-config", Path("absent.toml")});
  EXPECT_EQ(check.status, 2);
  EXPECT_TRUE(Contains(check.err, "no config file " + Path("absent.toml"))) << check.err;
  // serve itself says the same and, as documented, exits 1 (a failure to start, not a usage
  // error); the check answers whether the configuration can be used.
  const CommandRun serve = Serve({"--config", Path("absent.toml")});
  EXPECT_EQ(serve.status, 1);
  EXPECT_EQ(serve.err, check.err);
}

TEST_F(ServeSystemdTest, FlagsGivenWithItAreMergedOverTheFileAsServeMergesThem) {
  const std::string config = WriteConfig("[allow]\nuids = [1000]\n");
  // The file has no socket: required, from the file or the flag.
  CommandRun r = Serve({"--check-config", config});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "no socket")) << r.err;
  // Flags replace what the file gives (a list flag the whole list) and keep the rest.
  r = Serve({"--check-config", config, "--socket", Path("s.sock"), "--dram-bytes", "64M",
             "--ssd-dir", Path("a"), "--ssd-dir", Path("b"), "--allow-uid", "5", "--sync", "every",
             "--log-level", "debug"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "config ok: socket " + Path("s.sock") + " (mode 0600)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "allow uids 5 gids -")) << r.out;
  EXPECT_TRUE(Contains(r.out, "dram 64MiB")) << r.out;
  EXPECT_TRUE(Contains(r.out, "ssd 128MiB in 2 dirs (16MiB files, sync every)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "log debug")) << r.out;
  // A flag that breaks a rule across settings: the file's SSD budget is one 16 MiB file.
  r = Serve({"--check-config", config, "--socket", Path("s.sock"), "--ssd-file-bytes", "256M"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "smaller than one pool file")) << r.err;
  // A flag out of its range, and flags that cannot go with it.
  EXPECT_EQ(Serve({"--check-config", config, "--socket", "s", "--lease-ttl", "1"}).status, 2);
  EXPECT_EQ(Serve({"--check-config", config, "--config", config}).status, 2);
  EXPECT_EQ(Serve({"--check-config", config, "--print-config"}).status, 2);
  struct stat st {};
  EXPECT_NE(::stat(Path("s.sock").c_str(), &st), 0);
}

// The service manager's end of $NOTIFY_SOCKET: a datagram socket at a path.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) fd_.reset();
  }
  bool ok() const { return fd_.valid(); }
  // The next message within `seconds`; empty when none came.
  std::string Receive(int seconds) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) != 1) return "";
    char buf[512];
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }

 private:
  UniqueFd fd_;
};

TEST_F(ServeSystemdTest, TellsTheServiceManagerWhenItServesAndWhenItStops) {
  ASSERT_EQ(::mkdir(Path("run").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(Path("shm").c_str(), 0700), 0);
  const std::string config = WriteConfig(SocketLine());
  NotifySocket manager(logs_.File("notify.sock"));
  ASSERT_TRUE(manager.ok());
  // The child inherits the variable, as from systemd.
  ::setenv("NOTIFY_SOCKET", logs_.File("notify.sock").c_str(), 1);
  const std::string log = logs_.File("daemon.txt");
  testing::Child daemon({FLATCAKE_BINARY, "serve", "--config", config}, log);
  ::unsetenv("NOTIFY_SOCKET");
  const std::string ready = manager.Receive(30);
  EXPECT_EQ(ready, "READY=1\nSTATUS=serving on " + Path("run/flatcake.sock")) << ReadWholeFile(log);
  // Ready means a client can connect now: the socket is there.
  struct stat st {};
  EXPECT_EQ(::stat(Path("run/flatcake.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  daemon.Kill(SIGTERM);
  EXPECT_EQ(manager.Receive(30), "STOPPING=1");
  EXPECT_EQ(daemon.Wait(), 0) << ReadWholeFile(log);
  EXPECT_NE(::stat(Path("run/flatcake.sock").c_str(), &st), 0) << "the socket stays";
}

}  // namespace
}  // namespace flatcake::cli
