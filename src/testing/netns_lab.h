// NetnsLab: network namespaces of a test's own, each joined to a bridge in the test's namespace by
// one veth link, so that cluster tests run their daemons as separate hosts whose links can be cut.
//
// Made with `ip` (iproute2) and removed on destruction: namespace k is "fcn<tag>-k", its end of
// the link "fcv<tag>-k" (inside it) and "fch<tag>-k" (on the bridge "fcb<tag>"), the tag being the
// pid and a letter per lab, on a /24 of
// 10.213.0.0/16 that no interface here uses: the bridge is .1, namespace k is .(k + 2). Nothing is
// routed beyond the bridge: the namespaces reach each other and the test's namespace, nothing
// else. What a killed test left behind (names of a pid that no longer runs) is removed first.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); Create says why when it cannot, and the caller
// runs on loopback instead. UCX in the namespaces is told to use TCP over the link (Exec), as the
// test's own workers must be (UcxEnvironment): shared memory would cross a cut link.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::testing {

class NetnsLab {
 public:
  static Result<std::unique_ptr<NetnsLab>> Create(int hosts) {
    if (::geteuid() != 0) return Status::PermissionDenied("network namespaces need root");
    if (IpBinary().empty()) return Status::NotFound("no ip binary (install iproute2)");
    RemoveStale();
    std::unique_ptr<NetnsLab> lab(new NetnsLab(hosts));
    if (Status st = lab->Build(); !st.ok()) return st;
    return lab;
  }

  ~NetnsLab() {
    for (int k = 0; k < hosts_; ++k) (void)Ip({"netns", "del", Namespace(k)});
    (void)Ip({"link", "del", bridge_});
  }
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  int hosts() const { return hosts_; }
  const std::string& bridge() const { return bridge_; }
  // The test's namespace's address on the bridge, and namespace k's.
  std::string host_address() const { return subnet_ + ".1"; }
  std::string address(int k) const { return subnet_ + "." + std::to_string(k + 2); }
  std::string Namespace(int k) const { return "fcn" + tag_ + "-" + std::to_string(k); }
  std::string Device(int k) const { return "fcv" + tag_ + "-" + std::to_string(k); }

  // The argv prefix that runs a command in namespace k with UCX on TCP over its link.
  std::vector<std::string> Exec(int k) const {
    return {IpBinary(),
            "netns",
            "exec",
            Namespace(k),
            "/usr/bin/env",
            "UCX_TLS=tcp",
            "UCX_NET_DEVICES=" + Device(k)};
  }

  // Cuts namespace k's link (its bridge end goes down: nothing passes either way) and heals it.
  Status Cut(int k) { return Ip({"link", "set", HostEnd(k), "down"}); }
  Status Heal(int k) { return Ip({"link", "set", HostEnd(k), "up"}); }

 private:
  // The tag is the pid and a letter per lab of this process: a lab's links are deleted
  // asynchronously, so the next one must not reuse their names.
  explicit NetnsLab(int hosts)
      : hosts_(hosts), tag_(std::to_string(::getpid()) + NextLetter()), bridge_("fcb" + tag_) {}

  static char NextLetter() {
    static int n = 0;
    return static_cast<char>('a' + n++ % 26);
  }

  std::string HostEnd(int k) const { return "fch" + tag_ + "-" + std::to_string(k); }

  Status Build() {
    subnet_ = FreeSubnet();
    if (subnet_.empty()) return Status::Unsupported("no free /24 in 10.213.0.0/16");
    if (Status st = Ip({"link", "add", bridge_, "type", "bridge"}); !st.ok()) return st;
    FC_RETURN_IF_ERROR(Ip({"addr", "add", host_address() + "/24", "dev", bridge_}));
    FC_RETURN_IF_ERROR(Ip({"link", "set", bridge_, "up"}));
    for (int k = 0; k < hosts_; ++k) {
      const std::string ns = Namespace(k);
      FC_RETURN_IF_ERROR(Ip({"netns", "add", ns}));
      FC_RETURN_IF_ERROR(
          Ip({"link", "add", HostEnd(k), "type", "veth", "peer", "name", Device(k)}));
      FC_RETURN_IF_ERROR(Ip({"link", "set", Device(k), "netns", ns}));
      FC_RETURN_IF_ERROR(Ip({"link", "set", HostEnd(k), "master", bridge_, "up"}));
      FC_RETURN_IF_ERROR(Ip({"-n", ns, "addr", "add", address(k) + "/24", "dev", Device(k)}));
      FC_RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", Device(k), "up"}));
      FC_RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}));
    }
    return Status::OK();
  }

  // iproute2's `ip`, by its full path (a child started with execv does not search PATH).
  static std::string IpBinary() {
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(path, X_OK) == 0) return path;
    }
    return "";
  }

  // `ip args...`, quietly; its exit status as a Status.
  static Status Ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {IpBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return Status::IOError("fork");
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
    std::string cmd;
    for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    return Status::Unsupported("'" + cmd + "' failed");
  }

  // `ip` output lines, for the scans below.
  static std::string IpOutput(const std::string& args) {
    std::string out;
    if (FILE* p = ::popen((IpBinary() + " " + args + " 2>/dev/null").c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
      ::pclose(p);
    }
    return out;
  }

  static std::string FreeSubnet() {
    const std::string used = IpOutput("-4 addr") + IpOutput("-4 route");
    const int start = ::getpid() % 250;
    for (int i = 0; i < 250; ++i) {
      const std::string subnet = "10.213." + std::to_string((start + i) % 250);
      if (used.find(subnet + ".") == std::string::npos) return subnet;
    }
    return "";
  }

  // Namespaces and bridges of test processes that are gone.
  static void RemoveStale() {
    std::set<std::string> dead;
    if (DIR* d = ::opendir("/run/netns")) {
      while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind("fcn", 0) != 0) continue;
        const std::string tag = name.substr(3, name.find('-') - 3);  // pid and letter
        const std::string pid = tag.substr(0, tag.size() - 1);
        if (::access(("/proc/" + pid).c_str(), F_OK) != 0) {
          (void)Ip({"netns", "del", name});
          dead.insert(tag);
        }
      }
      ::closedir(d);
    }
    for (const std::string& tag : dead) (void)Ip({"link", "del", "fcb" + tag});
  }

  const int hosts_;
  const std::string tag_;
  const std::string bridge_;
  std::string subnet_;
};

// Sets UCX's transport and device for the workers this process creates from now on (UCX reads
// its environment when a context is made) and puts the old values back when it goes.
class UcxEnvironment {
 public:
  UcxEnvironment(const std::string& tls, const std::string& devices) {
    Save("UCX_TLS", tls);
    Save("UCX_NET_DEVICES", devices);
  }
  ~UcxEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value.has) {
        ::setenv(name.c_str(), value.text.c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  UcxEnvironment(const UcxEnvironment&) = delete;
  UcxEnvironment& operator=(const UcxEnvironment&) = delete;

 private:
  struct Old {
    bool has = false;
    std::string text;
  };
  void Save(const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, Old{old != nullptr, old != nullptr ? old : ""});
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<std::pair<std::string, Old>> saved_;
};

}  // namespace flatcake::testing
