#include "cluster/etcd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "cluster/etcd_client.h"
#include "util/unique_fd.h"

namespace flatcake::cluster {

Result<uint16_t> FreePort(const std::string& host) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("'" + host + "' is not an IPv4 address");
  }
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno(errno, "bind " + host + ":0");
  }
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno(errno, "getsockname");
  }
  return ntohs(addr.sin_port);
}

EtcdProcess::EtcdProcess(std::string binary, std::string host, uint16_t client_port,
                         uint16_t peer_port)
    : binary_(std::move(binary)),
      host_(std::move(host)),
      client_port_(client_port),
      peer_port_(peer_port) {}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::string& binary,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& host) {
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a free port can be taken before etcd binds
    FC_ASSIGN_OR_RETURN(const uint16_t client, FreePort(host));
    FC_ASSIGN_OR_RETURN(const uint16_t peer, FreeLoopbackPort());
    if (client == peer) continue;
    std::unique_ptr<EtcdProcess> p(new EtcdProcess(binary, host, client, peer));
    if (!p->dir_.ok()) return Status::IOError("cannot create a data directory for etcd");
    last = p->Launch(timeout);
    if (last.ok()) return p;
    if (last.code() == StatusCode::kNotFound) return last;
  }
  return last;
}

EtcdProcess::~EtcdProcess() { Kill(); }

std::string EtcdProcess::client_url() const {
  return "http://" + host_ + ":" + std::to_string(client_port_);
}

std::string EtcdProcess::LogTail() const {
  std::ifstream in(dir_.File("etcd.log"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > 600 ? all.substr(all.size() - 600) : all;
}

Status EtcdProcess::Launch(std::chrono::milliseconds timeout) {
  const std::string client = client_url();
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  std::vector<std::string> args = {binary_,
                                   "--name",
                                   "flatcake-test",
                                   "--data-dir",
                                   dir_.File("data"),
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   "flatcake-test=" + peer,
                                   "--log-level",
                                   "warn"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_.File("etcd.log");
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    // Dies with its owner: a test or bench killed before its destructor leaves no etcd behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execvp(argv[0], argv.data());
    const int err = errno;
    (void)!::write(ready[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(ready[1]);
  int exec_errno = 0;
  const ssize_t got = ::read(ready[0], &exec_errno, sizeof(exec_errno));
  ::close(ready[0]);
  if (got == sizeof(exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    if (exec_errno == ENOENT) {
      return Status::NotFound("etcd binary '" + binary_ +
                              "' not found (install Debian's etcd-server)");
    }
    return Status::FromErrno(exec_errno, "exec " + binary_);
  }
  pid_ = pid;
  EtcdClient probe({serve::HostPort{host_, client_port_}}, std::chrono::milliseconds(500));
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (probe.Get("/flatcake-probe").ok()) return Status::OK();
    int wstatus = 0;
    if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::IOError("etcd exited at start: " + LogTail());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Kill();
  return Status::IOError("etcd did not answer within " + std::to_string(timeout.count()) +
                         " ms: " + LogTail());
}

void EtcdProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void EtcdProcess::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Kill();
}

Status EtcdProcess::Restart(std::chrono::milliseconds timeout) {
  if (pid_ > 0) return Status::OK();
  return Launch(timeout);
}

}  // namespace flatcake::cluster
