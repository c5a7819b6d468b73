#include "serve/remote_restore.h"

#include <string>
#include <utility>

#include "flatcake/clock.h"
#include "serve/rpc_convert.h"
#include "serve/wire.h"

namespace flatcake::serve {

RemoteRestore::RemoteRestore(DaemonConnection::Use conn, TaskThread* runner, const KvLayout& layout,
                             const BlockBuffers& dst, size_t num_keys,
                             const RestoreOptions& options, bool verify)
    : conn_(std::move(conn)),
      runner_(runner),
      layout_(layout),
      dst_pointers_(dst.ptrs.begin(), dst.ptrs.end()),
      dst_{dst.kind, std::span<void* const>(dst_pointers_)},
      num_keys_(num_keys),
      on_layer_(options.on_layer),
      verify_(verify) {}

std::shared_ptr<RemoteRestore> RemoteRestore::Start(DaemonConnection::Use conn, TaskThread* runner,
                                                    std::span<const Key> keys,
                                                    const KvLayout& layout, const BlockBuffers& dst,
                                                    const RestoreOptions& options, bool verify) {
  DaemonConnection& c = *conn;
  auto r = std::make_shared<RemoteRestore>(std::move(conn), runner, layout, dst, keys.size(),
                                           options, verify);
  rpc::Request request;
  rpc::PinRead* pin = request.mutable_pin_read();
  pin->set_keys(EncodeKeys(keys));
  *pin->mutable_layout() = ToRpc(layout);
  // The caller's arrival, or now: the same clock as the daemon's (flatcake/clock.h).
  pin->set_arrival_ns(options.arrival_ns == kArrivalNow ? SteadyNowNs() : options.arrival_ns);
  c.CallAsync(std::move(request),
              [r](Result<rpc::Response> reply) { r->OnPinned(std::move(reply)); });
  return r;
}

Result<std::vector<PinnedHit>> PinnedHitsOf(const rpc::PinReadReply& reply, size_t num_keys,
                                            const KvLayout& layout, const SsdPoolGeometry& geo) {
  if (static_cast<size_t>(reply.blocks_size()) != num_keys) {
    return Status::InvalidArgument("the daemon located " + std::to_string(reply.blocks_size()) +
                                   " blocks of " + std::to_string(num_keys) + " keys");
  }
  std::vector<PinnedHit> hits;
  hits.reserve(reply.hits());
  for (int i = 0; i < reply.blocks_size(); ++i) {
    const rpc::BlockLocation& b = reply.blocks(i);
    if (!b.found()) continue;
    PinnedHit h;
    h.key = static_cast<uint32_t>(i);
    FC_ASSIGN_OR_RETURN(h.medium, FromRpc(b.medium()));
    if (h.medium == MediaType::kSsd) {
      FC_ASSIGN_OR_RETURN(h.offset, ClientPoolOffset(geo, b.file_index(), b.offset()));
    } else {
      h.offset = b.offset();
    }
    if (b.plane_stride() * layout.num_planes != b.layer_stride()) {
      return Status::InvalidArgument(
          "the daemon located a block with strides this client "
          "cannot read");
    }
    h.layer_stride = b.layer_stride();
    h.checksum = b.checksum();
    hits.push_back(h);
  }
  return hits;
}

rpc::Request UnpinRequest(uint64_t pin_id, bool delivered, const GetResult& result) {
  rpc::Request request;
  rpc::Unpin* u = request.mutable_unpin();
  u->set_pin_id(pin_id);
  u->set_delivered(delivered ? result.hits : 0);
  u->set_corrupt(result.corrupt);
  u->set_bytes_from_dram(delivered ? result.bytes_from_dram : 0);
  u->set_bytes_from_ssd(delivered ? result.bytes_from_ssd : 0);
  u->set_ssd_bytes_read(result.ssd_bytes_read);
  u->set_ssd_reads(result.ssd_reads);
  return request;
}

void RemoteRestore::OnPinned(Result<rpc::Response> reply) {
  if (!reply.ok()) {
    Finish(reply.status());
    return;
  }
  if (!reply->has_pin_read()) {
    Finish(Status::InvalidArgument("the daemon answered PinRead with another reply"));
    return;
  }
  const rpc::PinReadReply& p = reply->pin_read();
  pin_id_ = p.pin_id();
  queued_ns_ = p.queued_ns();
  Result<std::vector<PinnedHit>> hits =
      PinnedHitsOf(p, num_keys_, layout_, conn_->media().geometry());
  if (!hits.ok()) {
    Finish(hits.status());
    return;
  }
  read_.emplace(layout_, dst_, std::move(*hits), verify_);
  {
    MutexLock lock(mu_);
    if (!cancelled_) {
      phase_ = Phase::kPinned;
      lock.Unlock();
      cv_.NotifyAll();
      runner_->Post([self = shared_from_this()] { self->TryRunDataHalf(); });
      return;
    }
    phase_ = Phase::kReading;
  }
  Finish(Status::Aborted("restore cancelled"));
}

void RemoteRestore::TryRunDataHalf() {
  {
    MutexLock lock(mu_);
    if (phase_ != Phase::kPinned) return;
    phase_ = Phase::kReading;
  }
  RunDataHalf();
}

void RemoteRestore::RunDataHalf() {
  const AttachedMedia& media = conn_->media();
  if (Status st = read_->Check(media.access()); !st.ok()) {
    Finish(st);
    return;
  }
  if (read_->num_dram_hits() > 0) read_->CopyDram(media.access().dram);
  if (read_->num_ssd_hits() == 0) {
    for (uint32_t l = 0; l < layout_.num_layers; ++l) ReportLayer(l);
    Finish(Status::OK());
    return;
  }
  if (media.reader() == nullptr) {
    Finish(Status::InvalidArgument("SSD hits, but the daemon announced no pool files"));
    return;
  }
  ssd_start_ns_ = SteadyNowNs();
  auto self = shared_from_this();
  auto reads = read_->StartSsdReads(
      *media.reader(), media.geometry(), [self](uint32_t l) { self->ReportLayer(l); },
      [self](const Status& st, const ReaderStats&) {
        // Finish sends on the socket: not on an I/O worker.
        self->runner_->Post([self, st] { self->Finish(st); });
      });
  MutexLock lock(mu_);
  if (done_) return;  // (the reads ended before this line)
  if (cancelled_) reads->Cancel(Status::Aborted("restore cancelled"));
  reads_ = std::move(reads);
}

void RemoteRestore::ReportLayer(uint32_t layer) {
  {
    MutexLock lock(mu_);
    layers_reported_ = layer + 1;
  }
  cv_.NotifyAll();
  if (on_layer_) on_layer_(layer);
}

void RemoteRestore::Finish(Status st) {
  GetResult result;
  if (read_) {
    result = read_->Outcome(num_keys_, st, {});
  } else {
    result.found.assign(num_keys_, 0);
  }
  const bool broken = conn_->broken();
  if (st.ok() && broken) {
    st = Status::IOError(
        "the connection to the daemon broke during the restore: its pins were released with "
        "it, so what was read is not trusted");
  }
  result.queued_ns = queued_ns_;
  if (ssd_start_ns_ != 0) result.ssd_read_ns = SteadyNowNs() - ssd_start_ns_;
  if (pin_id_ != 0 && !broken) {
    rpc::Request request = UnpinRequest(pin_id_, st.ok(), result);
    // Its reply tells nothing the restore needs; a later call of this connection is served after
    // it (the daemon serves a connection's requests in order).
    conn_->CallAsync(std::move(request), [](Result<rpc::Response>) {});
  }
  conn_.Release();
  if (!st.ok()) result.found.assign(num_keys_, 0);
  std::shared_ptr<LayeredRestore> reads;  // released outside the lock
  {
    MutexLock lock(mu_);
    status_ = st.ok() ? st : st.WithContext("restore");
    result_ = std::move(result);
    done_ = true;
    reads = std::move(reads_);
  }
  cv_.NotifyAll();
}

bool RemoteRestore::AwaitLocked(uint32_t layer,
                                std::optional<std::chrono::steady_clock::time_point> deadline) {
  while (!done_ && (layer == kWholeRestore || layers_reported_ <= layer)) {
    if (phase_ == Phase::kPinned) {
      mu_.unlock();
      TryRunDataHalf();
      mu_.lock();
      continue;
    }
    if (!deadline) {
      cv_.Wait(mu_);
    } else if (!cv_.WaitUntil(mu_, *deadline)) {
      break;
    }
  }
  return done_ || (layer != kWholeRestore && layers_reported_ > layer);
}

Result<GetResult> RemoteRestore::Wait() {
  MutexLock lock(mu_);
  AwaitLocked(kWholeRestore, std::nullopt);
  if (!status_.ok()) return status_;
  return result_;
}

bool RemoteRestore::WaitFor(std::chrono::nanoseconds timeout) {
  MutexLock lock(mu_);
  return AwaitLocked(kWholeRestore, std::chrono::steady_clock::now() + timeout);
}

Status RemoteRestore::WaitLayer(uint32_t layer) {
  if (layer >= layout_.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(layout_.num_layers) + " layers)");
  }
  MutexLock lock(mu_);
  if (AwaitLocked(layer, std::nullopt) && layers_reported_ > layer) return Status::OK();
  return status_;
}

bool RemoteRestore::done() const {
  MutexLock lock(mu_);
  return done_;
}

void RemoteRestore::Cancel() {
  std::shared_ptr<LayeredRestore> reads;
  {
    MutexLock lock(mu_);
    if (done_ || cancelled_) return;
    cancelled_ = true;
    reads = reads_;
    if (phase_ == Phase::kPinned) {  // nobody claimed the data half: end it here
      phase_ = Phase::kReading;
      lock.Unlock();
      Finish(Status::Aborted("restore cancelled"));
      return;
    }
  }
  // Reads in flight land; nothing more is issued.
  if (reads) reads->Cancel(Status::Aborted("restore cancelled"));
}

RemoteRestoreHandle::~RemoteRestoreHandle() {
  if (r_->done()) return;
  r_->Cancel();
  (void)r_->Wait();
}

}  // namespace flatcake::serve
