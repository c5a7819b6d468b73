#include "serve/unix_socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/wire.h"
#include "util/temp_dir.h"

namespace flatcake::serve {
namespace {

using std::chrono::milliseconds;

struct SocketPair {
  UniqueFd a, b;
};

SocketPair MakePair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0) << std::strerror(errno);
  return SocketPair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

rpc::Request LookupRequest(uint64_t id, size_t keys) {
  rpc::Request request;
  request.set_id(id);
  request.mutable_lookup()->set_keys(std::string(keys * 16, 'k'));
  return request;
}

std::vector<uint8_t> Frame(const google::protobuf::MessageLite& message, uint32_t fds = 0) {
  Result<std::vector<uint8_t>> frame = EncodeFrame(message, fds);
  EXPECT_TRUE(frame.ok()) << frame.status().ToString();
  return frame.ok() ? *frame : std::vector<uint8_t>{};
}

// A memfd of `bytes` bytes holding a known pattern.
UniqueFd PatternMemfd(const char* name, size_t bytes) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid()) << std::strerror(errno);
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  EXPECT_EQ(::pwrite(fd.get(), data.data(), bytes, 0), static_cast<ssize_t>(bytes));
  return fd;
}

// How many of this process's descriptors refer to the memfd named `name`.
int OpenMemfds(const std::string& name) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("/memfd:" + name, 0) == 0) ++count;
  }
  return count;
}

TEST(UnixSocketTest, FrameRoundTripsOverASocketPair) {
  SocketPair pair = MakePair();
  const rpc::Request request = LookupRequest(9, 128);
  ASSERT_TRUE(SendFrame(pair.a.get(), Frame(request)).ok());
  Result<ReceivedFrame> got = RecvFrame(pair.b.get(), kRequestFrameLimits, milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->fds.empty());
  Result<rpc::Request> parsed = ParseRequest(got->payload);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->SerializeAsString(), request.SerializeAsString());
}

TEST(UnixSocketTest, PassesAMemfdWithAFrame) {
  constexpr size_t kBytes = 1 << 20;
  UniqueFd memfd = PatternMemfd("flatcake-arena", kBytes);
  SocketPair pair = MakePair();
  rpc::Response reply;
  reply.set_id(1);
  reply.mutable_hello()->mutable_dram_arena()->set_bytes(kBytes);
  reply.mutable_hello()->mutable_dram_arena()->set_fd_index(0);
  const int fds[] = {memfd.get()};
  ASSERT_TRUE(SendFrame(pair.a.get(), Frame(reply, 1), fds).ok());

  Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->fds.size(), 1u);
  const int received = got->fds[0].get();
  EXPECT_NE(received, memfd.get());
  EXPECT_NE(::fcntl(received, F_GETFD) & FD_CLOEXEC, 0);  // received close-on-exec
  // The same memory: the pattern is there, and a write through one mapping shows in the other.
  auto* theirs = static_cast<uint8_t*>(
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, received, 0));
  ASSERT_NE(theirs, MAP_FAILED);
  auto* ours = static_cast<uint8_t*>(
      ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0));
  ASSERT_NE(ours, MAP_FAILED);
  size_t mismatches = 0;
  for (size_t i = 0; i < kBytes; ++i) mismatches += theirs[i] != static_cast<uint8_t>(i * 131 + 7);
  EXPECT_EQ(mismatches, 0u);
  theirs[12345] = 0xAB;
  EXPECT_EQ(ours[12345], 0xAB);
  ::munmap(theirs, kBytes);
  ::munmap(ours, kBytes);
}

