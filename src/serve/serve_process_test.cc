// `flatcake serve` as the process it is in production, with client processes (serve_test_client,
// fork and exec) that write, look up and restore concurrently with every byte verified, that are
// killed with SIGKILL in the middle of a write and of a restore, and a daemon killed with SIGKILL
// and started again on its durable pool while a client keeps calling. Also: garbage from a raw
// socket, a second daemon, a peer outside the allow-list, SIGTERM. FLATCAKE_BINARY and
// SERVE_TEST_CLIENT are the paths CMake built them at.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serve/http_get.h"
#include "serve/prom_text.h"
#include "serve/remote_store.h"
#include "serve/serve_config.h"
#include "serve/unix_socket.h"
#include "serve/wire.h"
#include "testing/child_process.h"
#include "testing/daemon_fixture.h"
#include "util/temp_dir.h"

namespace flatcake::serve {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Eventually;
using testing::kServeLayout;

using testing::Child;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ServeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  std::string Socket() const { return dir_.File("sock"); }
  std::string Log() const { return dir_.File("daemon.log"); }
  // Whether the daemon's log shows `text` within 5 s: a line it writes after its socket listens,
  // or after the event a test waited for, may not be there yet.
  bool LogShows(const std::string& text) const {
    return Eventually([&] { return ReadFile(Log()).find(text) != std::string::npos; });
  }
  // `flatcake serve` over the test directory: an 8 MiB arena, a 32 MiB durable pool.
  std::vector<std::string> ServeArgs(const std::string& socket, bool ssd = true) const {
    std::vector<std::string> a = {FLATCAKE_BINARY, "serve", "--socket",    socket,
                                  "--dram-bytes",  "8M",    "--io-engine", "posix",
                                  "--max-scopes",  "256"};
    if (ssd) {
      for (const char* s : {"--ssd-dir", "--ssd-bytes", "32M", "--ssd-file-bytes", "4M"}) {
        a.push_back(s);
        if (std::string(s) == "--ssd-dir") a.push_back(dir_.path());
      }
    }
    return a;
  }
  // Starts the daemon and waits until it listens.
  std::unique_ptr<Child> StartDaemon(std::vector<std::string> args = {}) {
    if (args.empty()) args = ServeArgs(Socket());
    const size_t listening_before = Count(ReadFile(Log()), "listening on");
    auto d = std::make_unique<Child>(args, Log());
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Count(ReadFile(Log()), "listening on") == listening_before) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "the daemon did not start:\n" << ReadFile(Log());
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return d;
  }
  std::unique_ptr<Child> Client(const std::vector<std::string>& args,
                                const std::string& tenant = "t") {
    std::vector<std::string> a = {SERVE_TEST_CLIENT, Socket(), tenant};
    a.insert(a.end(), args.begin(), args.end());
    return std::make_unique<Child>(a, dir_.File("clients.log"));
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // Starts the daemon and connects this process to it as tenant "t".
  void StartServing() {
    daemon_ = StartDaemon();
    ASSERT_NE(daemon_, nullptr);
    me_ = testing::ConnectClient(Socket(), "t");
    ASSERT_NE(me_, nullptr);
  }

  TempDir dir_;
  std::unique_ptr<Child> daemon_;
  std::unique_ptr<RemoteStore> me_;  // declared last: disconnects before the daemon is killed
};

TEST_F(ServeProcessTest, FourClientProcessesPutLookUpAndRestoreConcurrently) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  std::vector<std::unique_ptr<Child>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Client({"load", std::to_string(i + 1), "3"}));
  for (auto& c : clients) {
    const std::string line = c->ReadLine(std::chrono::seconds(60));
    EXPECT_EQ(line.rfind("ok puts", 0), 0u) << line << "\n" << ReadFile(dir_.File("clients.log"));
    EXPECT_EQ(c->Wait(), 0);
  }
  std::printf("%s", ReadFile(dir_.File("clients.log")).c_str());
}

