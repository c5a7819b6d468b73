#include "util/file_mode.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace flatcake {
namespace {

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

Status RestrictFileMode(int fd, mode_t allowed, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + what);
  const mode_t mode = st.st_mode & 07777;
  if ((mode & ~allowed) == 0) return Status::OK();
  if (::fchmod(fd, mode & allowed) != 0) {
    return Status::PermissionDenied(what + " has mode " + Octal(mode) + ", looser than " +
                                    Octal(allowed) + " (others could read every tenant's KV), " +
                                    "and cannot be tightened: " + std::strerror(errno) +
                                    "; chmod it to " + Octal(allowed) + " or remove it");
  }
  return Status::OK();
}

}  // namespace flatcake