TEST(UnixSocketTest, DescriptorsTheHeaderDoesNotAnnounceAreRefusedAndClosed) {
  UniqueFd memfd = PatternMemfd("flatcake-extra", 4096);
  ASSERT_EQ(OpenMemfds("flatcake-extra"), 1);
  const int fds[] = {memfd.get()};
  {
    SocketPair pair = MakePair();
    // SendFrame will not send what the header does not announce ...
    EXPECT_TRUE(SendFrame(pair.a.get(), Frame(LookupRequest(1, 1)), fds).IsInvalidArgument());
    // ... a broken peer does.
    ASSERT_TRUE(TEST_SendBytes(pair.a.get(), Frame(LookupRequest(1, 1)), fds).ok());
    Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(1000));
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
  }
  EXPECT_EQ(OpenMemfds("flatcake-extra"), 1);  // the received duplicate was closed
  {
    // Announced two, sent one.
    SocketPair pair = MakePair();
    ASSERT_TRUE(TEST_SendBytes(pair.a.get(), Frame(LookupRequest(2, 1), 2), fds).ok());
    Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(1000));
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
  }
  EXPECT_EQ(OpenMemfds("flatcake-extra"), 1);
}

TEST(UnixSocketTest, LargeFramesCrossInPieces) {
  // Far more than a socket buffer holds: both sides loop over partial sends and reads.
  SocketPair pair = MakePair();
  const rpc::Request request = LookupRequest(3, kMaxBatchKeys);  // 1 MiB of keys
  rpc::Response reply;
  reply.set_id(3);
  reply.mutable_error()->set_code(rpc::CODE_IO_ERROR);
  reply.mutable_error()->set_message(std::string(12 << 20, 'm'));
  std::thread sender([&] {
    EXPECT_TRUE(SendFrame(pair.a.get(), Frame(request), {}, milliseconds(10000)).ok());
    EXPECT_TRUE(SendFrame(pair.a.get(), Frame(reply), {}, milliseconds(10000)).ok());
  });
  Result<ReceivedFrame> first = RecvFrame(pair.b.get(), kRequestFrameLimits, milliseconds(10000));
  Result<ReceivedFrame> second = RecvFrame(pair.b.get(), {}, milliseconds(10000));
  sender.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  Result<rpc::Request> req = ParseRequest(first->payload);
  Result<rpc::Response> rep = ParseResponse(second->payload);
  ASSERT_TRUE(req.ok() && rep.ok());
  EXPECT_EQ(req->lookup().keys().size(), kMaxBatchKeys * 16u);
  EXPECT_EQ(rep->error().message().size(), 12u << 20);
}

TEST(UnixSocketTest, EndOfStreamBetweenAndInsideFrames) {
  {
    SocketPair pair = MakePair();
    pair.a.reset();
    Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(1000));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kAborted) << got.status().ToString();
  }
  const std::vector<uint8_t> frame = Frame(LookupRequest(4, 4));
  for (size_t cut : {size_t{5}, kFrameHeaderBytes, frame.size() - 1}) {
    SocketPair pair = MakePair();
    ASSERT_TRUE(TEST_SendBytes(pair.a.get(), std::span(frame.data(), cut), {}).ok());
    pair.a.reset();
    Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(1000));
    ASSERT_FALSE(got.ok()) << cut;
    EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
  }
}

TEST(UnixSocketTest, BadHeadersAreRefusedBeforeThePayload) {
  SocketPair pair = MakePair();
  // A header announcing 4 GiB, and nothing behind it: refused at once, nothing allocated.
  std::vector<uint8_t> header(kFrameHeaderBytes);
  EncodeFrameHeader({kProtocolVersion, 0, UINT32_MAX},
                    std::span<uint8_t, kFrameHeaderBytes>(header.data(), kFrameHeaderBytes));
  ASSERT_TRUE(TEST_SendBytes(pair.a.get(), header, {}).ok());
  Result<ReceivedFrame> got = RecvFrame(pair.b.get(), kRequestFrameLimits, milliseconds(1000));
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsInvalidArgument()) << got.status().ToString();

  const std::string garbage = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(TEST_SendBytes(
                  pair.a.get(),
                  std::span(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size()), {})
                  .ok());
  got = RecvFrame(pair.b.get(), kRequestFrameLimits, milliseconds(1000));
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCorruption()) << got.status().ToString();
}

