#include "serve/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/unique_fd.h"

namespace flatcake::serve {

Status NotifyServiceManager(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || env[0] == '\0') return Status::OK();
  const std::string_view name(env);
  if (name[0] != '/' && name[0] != '@') {
    return Status::Unsupported("NOTIFY_SOCKET=" + std::string(name) +
                               " is neither a socket path nor an abstract name");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("NOTIFY_SOCKET=" + std::string(name) + " is too long");
  }
  std::memcpy(addr.sun_path, name.data(), name.size());
  if (name[0] == '@') addr.sun_path[0] = '\0';  // abstract: the name's bytes, no terminator
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket for NOTIFY_SOCKET");
  if (::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&addr), len) < 0) {
    return Status::FromErrno(errno, "notifying NOTIFY_SOCKET=" + std::string(name));
  }
  return Status::OK();
}

}  // namespace flatcake::serve
