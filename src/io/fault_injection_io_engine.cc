#include "io/fault_injection_io_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "util/aligned_buffer.h"

namespace flatcake {
namespace {

// Completes a shortened op: passes a real error through, otherwise replaces success with the
// injected fault. Deletes itself after its single completion. For a vectored op it also owns the
// truncated iovec list the shortened op points at, which must outlive the op.
class ShortOpSink : public IoCompletionSink {
 public:
  ShortOpSink(IoCompletionSink* user, Status fault) : user_(user), fault_(std::move(fault)) {}
  std::vector<iovec> iov;
  void OnIoComplete(uint64_t tag, const Status& status) override {
    IoCompletionSink* user = user_;
    Status out = status.ok() ? fault_ : status;
    delete this;
    user->OnIoComplete(tag, out);
  }

 private:
  IoCompletionSink* user_;
  Status fault_;
};

}  // namespace

void FaultInjectionIoEngine::SetReadError(int err, uint64_t every_nth) {
  FaultSpec spec;
  spec.err = err;
  spec.every_nth = every_nth;
  SetReadFault(spec);
}

void FaultInjectionIoEngine::SetWriteError(int err, uint64_t every_nth) {
  FaultSpec spec;
  spec.err = err;
  spec.every_nth = every_nth;
  SetWriteFault(spec);
}

void FaultInjectionIoEngine::SetReadFault(const FaultSpec& spec) {
  MutexLock lock(mu_);
  read_rule_ = Rule{spec};
}

void FaultInjectionIoEngine::SetWriteFault(const FaultSpec& spec) {
  MutexLock lock(mu_);
  write_rule_ = Rule{spec};
}

void FaultInjectionIoEngine::ClearReads() {
  MutexLock lock(mu_);
  read_rule_.reset();
}

void FaultInjectionIoEngine::ClearWrites() {
  MutexLock lock(mu_);
  write_rule_.reset();
}

void FaultInjectionIoEngine::Clear() {
  MutexLock lock(mu_);
  read_rule_.reset();
  write_rule_.reset();
}

FaultInjectionIoEngine::Counters FaultInjectionIoEngine::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

Status FaultInjectionIoEngine::RegisterFiles(std::span<const int> fds) {
  {
    MutexLock lock(mu_);
    fds_.assign(fds.begin(), fds.end());
  }
  return base_->RegisterFiles(fds);
}

void FaultInjectionIoEngine::StartWriteLog() {
  MutexLock lock(mu_);
  logging_ = true;
}

void FaultInjectionIoEngine::StopWriteLog() {
  MutexLock lock(mu_);
  logging_ = false;
  log_.clear();
}

void FaultInjectionIoEngine::ForgetWrites(std::optional<uint32_t> file) {
  MutexLock lock(mu_);
  std::erase_if(log_, [&](const LoggedWrite& w) { return !file || w.file == *file; });
}

std::vector<LoggedWrite> FaultInjectionIoEngine::UnsyncedWrites() const {
  MutexLock lock(mu_);
  return log_;
}

void FaultInjectionIoEngine::LogWrite(const IoOp& op) {
  int fd = -1;
  {
    MutexLock lock(mu_);
    if (!logging_) return;
    if (op.file < fds_.size()) fd = fds_[op.file];
  }
  LoggedWrite w;
  w.file = op.file;
  w.offset = op.offset;
  w.after.resize(op.len);
  if (op.vectored()) {
    uint64_t at = 0;
    for (uint32_t i = 0; i < op.iovcnt && at < op.len; ++i) {
      const uint64_t n = std::min<uint64_t>(op.iov[i].iov_len, op.len - at);
      std::memcpy(w.after.data() + at, op.iov[i].iov_base, n);
      at += n;
    }
  } else {
    std::memcpy(w.after.data(), op.buf, op.len);
  }
  // The old bytes, through an aligned buffer (the file may be open O_DIRECT; the store's writes
  // are aligned).
  Result<AlignedBuffer> old = AlignedBuffer::Allocate(op.len, {.alignment = 4096});
  if (fd >= 0 && old.ok()) {
    uint64_t got = 0;
    while (got < op.len) {
      const ssize_t r =
          ::pread(fd, old->data() + got, op.len - got, static_cast<off_t>(op.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<uint64_t>(r);
    }
    if (got == op.len) w.before.assign(old->data(), old->data() + op.len);
  }
  MutexLock lock(mu_);
  if (logging_) log_.push_back(std::move(w));
}

std::optional<FaultSpec> FaultInjectionIoEngine::Pick(const IoOp& op) {
  MutexLock lock(mu_);
  const bool read = op.opcode == IoOpcode::kRead;
  std::optional<Rule>& rule = read ? read_rule_ : write_rule_;
  if (!rule) return std::nullopt;
  const FaultSpec& spec = rule->spec;
  if (spec.file && *spec.file != op.file) return std::nullopt;
  const uint64_t end = op.offset + op.len;
  if (end <= spec.range_begin || op.offset >= spec.range_end) return std::nullopt;
  if (rule->injected >= spec.max_faults) return std::nullopt;
  const uint64_t nth = spec.every_nth == 0 ? 1 : spec.every_nth;
  if (++rule->seen % nth != 0) return std::nullopt;
  ++rule->injected;
  if (spec.kind == FaultSpec::Kind::kError) {
    ++(read ? counters_.read_errors : counters_.write_errors);
  } else {
    ++(read ? counters_.short_reads : counters_.torn_writes);
  }
  return spec;
}

void FaultInjectionIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  std::vector<IoOp> pass;
  pass.reserve(ops.size());
  for (const IoOp& op : ops) {
    std::optional<FaultSpec> fault = Pick(op);
    if (!fault) {
      if (op.opcode == IoOpcode::kWrite) LogWrite(op);
      pass.push_back(op);
      continue;
    }
    if (Status bad = CheckIoVecs(op); !bad.ok()) {
      sink->OnIoComplete(op.tag, bad);
      continue;
    }
    if (fault->kind == FaultSpec::Kind::kError) {
      sink->OnIoComplete(op.tag, IoErrnoStatus(op, 0, fault->err));
      continue;
    }
    uint64_t prefix = fault->prefix_bytes ? *fault->prefix_bytes : (op.len / 2) & ~uint64_t{4095};
    prefix = std::min(prefix, op.len == 0 ? 0 : op.len - 1);  // always leave something missing
    Status injected = op.opcode == IoOpcode::kRead ? IoEofStatus(op, prefix)
                                                   : IoErrnoStatus(op, prefix, fault->err);
    if (prefix == 0) {
      sink->OnIoComplete(op.tag, injected);
      continue;
    }
    IoOp head = op;
    head.len = prefix;
    auto* short_sink = new ShortOpSink(sink, std::move(injected));
    if (op.vectored()) {
      // The same list cut after `prefix` bytes: the prefix lands in the iovecs it belongs to.
      short_sink->iov.resize(op.iovcnt);
      head.iovcnt = IoVecRemainder(op, 0, prefix, short_sink->iov.data(), op.iovcnt);
      head.iov = short_sink->iov.data();
    }
    if (op.opcode == IoOpcode::kWrite) LogWrite(head);
    base_->Submit(std::span<const IoOp>(&head, 1), short_sink);
  }
  if (!pass.empty()) base_->Submit(pass, sink);
}

}  // namespace flatcake