TEST(UnixSocketTest, TimeoutsRunOut) {
  SocketPair pair = MakePair();
  const auto start = std::chrono::steady_clock::now();
  Result<ReceivedFrame> got = RecvFrame(pair.b.get(), {}, milliseconds(50));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  // Nobody reads: a frame larger than the socket's buffers cannot be sent within the timeout.
  rpc::Response reply;
  reply.mutable_error()->set_message(std::string(8 << 20, 'm'));
  Status sent = SendFrame(pair.a.get(), Frame(reply), {}, milliseconds(50));
  EXPECT_EQ(sent.code(), StatusCode::kDeadlineExceeded) << sent.ToString();
}

std::atomic<int> g_signals{0};
void CountSignal(int) { g_signals.fetch_add(1); }

TEST(UnixSocketTest, SignalsDoNotInterruptAWait) {
  // A handler without SA_RESTART: poll and recvmsg fail with EINTR, which must be retried.
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = CountSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  ASSERT_EQ(::sigaction(SIGUSR1, &action, &previous), 0);
  SocketPair pair = MakePair();
  Result<ReceivedFrame> got = Status::Aborted("not run");
  std::atomic<bool> waiting{false};
  std::thread receiver([&] {
    waiting = true;
    got = RecvFrame(pair.b.get(), {}, milliseconds(5000));
  });
  while (!waiting) std::this_thread::yield();
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(milliseconds(20));
    ::pthread_kill(receiver.native_handle(), SIGUSR1);
  }
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(SendFrame(pair.a.get(), Frame(LookupRequest(5, 2))).ok());
  receiver.join();
  ::sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_GT(g_signals.load(), 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->payload.size(), LookupRequest(5, 2).ByteSizeLong());
}

TEST(UnixSocketTest, SendingToAClosedPeerIsAbortedWithoutSigpipe) {
  SocketPair pair = MakePair();
  pair.b.reset();
  // Without MSG_NOSIGNAL the default SIGPIPE action would end the test binary here.
  Status sent = SendFrame(pair.a.get(), Frame(LookupRequest(6, 1)));
  EXPECT_EQ(sent.code(), StatusCode::kAborted) << sent.ToString();
}

TEST(UnixSocketTest, PeerCredentialsAreOurOwn) {
  SocketPair pair = MakePair();
  Result<PeerCredentials> cred = GetPeerCredentials(pair.b.get());
  ASSERT_TRUE(cred.ok()) << cred.status().ToString();
  EXPECT_EQ(cred->pid, ::getpid());
  EXPECT_EQ(cred->uid, ::geteuid());
  EXPECT_EQ(cred->gid, ::getegid());
  EXPECT_TRUE(CheckPeer(*cred, PeerAllowList::OwnUid()).ok());
}

TEST(UnixSocketTest, AllowListAdmitsListedUidsAndGidsOnly) {
  const PeerCredentials stranger{1234, ::geteuid() + 1, ::getegid() + 1};
  Status denied = CheckPeer(stranger, PeerAllowList::OwnUid());
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("pid 1234"), std::string_view::npos) << denied.ToString();
  EXPECT_EQ(CheckPeer(stranger, PeerAllowList{}).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckPeer(stranger, PeerAllowList{{stranger.uid}, {}}).ok());
  EXPECT_TRUE(CheckPeer(stranger, PeerAllowList{{::geteuid()}, {stranger.gid}}).ok());
  const PeerCredentials root{1, 0, 0};
  EXPECT_EQ(CheckPeer(root, PeerAllowList{{::geteuid() == 0 ? 1u : ::geteuid()}, {}}).code(),
            StatusCode::kPermissionDenied);
}

class ListenerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  std::string Path() const { return dir_.File("flatcake.sock"); }

  TempDir dir_{"flatcake-serve-test"};
};

