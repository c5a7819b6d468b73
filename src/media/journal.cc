#include "media/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "media/metadata_faults.h"
#include "util/file_mode.h"

namespace flatcake {
namespace {

Status WriteAll(int fd, const uint8_t* p, size_t n, uint64_t offset) {
  if (const int err = MetadataFault(MetadataOp::kJournalWrite)) {
    return Status::FromErrno(err, "journal write");
  }
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "journal write");
    }
    if (w == 0) return Status::IOError("journal write made no progress");
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::OK();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, kOwnerOnlyFileMode);
  if (fd < 0) return Status::FromErrno(errno, "open journal '" + path + "'");
  std::unique_ptr<Journal> j(new Journal(path, fd));
  // The journal names every tenant's keys and sessions: the owner's only, whatever it had.
  FC_RETURN_IF_ERROR(RestrictFileMode(fd, kOwnerOnlyFileMode, "journal '" + path + "'"));
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat journal '" + path + "'");
  j->image_.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < j->image_.size()) {
    const ssize_t r =
        pread(fd, j->image_.data() + got, j->image_.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "read journal '" + path + "'");
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  j->image_.resize(got);
  MutexLock lock(j->mu_);
  j->size_ = got;
  j->synced_ = got;
  return j;
}

Journal::~Journal() {
  MutexLock lock(mu_);
  if (fd_ >= 0) close(fd_);
}

Status Journal::Append(const std::function<std::vector<uint8_t>(uint64_t seq)>& encode) {
  MutexLock lock(mu_);
  const std::vector<uint8_t> rec = encode(next_seq_);
  Status st = WriteAll(fd_, rec.data(), rec.size(), size_);
  if (!st.ok()) {
    if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      return st.WithContext("and cutting the torn record back failed too");
    }
    return st;
  }
  size_ += rec.size();
  next_seq_++;
  return Status::OK();
}

Status Journal::Sync() {
  MutexLock lock(mu_);
  if (const int err = MetadataFault(MetadataOp::kJournalSync)) {
    return Status::FromErrno(err, "journal fdatasync");
  }
  if (fdatasync(fd_) != 0) return Status::FromErrno(errno, "journal fdatasync");
  synced_ = size_;
  return Status::OK();
}

Status Journal::Rewrite(const std::function<std::vector<uint8_t>(uint64_t* seq)>& records) {
  MutexLock lock(mu_);
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, kOwnerOnlyFileMode);
  if (fd < 0) return Status::FromErrno(errno, "create '" + tmp + "'");
  uint64_t seq = next_seq_;
  const std::vector<uint8_t> bytes = records(&seq);
  Status st = WriteAll(fd, bytes.data(), bytes.size(), 0);
  if (const int err = st.ok() ? MetadataFault(MetadataOp::kJournalSync) : 0) {
    st = Status::FromErrno(err, "fdatasync '" + tmp + "'");
  }
  if (st.ok() && fdatasync(fd) != 0) st = Status::FromErrno(errno, "fdatasync '" + tmp + "'");
  if (st.ok() && rename(tmp.c_str(), path_.c_str()) != 0) {
    st = Status::FromErrno(errno, "rename '" + tmp + "'");
  }
  if (!st.ok()) {
    close(fd);
    unlink(tmp.c_str());
    return st.WithContext("journal rewrite");
  }
  const int dfd = ::open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);  // the rename itself
    close(dfd);
  }
  close(fd_);
  fd_ = fd;
  size_ = bytes.size();
  synced_ = size_;
  next_seq_ = seq;
  return Status::OK();
}

void Journal::SetNextSeq(uint64_t seq) {
  MutexLock lock(mu_);
  next_seq_ = seq;
}

uint64_t Journal::synced_bytes() const {
  MutexLock lock(mu_);
  return synced_;
}

uint64_t Journal::bytes() const {
  MutexLock lock(mu_);
  return size_;
}

}  // namespace flatcake
