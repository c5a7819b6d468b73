#include "io/fault_injection_io_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "util/aligned_buffer.h"

namespace flatcake {
namespace {

// Completes an op cut into parts (a short or torn transfer): once every part has completed,
// passes the first real error through, otherwise reports the injected outcome. Deletes itself
// after the last part. It owns what the parts point at and must outlive them: for a vectored op
// the truncated iovec list, for a torn write the garbage sector.
class PartialOpSink : public IoCompletionSink {
 public:
  PartialOpSink(IoCompletionSink* user, uint64_t tag, Status outcome, uint32_t parts)
      : user_(user), tag_(tag), outcome_(std::move(outcome)), pending_(parts) {}
  std::vector<iovec> iov;
  AlignedBuffer garbage;
  void OnIoComplete(uint64_t /*tag*/, const Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok() && error_.ok()) error_ = status;
      if (--pending_ > 0) return;
    }
    IoCompletionSink* user = user_;
    const uint64_t tag = tag_;
    Status out = error_.ok() ? outcome_ : error_;
    delete this;
    user->OnIoComplete(tag, out);
  }

 private:
  IoCompletionSink* const user_;
  const uint64_t tag_;
  const Status outcome_;
  std::mutex mu_;
  uint32_t pending_;
  Status error_;
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kSector = 4096;
constexpr std::array<std::string_view, kNumFaultKinds> kFaultKindNames = {
    "read_eio",    "short_read", "delayed_read",     "write_eio",    "write_enospc",
    "short_write", "torn_write", "torn_write_acked", "delayed_write"};

bool IsReadKind(FaultKind k) {
  return k == FaultKind::kReadEio || k == FaultKind::kShortRead || k == FaultKind::kDelayedRead;
}

}  // namespace

std::string_view FaultKindName(FaultKind kind) {
  return kFaultKindNames[static_cast<size_t>(kind)];
}

FaultInjectionIoEngine::~FaultInjectionIoEngine() {
  {
    MutexLock lock(mu_);
    stop_delay_ = true;
  }
  delay_cv_.NotifyAll();
  if (delay_thread_.joinable()) delay_thread_.join();
}

void FaultInjectionIoEngine::SetRandomFaults(const RandomFaults& faults) {
  MutexLock lock(mu_);
  random_ = faults;
}

void FaultInjectionIoEngine::ClearRandomFaults() {
  MutexLock lock(mu_);
  random_.reset();
}

void FaultInjectionIoEngine::SetEpoch(uint64_t epoch) {
  MutexLock lock(mu_);
  epoch_ = epoch;
  seen_.clear();
}

std::vector<InjectedFault> FaultInjectionIoEngine::TakeInjected() {
  MutexLock lock(mu_);
  return std::exchange(injected_, {});
}

std::array<uint64_t, kNumFaultKinds> FaultInjectionIoEngine::injected_by_kind() const {
  MutexLock lock(mu_);
  return by_kind_;
}

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

std::optional<std::pair<FaultKind, uint64_t>> FaultInjectionIoEngine::PickRandom(const IoOp& op) {
  MutexLock lock(mu_);
  if (!random_) return std::nullopt;
  const bool read = op.opcode == IoOpcode::kRead;
  const uint64_t nth =
      seen_[OpIdentity{static_cast<uint8_t>(op.opcode), op.file, op.offset, op.len}]++;
  uint64_t h = Mix(random_->seed ^ Mix(epoch_));
  h = Mix(h ^ (read ? 1 : 2));
  h = Mix(h ^ op.file);
  h = Mix(h ^ op.offset);
  h = Mix(h ^ op.len);
  h = Mix(h ^ nth);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  double at = 0;
  for (size_t k = 0; k < kNumFaultKinds; ++k) {
    const auto kind = static_cast<FaultKind>(k);
    if (IsReadKind(kind) != read) continue;
    at += random_->rate[k];
    if (u >= at) continue;
    by_kind_[k]++;
    injected_.push_back(InjectedFault{epoch_, kind, op.file, op.offset, op.len});
    return std::make_pair(kind, Mix(h ^ 0x5eed));
  }
  return std::nullopt;
}

void FaultInjectionIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  std::vector<IoOp> pass;
  pass.reserve(ops.size());
  for (const IoOp& op : ops) {
    std::optional<FaultSpec> fault = Pick(op);
    if (!fault) {
      if (auto random = PickRandom(op)) {
        Inject(random->first, op, sink, random->second);
        continue;
      }
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
    SubmitPrefix(op, sink, prefix, fault->err);
  }
  if (!pass.empty()) base_->Submit(pass, sink);
}

void FaultInjectionIoEngine::SubmitPrefix(const IoOp& op, IoCompletionSink* sink, uint64_t prefix,
                                          int err) {
  prefix = std::min(prefix, op.len == 0 ? 0 : op.len - 1);  // always leave something missing
  Status injected =
      op.opcode == IoOpcode::kRead ? IoEofStatus(op, prefix) : IoErrnoStatus(op, prefix, err);
  if (prefix == 0) {
    sink->OnIoComplete(op.tag, injected);
    return;
  }
  IoOp head = op;
  head.len = prefix;
  auto* part_sink = new PartialOpSink(sink, op.tag, std::move(injected), 1);
  if (op.vectored()) {
    // The same list cut after `prefix` bytes: the prefix lands in the iovecs it belongs to.
    part_sink->iov.resize(op.iovcnt);
    head.iovcnt = IoVecRemainder(op, 0, prefix, part_sink->iov.data(), op.iovcnt);
    head.iov = part_sink->iov.data();
  }
  if (op.opcode == IoOpcode::kWrite) LogWrite(head);
  base_->Submit(std::span<const IoOp>(&head, 1), part_sink);
}