TEST_F(ServeProcessTest, AWriterKilledMidWritePublishesNothingAndItsSpaceIsReused) {
  ASSERT_NO_FATAL_FAILURE(StartServing());
  const uint64_t used_before = me_->GetStats().dram.used_bytes;
  auto writer = Client({"hold-write", "20", "4"});
  ASSERT_EQ(writer->ReadLine(), "reserved");
  EXPECT_GT(me_->GetStats().dram.used_bytes, used_before);
  writer->Kill(SIGKILL);
  EXPECT_EQ(writer->Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Eventually([&] { return me_->GetStats().dram.used_bytes == used_before; }));
  const std::vector<Key> keys = MakeKeys(20, 0, 4);
  EXPECT_EQ(me_->Exists(keys), 0u);
  auto put = testing::PutBlocks(*me_, keys, MediaType::kDram);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->written, 4u);
  EXPECT_EQ(testing::ServedBlocks(*me_, keys, kServeLayout), testing::AllOf(4, 1));
  // The session logs its close after it has given the space back.
  EXPECT_TRUE(LogShows("released 1 reservations"));
}

TEST_F(ServeProcessTest, AReaderKilledMidRestoreReleasesItsPins) {
  ASSERT_NO_FATAL_FAILURE(StartServing());
  const std::vector<Key> keys = MakeKeys(21, 0, 4);
  ASSERT_TRUE(testing::PutBlocks(*me_, keys, MediaType::kDram).ok());
  auto reader = Client({"hold-restore", "21", "0", "4"});
  ASSERT_EQ(reader->ReadLine(), "restoring");
  reader->Kill(SIGKILL);
  EXPECT_EQ(reader->Wait(), 128 + SIGKILL);
  ASSERT_TRUE(
      Eventually([&] { return Count(ReadFile(Log()), "released 0 reservations, 1 pins") == 1; }));
  // Filling DRAM twice over makes reclamation take the oldest scopes, the reader's first: it
  // could not while the pin was held.
  const uint64_t reclaimed_before = me_->GetStats().dram.scopes_reclaimed;
  for (uint64_t i = 0; i < 64; ++i) {
    auto put = testing::PutBlocks(*me_, MakeKeys(22, i * 16, 16), MediaType::kDram);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  EXPECT_GT(me_->GetStats().dram.scopes_reclaimed, reclaimed_before);
  EXPECT_EQ(me_->Exists(keys), 0u);
}

TEST_F(ServeProcessTest, ADaemonKilledAndRestartedServesItsRecoveredPoolToItsClients) {
  ASSERT_NO_FATAL_FAILURE(StartServing());
  const std::vector<Key> mine = MakeKeys(30, 0, 8);
  ASSERT_TRUE(testing::PutBlocks(*me_, mine, MediaType::kSsd).ok());
  auto survivor = Client({"survive", "31", "8", "30"});
  ASSERT_EQ(survivor->ReadLine(), "written");
  daemon_->Kill(SIGKILL);
  EXPECT_EQ(daemon_->Wait(), 128 + SIGKILL);
  EXPECT_EQ(me_->Exists(mine), 0u);  // away: a miss, not an error
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  daemon_ = StartDaemon();  // the socket is stale now: the new daemon replaces it
  ASSERT_NE(daemon_, nullptr);
  const std::string line = survivor->ReadLine(std::chrono::seconds(30));
  EXPECT_EQ(line.rfind("recovered", 0), 0u) << line;
  EXPECT_EQ(survivor->Wait(), 0);
  EXPECT_TRUE(Eventually([&] { return me_->Exists(mine) == mine.size(); }));
  EXPECT_EQ(testing::ServedBlocks(*me_, mine, kServeLayout), testing::AllOf(8, 1));
  EXPECT_GE(me_->reconnects(), 1u);
  // Logged after the socket listens: a client may connect before it is written.
  EXPECT_TRUE(LogShows("recovered 16 blocks")) << ReadFile(Log());
}

TEST_F(ServeProcessTest, GarbageFromARawSocketClosesOnlyThatConnection) {
  ASSERT_NO_FATAL_FAILURE(StartServing());
  const std::vector<Key> keys = MakeKeys(40, 0, 2);
  ASSERT_TRUE(testing::PutBlocks(*me_, keys, MediaType::kSsd).ok());
  std::vector<uint8_t> noise(4096);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> truncated(kFrameHeaderBytes + 10, 0);
  EncodeFrameHeader(FrameHeader{kProtocolVersion, 0, 100},
                    std::span<uint8_t, kFrameHeaderBytes>(truncated.data(), kFrameHeaderBytes));
  for (const std::vector<uint8_t>* bytes : {&noise, &truncated}) {
    auto fd = ConnectUnix(Socket(), std::chrono::milliseconds(2000));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(TEST_SendBytes(fd->get(), *bytes, {}).ok());
    ::shutdown(fd->get(), SHUT_WR);
    pollfd p{fd->get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    char c;
    EXPECT_LE(::recv(fd->get(), &c, 1, 0), 0);  // closed by the daemon
  }
  EXPECT_TRUE(Eventually([&] { return Count(ReadFile(Log()), "Corruption") >= 2; }));
  EXPECT_EQ(testing::ServedBlocks(*me_, keys, kServeLayout), testing::AllOf(2, 1));
  EXPECT_TRUE(me_->connected());
}

TEST_F(ServeProcessTest, ASecondDaemonOnTheSocketOrThePoolExitsNonZero) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  Child same_socket(ServeArgs(Socket(), /*ssd=*/false), dir_.File("second.log"));
  EXPECT_EQ(same_socket.Wait(), 1);
  Child same_pool(ServeArgs(dir_.File("other.sock")), dir_.File("second.log"));
  EXPECT_EQ(same_pool.Wait(), 1);
  const std::string log = ReadFile(dir_.File("second.log"));
  EXPECT_NE(log.find("another flatcake serve"), std::string::npos) << log;
  EXPECT_NE(log.find("another daemon or store holds the pool"), std::string::npos) << log;
}

TEST_F(ServeProcessTest, APeerOutsideTheAllowListIsRefused) {
  std::vector<std::string> args = ServeArgs(Socket(), /*ssd=*/false);
  args.insert(args.end(), {"--allow-uid", std::to_string(::geteuid() + 1)});
  auto daemon = StartDaemon(args);
  ASSERT_NE(daemon, nullptr);
  auto c = RemoteStore::Connect(Socket(), "t", testing::SmallClientOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().ToString();
  EXPECT_TRUE(LogShows("refused"));
}

TEST_F(ServeProcessTest, SigtermShutsDownCleanly) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  auto me = testing::ConnectClient(Socket(), "t");
  ASSERT_TRUE(testing::PutBlocks(*me, MakeKeys(50, 0, 2), MediaType::kSsd).ok());
  daemon->Kill(SIGTERM);
  EXPECT_EQ(daemon->Wait(), 0);
  EXPECT_NE(::access(Socket().c_str(), F_OK), 0);
  EXPECT_NE(ReadFile(Log()).find("shut down"), std::string::npos);
  Child no_file({FLATCAKE_BINARY, "serve", "--socket", Socket(), "--config", "x.toml"},
                dir_.File("second.log"));
  EXPECT_EQ(no_file.Wait(), 1);
}

// The file gives the socket, the store and the metrics endpoint; a flag overrides one of its
// values (the log level: the file's "error" would hide the lines this test waits for).
TEST_F(ServeProcessTest, AConfigFileServesAndTheMetricsShowTheLoad) {
  const std::string config = dir_.File("node.toml");
  std::ofstream(config) << "socket = \"" << Socket() << "\"\n"
                        << "metrics_addr = \"127.0.0.1:0\"\n"
                        << "log_level = \"error\"\n"
                        << "[store]\ndram_bytes = \"8MiB\"\nio_engine = \"posix\"\n"
                        << "max_scopes = 256\n"
                        << "[tenants.t]\ndram_bytes = \"4MiB\"\n";
  auto daemon = StartDaemon({FLATCAKE_BINARY, "serve", "--config", config, "--log-level", "info"});
  ASSERT_NE(daemon, nullptr);
  // "metrics at http://127.0.0.1:PORT/metrics": the port the kernel chose. `serve` logs it once
  // the daemon has started, so it may come after the socket already answers.
  ASSERT_TRUE(LogShows("metrics at http://127.0.0.1:")) << ReadFile(Log());
  const std::string log = ReadFile(Log());
  const size_t at = log.find("metrics at http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  HostPort endpoint{"127.0.0.1", static_cast<uint16_t>(std::atoi(log.c_str() + at + 28))};
  ASSERT_NE(endpoint.port, 0) << log;

  auto me = testing::ConnectClient(Socket(), "t");
  ASSERT_NE(me, nullptr);
  const std::vector<Key> keys = MakeKeys(60, 0, 4);
  ASSERT_TRUE(testing::PutBlocks(*me, keys, MediaType::kDram).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(testing::ServedBlocks(*me, keys, kServeLayout), testing::AllOf(4, 1));
  }

  // The last restore's Unpin (which brings the delivered bytes) is sent without waiting for its
  // reply: scrape until the daemon has counted it, for 5 s at most.
  Result<HttpResponse> got = Status::NotFound("not scraped");
  Result<PromText> text = Status::NotFound("not scraped");
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);;) {
    got = HttpGet(endpoint, "/metrics", std::chrono::milliseconds(5000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->status, 200);
    text = PromText::Parse(got->body);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    if (text->Sum("flatcake_requests_total", {{"type", "unpin"}}) >= 3 ||
        std::chrono::steady_clock::now() > until) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("%s", got->body.c_str());
  EXPECT_EQ(text->Sum("flatcake_clients", {{"tenant", "t"}}), 1);
  EXPECT_EQ(text->Sum("flatcake_connections_total"), 1);
  EXPECT_EQ(text->Sum("flatcake_requests_total", {{"type", "hello"}}), 1);
  EXPECT_GE(text->Sum("flatcake_requests_total", {{"type", "reserve_write"}}), 1);
  EXPECT_GE(text->Sum("flatcake_requests_total", {{"type", "publish_write"}}), 1);
  EXPECT_EQ(text->Sum("flatcake_requests_total", {{"type", "pin_read"}}), 3);
  EXPECT_EQ(text->Sum("flatcake_requests_total", {{"type", "unpin"}}), 3);
  EXPECT_EQ(text->Sum("flatcake_hits_total", {{"medium", "dram"}}), 12);
  const double block_bytes = static_cast<double>(kServeLayout.block_bytes());
  EXPECT_EQ(text->Sum("flatcake_delivered_bytes_total", {{"medium", "dram"}}), 12 * block_bytes);
  EXPECT_GE(text->Sum("flatcake_written_bytes_total", {{"medium", "dram"}}), 4 * block_bytes);
  EXPECT_EQ(text->Sum("flatcake_restore_seconds_count", {{"medium", "dram"}}), 3);
  EXPECT_GT(text->Sum("flatcake_restore_seconds_sum", {{"medium", "dram"}}), 0);
  EXPECT_GE(text->Sum("flatcake_tenant_used_bytes", {{"tenant", "t"}, {"medium", "dram"}}),
            4 * block_bytes);
  EXPECT_EQ(text->Sum("flatcake_tenant_quota_bytes", {{"tenant", "t"}, {"medium", "dram"}}),
            4.0 * 1024 * 1024);
  me.reset();
  daemon->Kill(SIGTERM);
  EXPECT_EQ(daemon->Wait(), 0);
}

TEST_F(ServeProcessTest, PrintConfigWritesAFileThatParsesToTheDefaults) {
  Child print({FLATCAKE_BINARY, "serve", "--print-config"}, Log());
  const std::string toml = print.ReadAll();
  EXPECT_EQ(print.Wait(), 0);
  EXPECT_EQ(toml, RenderServeConfigToml());
  auto parsed = ParseServeConfig(toml, "--print-config");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->socket_mode, ServeConfig{}.socket_mode);
  EXPECT_EQ(parsed->max_clients, ServeConfig{}.max_clients);
}

}  // namespace
}  // namespace flatcake::serve