TEST_F(ListenerTest, AcceptsAndBothEndsSeeEachOthersCredentials) {
  Result<UnixListener> listener = UnixListener::Listen(Path());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(Path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  Result<UniqueFd> client = ConnectUnix(Path(), milliseconds(1000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Result<UniqueFd> server = listener->Accept(milliseconds(1000));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (int fd : {client->get(), server->get()}) {
    Result<PeerCredentials> cred = GetPeerCredentials(fd);
    ASSERT_TRUE(cred.ok());
    EXPECT_EQ(cred->pid, ::getpid());
    EXPECT_EQ(cred->uid, ::geteuid());
  }
  ASSERT_TRUE(SendFrame(client->get(), Frame(LookupRequest(7, 3))).ok());
  Result<ReceivedFrame> got = RecvFrame(server->get(), kRequestFrameLimits, milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
}

TEST_F(ListenerTest, AcceptTimesOut) {
  Result<UnixListener> listener = UnixListener::Listen(Path());
  ASSERT_TRUE(listener.ok());
  Result<UniqueFd> none = listener->Accept(milliseconds(30));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ListenerTest, ALiveSocketIsRefused) {
  Result<UnixListener> first = UnixListener::Listen(Path());
  ASSERT_TRUE(first.ok());
  Result<UnixListener> second = UnixListener::Listen(Path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy) << second.status().ToString();
  // The first still serves.
  Result<UniqueFd> client = ConnectUnix(Path());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(first->Accept(milliseconds(1000)).ok());
}

TEST_F(ListenerTest, AStaleSocketIsReclaimed) {
  // A server that died: its socket file stays, nobody listens on it.
  {
    UniqueFd dead(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, Path().data(), Path().size());
    ASSERT_EQ(::bind(dead.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::listen(dead.get(), 1), 0);
  }
  ASSERT_TRUE(std::filesystem::exists(Path()));
  Result<UniqueFd> refused = ConnectUnix(Path());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsIOError()) << refused.status().ToString();

  Result<UnixListener> listener = UnixListener::Listen(Path());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  Result<UniqueFd> client = ConnectUnix(Path());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE(listener->Accept(milliseconds(1000)).ok());
}

TEST_F(ListenerTest, OtherFilesAndLongPathsAreRefused) {
  { std::ofstream(Path()) << "not a socket"; }
  Result<UnixListener> over_file = UnixListener::Listen(Path());
  ASSERT_FALSE(over_file.ok());
  EXPECT_TRUE(over_file.status().IsInvalidArgument()) << over_file.status().ToString();
  EXPECT_TRUE(std::filesystem::is_regular_file(Path()));  // left alone

  const std::string long_path = dir_.File(std::string(120, 'x'));
  Result<UnixListener> too_long = UnixListener::Listen(long_path);
  ASSERT_FALSE(too_long.ok());
  EXPECT_TRUE(too_long.status().IsInvalidArgument());
  EXPECT_TRUE(ConnectUnix(long_path).status().IsInvalidArgument());
  EXPECT_TRUE(ConnectUnix(dir_.File("absent.sock")).status().IsNotFound());
}

TEST_F(ListenerTest, DestructionRemovesOnlyItsOwnSocket) {
  {
    Result<UnixListener> listener = UnixListener::Listen(Path());
    ASSERT_TRUE(listener.ok());
    UnixListener moved = std::move(*listener);  // the moved-from one removes nothing
    EXPECT_TRUE(std::filesystem::exists(Path()));
  }
  EXPECT_FALSE(std::filesystem::exists(Path()));

  // A listener whose path was taken over by a successor leaves the successor's socket.
  Result<UnixListener> old_one = UnixListener::Listen(Path());
  ASSERT_TRUE(old_one.ok());
  ASSERT_EQ(::unlink(Path().c_str()), 0);
  Result<UnixListener> successor = UnixListener::Listen(Path());
  ASSERT_TRUE(successor.ok());
  { UnixListener gone = std::move(*old_one); }
  EXPECT_TRUE(std::filesystem::exists(Path()));
  EXPECT_TRUE(ConnectUnix(Path()).ok());
}

}  // namespace
}  // namespace flatcake::serve
