// EtcdProcess: a private one-member etcd on loopback, for the tests and `flatcake bench cluster`:
// Debian's etcd binary started on free 127.0.0.1 ports (or on an address of the caller's, such as
// a test's own bridge between network namespaces) with a temporary data directory, stopped
// (SIGTERM, then SIGKILL) and its directory removed on destruction, and killed by the kernel
// when the thread that started it exits (PR_SET_PDEATHSIG), so a killed owner leaves none behind.
// Stop and Restart keep the data directory and ports, as an etcd outage and recovery would.
//
// Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "flatcake/status.h"
#include "util/temp_dir.h"

namespace flatcake::cluster {

class EtcdProcess {
 public:
  // Starts `binary` ("etcd": found on PATH) serving clients on `host` (an IPv4 address of this
  // machine) and waits until it answers (at most `timeout`). NotFound when the binary is missing
  // (install Debian's etcd-server), IOError when it does not come up (its log's tail in the
  // message).
  static Result<std::unique_ptr<EtcdProcess>> Start(
      const std::string& binary = "etcd",
      std::chrono::milliseconds timeout = std::chrono::seconds(20),
      const std::string& host = "127.0.0.1");
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // http://HOST:PORT
  std::string client_url() const;
  uint16_t client_port() const { return client_port_; }
  bool running() const { return pid_ > 0; }

  // SIGKILL: an etcd that vanishes.
  void Kill();
  // SIGTERM and wait.
  void Stop();
  // Starts it again on the same ports and data.
  Status Restart(std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  EtcdProcess(std::string binary, std::string host, uint16_t client_port, uint16_t peer_port);
  Status Launch(std::chrono::milliseconds timeout);
  std::string LogTail() const;

  const std::string binary_;
  const std::string host_;
  TempDir dir_{"flatcake-etcd"};
  const uint16_t client_port_, peer_port_;
  pid_t pid_ = -1;
};

// A TCP port on `host` (an IPv4 address of this machine) that nothing listens on now (bound to 0
// and released).
Result<uint16_t> FreePort(const std::string& host);
inline Result<uint16_t> FreeLoopbackPort() { return FreePort("127.0.0.1"); }

}  // namespace flatcake::cluster
