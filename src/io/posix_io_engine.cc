#include "io/posix_io_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace flatcake {

namespace {

// Accounts for one pread/pwrite(v) result `r` of `op` with `*done` bytes already moved. Returns
// OK and advances *done, OK without advancing for an interrupted call (retry), or the error:
// a 0-byte read is end of file, and a 0-byte write means the device accepted nothing, treated
// like a full medium.
Status Advance(const IoOp& op, ssize_t r, uint64_t* done) {
  if (r < 0) {
    if (errno == EINTR || errno == EAGAIN) return Status::OK();
    return IoErrnoStatus(op, *done, errno);
  }
  if (r == 0) {
    if (op.opcode == IoOpcode::kWrite) return IoErrnoStatus(op, *done, ENOSPC);
    return IoEofStatus(op, *done);
  }
  *done += static_cast<uint64_t>(r);
  return Status::OK();
}

// The vectored form of TransferSync: preadv/pwritev over the op's iovec list, continuing a short
// transfer from the iovec (and byte within it) where it stopped.
Status TransferVectored(int fd, const IoOp& op, uint64_t cap) {
  FC_RETURN_IF_ERROR(CheckIoVecs(op));
  std::vector<iovec> rest;  // only for continuations and over-long lists
  uint64_t done = 0;
  while (done < op.len) {
    const iovec* v = op.iov;
    uint32_t cnt = op.iovcnt;
    if (done > 0 || cnt > kMaxIoVecs || op.len > cap) {
      rest.resize(std::min(op.iovcnt, kMaxIoVecs));
      cnt = IoVecRemainder(op, done, cap, rest.data(), static_cast<uint32_t>(rest.size()));
      v = rest.data();
    }
    const off_t off = static_cast<off_t>(op.offset + done);
    const ssize_t r = op.opcode == IoOpcode::kRead ? ::preadv(fd, v, static_cast<int>(cnt), off)
                                                   : ::pwritev(fd, v, static_cast<int>(cnt), off);
    FC_RETURN_IF_ERROR(Advance(op, r, &done));
  }
  return Status::OK();
}

}  // namespace

Status TransferSync(int fd, const IoOp& op, uint64_t max_chunk) {
  if (op.vectored()) return TransferVectored(fd, op, max_chunk == 0 ? (1ull << 30) : max_chunk);
  auto* p = static_cast<uint8_t*>(op.buf);
  uint64_t done = 0;
  // Linux moves at most ~2 GiB per call anyway; capping keeps the size_t arithmetic obvious.
  const uint64_t cap = max_chunk == 0 ? (1ull << 30) : max_chunk;
  while (done < op.len) {
    const size_t n = static_cast<size_t>(std::min(op.len - done, cap));
    const off_t off = static_cast<off_t>(op.offset + done);
    const ssize_t r = op.opcode == IoOpcode::kRead ? ::pread(fd, p + done, n, off)
                                                   : ::pwrite(fd, p + done, n, off);
    FC_RETURN_IF_ERROR(Advance(op, r, &done));
  }
  return Status::OK();
}

Status PosixIoEngine::RegisterFiles(std::span<const int> fds) {
  fds_.assign(fds.begin(), fds.end());
  return Status::OK();
}

void PosixIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  for (const IoOp& op : ops) {
    if (op.file >= fds_.size() || fds_[op.file] < 0) {
      sink->OnIoComplete(op.tag, IoBadFileStatus(op, fds_.size()));
      continue;
    }
    sink->OnIoComplete(op.tag, TransferSync(fds_[op.file], op, max_chunk_));
  }
}

}  // namespace flatcake