void FaultInjectionIoEngine::Inject(FaultKind kind, const IoOp& op, IoCompletionSink* sink,
                                    uint64_t roll) {
  if (Status bad = CheckIoVecs(op); !bad.ok()) {
    sink->OnIoComplete(op.tag, bad);
    return;
  }
  // A 4 KiB-aligned prefix of 0 .. len - 1 bytes.
  const uint64_t sectors = (op.len + kSector - 1) / kSector;
  const uint64_t prefix = (roll % std::max<uint64_t>(sectors, 1)) * kSector;
  switch (kind) {
    case FaultKind::kReadEio:
    case FaultKind::kWriteEio: sink->OnIoComplete(op.tag, IoErrnoStatus(op, 0, EIO)); return;
    case FaultKind::kWriteEnospc: sink->OnIoComplete(op.tag, IoErrnoStatus(op, 0, ENOSPC)); return;
    case FaultKind::kShortRead:
    case FaultKind::kShortWrite:
      SubmitPrefix(op, sink, prefix, (roll >> 32) % 2 ? ENOSPC : EIO);
      return;
    case FaultKind::kTornWrite: Tear(op, sink, roll, IoErrnoStatus(op, 0, EIO)); return;
    case FaultKind::kTornWriteAcked: Tear(op, sink, roll, Status::OK()); return;
    case FaultKind::kDelayedRead:
    case FaultKind::kDelayedWrite: {
      uint32_t max_us;
      {
        MutexLock lock(mu_);
        max_us = random_ ? random_->max_delay_us : 1;
      }
      Hold(op, sink, 1 + (roll >> 16) % std::max<uint32_t>(max_us, 1));
      return;
    }
  }
}

void FaultInjectionIoEngine::Tear(const IoOp& op, IoCompletionSink* sink, uint64_t roll,
                                  Status result) {
  const uint64_t sectors = (op.len + kSector - 1) / kSector;
  Result<AlignedBuffer> garbage = AlignedBuffer::Allocate(kSector, {.alignment = kSector});
  if (op.vectored() || op.len % kSector != 0 || !garbage.ok()) {
    SubmitPrefix(op, sink, (roll % std::max<uint64_t>(sectors, 1)) * kSector, EIO);
    return;
  }
  for (uint64_t i = 0; i < kSector; i += 8) {
    const uint64_t g = Mix(roll ^ i);
    std::memcpy(garbage->data() + i, &g, 8);
  }
  // Each sector lands with probability 1/2; sector `bad` lands as garbage.
  const uint64_t bad = Mix(roll) % sectors;
  std::vector<IoOp> parts;
  for (uint64_t s = 0; s < sectors; ++s) {
    if (s != bad && (Mix(roll ^ (s + 1)) & 1) == 0) continue;
    IoOp part = op;
    part.offset = op.offset + s * kSector;
    part.len = kSector;
    part.buf = s == bad ? garbage->data() : static_cast<uint8_t*>(op.buf) + s * kSector;
    part.tag = s;
    parts.push_back(part);
  }
  auto* part_sink =
      new PartialOpSink(sink, op.tag, std::move(result), static_cast<uint32_t>(parts.size()));
  part_sink->garbage = std::move(garbage).value();  // (the bytes stay where parts point)
  for (const IoOp& part : parts) LogWrite(part);
  base_->Submit(parts, part_sink);
}

void FaultInjectionIoEngine::Hold(const IoOp& op, IoCompletionSink* sink, uint64_t delay_us) {
  MutexLock lock(mu_);
  held_.emplace(std::make_pair(NowNs() + static_cast<int64_t>(delay_us) * 1000, held_seq_++),
                HeldOp{op, sink});
  if (!delay_thread_.joinable()) delay_thread_ = std::thread([this] { DelayLoop(); });
  delay_cv_.NotifyAll();
}

void FaultInjectionIoEngine::DelayLoop() {
  MutexLock lock(mu_);
  for (;;) {
    if (held_.empty()) {
      if (stop_delay_) return;
      delay_cv_.Wait(mu_);
      continue;
    }
    const auto first = held_.begin();
    const int64_t now = NowNs();
    if (!stop_delay_ && first->first.first > now) {
      delay_cv_.WaitFor(mu_, std::chrono::nanoseconds(first->first.first - now));
      continue;
    }
    const HeldOp h = first->second;
    held_.erase(first);
    releasing_++;
    lock.Unlock();
    if (h.op.opcode == IoOpcode::kWrite) LogWrite(h.op);
    base_->Submit(std::span<const IoOp>(&h.op, 1), h.sink);
    lock.Lock();
    releasing_--;
    delay_cv_.NotifyAll();
  }
}

void FaultInjectionIoEngine::DrainDelayed() {
  MutexLock lock(mu_);
  while (!held_.empty() || releasing_ > 0) delay_cv_.Wait(mu_);
}

}  // namespace flatcake
