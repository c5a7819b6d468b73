// NotifyServiceManager against a datagram socket playing systemd's: at a path and at an abstract
// name, nothing without NOTIFY_SOCKET, and the forms it does not speak refused.
#include "serve/service_notify.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "util/temp_dir.h"
#include "util/unique_fd.h"

namespace flatcake::serve {
namespace {

// A datagram socket bound to `name` ("/path" or "@abstract"), as the service manager's.
UniqueFd Bind(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), name.size());
  if (name[0] == '@') addr.sun_path[0] = '\0';
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) return UniqueFd();
  return fd;
}

// The next datagram within a second; empty when none came.
std::string Receive(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) return "";
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

class NotifyTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("NOTIFY_SOCKET"); }
};

TEST_F(NotifyTest, SendsOneDatagramToAPath) {
  TempDir dir("notify");
  const std::string path = dir.File("notify.sock");
  UniqueFd manager = Bind(path);
  ASSERT_TRUE(manager.valid());
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ASSERT_TRUE(NotifyServiceManager("READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(Receive(manager.get()), "READY=1\nSTATUS=serving");
  ASSERT_TRUE(NotifyServiceManager("STOPPING=1").ok());
  EXPECT_EQ(Receive(manager.get()), "STOPPING=1");
}

TEST_F(NotifyTest, SendsToAnAbstractName) {
  const std::string name = "@flatcake-notify-test-" + std::to_string(::getpid());
  UniqueFd manager = Bind(name);
  ASSERT_TRUE(manager.valid());
  ::setenv("NOTIFY_SOCKET", name.c_str(), 1);
  ASSERT_TRUE(NotifyServiceManager("READY=1").ok());
  EXPECT_EQ(Receive(manager.get()), "READY=1");
}

TEST_F(NotifyTest, WithoutTheVariableSendsNothing) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
  ::setenv("NOTIFY_SOCKET", "", 1);
  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
}

TEST_F(NotifyTest, RefusesWhatItCannotReach) {
  ::setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
  EXPECT_EQ(NotifyServiceManager("READY=1").code(), StatusCode::kUnsupported);
  ::setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1);
  EXPECT_EQ(NotifyServiceManager("READY=1").code(), StatusCode::kInvalidArgument);
  TempDir dir("notify");
  ::setenv("NOTIFY_SOCKET", dir.File("nobody-listens").c_str(), 1);
  EXPECT_FALSE(NotifyServiceManager("READY=1").ok());
}

}  // namespace
}  // namespace flatcake::serve
