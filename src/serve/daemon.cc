#include "serve/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <optional>
#include <thread>
#include <utility>

#include "serve/daemon_session.h"
#include "serve/rpc_convert.h"
#include "serve/serve_log.h"
#include "serve/wire.h"
#include "store/flat_store.h"
#include "store/segment_layout.h"
#include "util/thread_annotations.h"

#ifndef FLATCAKE_VERSION
#define FLATCAKE_VERSION "unknown"
#endif

namespace flatcake::serve {
namespace {

using Clock = std::chrono::steady_clock;

// How long the acceptor waits for a connection before it looks at its state again.
constexpr std::chrono::milliseconds kAcceptPoll{200};
// How long a connection past max_clients may take to send its Hello before it is closed.
constexpr std::chrono::milliseconds kBusyHelloTimeout{200};

// Relative paths of the store's options as absolute ones: clients open the pool files by the
// paths the HelloReply names, from any working directory.
void MakeAbsolute(StoreOptions* o) {
  std::error_code ec;
  for (std::string& dir : o->ssd_dirs) {
    auto abs = std::filesystem::absolute(dir, ec);
    if (!ec) dir = abs.lexically_normal().string();
  }
  if (!o->dram_path.empty()) {
    auto abs = std::filesystem::absolute(o->dram_path, ec);
    if (!ec) o->dram_path = abs.lexically_normal().string();
  }
}

// Takes the exclusive flock on `path` (created when absent) and writes our pid into it. Busy,
// naming the holder's pid, when another process holds it.
Result<UniqueFd> LockFile(const std::string& path, const std::string& socket_path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(errno, "opening the daemon's lock file " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "flock " + path);
    char pid[32] = {};
    const ssize_t n = ::pread(fd.get(), pid, sizeof(pid) - 1, 0);
    const std::string holder = n > 0 ? " (pid " + std::to_string(std::atol(pid)) + ")" : "";
    return Status::Busy("another flatcake serve" + holder + " serves the socket " + socket_path +
                        ": it holds " + path + "; one daemon per socket and pool");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Status::FromErrno(errno, "writing " + path);
  }
  return fd;
}

// The answer to a connection past max_clients: BUSY under its Hello's id, then the close.
void RefuseBusy(UniqueFd fd, uint32_t max_clients, DaemonObserver* observer) {
  uint64_t id = 0;
  uint16_t version = kProtocolVersion;
  auto frame = RecvFrame(fd.get(), kHelloFrameLimits, kBusyHelloTimeout);
  if (frame.ok()) {
    version = std::clamp(frame->header.version, kMinProtocolVersion, kProtocolVersion);
    if (auto request = ParseRequest(frame->payload); request.ok()) id = request->id();
  }
  rpc::Response reply;
  reply.set_id(id);
  *reply.mutable_error() =
      ToRpc(Status::Busy("the daemon serves its limit of " + std::to_string(max_clients) +
                         " clients; try again later"));
  if (auto bytes = EncodeFrame(reply, 0, version); bytes.ok()) {
    (void)SendFrame(fd.get(), *bytes, {}, kBusyHelloTimeout);
  }
  Logf(LogLevel::kWarning, "connection refused: %u clients served already", max_clients);
  observer->OnProtocolError(ClientIdentity{}, ProtocolError::kTooManyClients,
                            "max_clients connections served already");
}

class NullObserver final : public DaemonObserver {};

}  // namespace

class Daemon::Impl {
 public:
  explicit Impl(DaemonOptions options) : options_(std::move(options)) {}
  ~Impl() { Shutdown(); }

  Status Start();
  void Shutdown();

  FlatStore& store() { return *store_; }
  const std::string& socket_path() const { return options_.socket_path; }
  std::vector<TenantUsage> TenantUsages() const { return ledger_->Usage(); }
  TenantLedger& ledger() { return *ledger_; }
  size_t num_clients() const {
    MutexLock lock(mu_);
    return sessions_.size();
  }

 private:
  struct Running {
    std::shared_ptr<ClientSession> session;
    std::thread thread;
  };

  // The HelloReply fields that describe the store, once it is open.
  void DescribeMedia();
  void AcceptLoop();
  // Serves `fd` on a thread of its own, or refuses it past max_clients.
  void Admit(UniqueFd fd) EXCLUDES(mu_);
  // Joins the threads of the connections that ended.
  void ReapFinished() EXCLUDES(mu_);

  DaemonOptions options_;
  NullObserver null_observer_;
  UniqueFd lock_fd_;
  std::unique_ptr<TenantLedger> ledger_;
  std::unique_ptr<FlatStore> store_;  // after ledger_: its scope listener calls the ledger
  DaemonContext ctx_;
  std::optional<UnixListener> listener_;
  std::thread acceptor_;
  uint64_t next_token_ = 1;  // acceptor thread only
  bool shut_down_ = false;
  mutable Mutex mu_;
  std::list<Running> sessions_ GUARDED_BY(mu_);
};

Status Daemon::Impl::Start() {
  if (options_.socket_path.empty()) return Status::InvalidArgument("no socket path");
  if (options_.max_clients == 0) return Status::InvalidArgument("max_clients must be at least 1");
  MakeAbsolute(&options_.store);
  // First the socket's lock: a second daemon on this socket stops here, before it opens (and
  // maybe recovers) a store.
  FC_ASSIGN_OR_RETURN(lock_fd_, LockFile(options_.socket_path + ".lock", options_.socket_path));
  ledger_ = std::make_unique<TenantLedger>(options_.tenant_quotas, options_.default_quota);
  auto opened = FlatStore::OpenShared(options_.store);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kBusy) {
      return opened.status().WithContext("another daemon or store holds the pool");
    }
    return opened.status().WithContext("opening the store");
  }
  store_ = std::move(*opened);
  store_->SetScopeReleaseListener([ledger = ledger_.get()](uint32_t id, uint32_t gen, MediaType) {
    ledger->OnScopeReleased(id, gen);
  });
  DescribeMedia();
  auto listener = UnixListener::Listen(options_.socket_path, options_.socket_mode);
  if (!listener.ok()) return listener.status().WithContext("listening on the socket");
  listener_.emplace(std::move(*listener));

  const StoreInfo info = store_->GetInfo();
  const StoreStats stats = store_->GetStats();
  Logf(LogLevel::kInfo, "listening on %s: DRAM %lu bytes (%s), SSD %lu bytes in %u files%s%s",
       options_.socket_path.c_str(), static_cast<unsigned long>(stats.dram.capacity_bytes),
       info.dram_backing.empty() ? "none" : info.dram_backing.c_str(),
       static_cast<unsigned long>(stats.ssd.capacity_bytes), info.ssd_files,
       info.ssd_direct_io ? ", O_DIRECT" : "", info.ssd_durable ? ", durable" : "");
  if (info.recovered) {
    Logf(LogLevel::kInfo, "recovered %lu blocks in %lu segments (%.3f s), %lu records skipped",
         static_cast<unsigned long>(info.recovered_blocks),
         static_cast<unsigned long>(info.recovered_segments), info.recovery_seconds,
         static_cast<unsigned long>(info.skipped_records));
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::OK();
}

void Daemon::Impl::DescribeMedia() {
  ctx_.store = store_.get();
  ctx_.ledger = ledger_.get();
  ctx_.options = &options_;
  ctx_.observer = options_.observer != nullptr ? options_.observer : &null_observer_;
  const SharedMedia media = store_->shared_media();
  rpc::HelloReply& h = ctx_.media;
  h.set_server_version("flatcake " FLATCAKE_VERSION);
  h.set_node_id(options_.store.node_id);
  if (media.dram_fd >= 0 && media.dram_bytes > 0) {
    h.mutable_dram_arena()->set_bytes(media.dram_bytes);
    h.mutable_dram_arena()->set_fd_index(0);
    h.mutable_dram_arena()->set_page_mode(store_->GetInfo().dram_page_mode);
    ctx_.arena_fd = media.dram_fd;
  }
  for (const std::string& path : media.ssd.paths) {
    rpc::SsdFile* f = h.add_ssd_files();
    f->set_path(path);
    f->set_bytes(media.ssd.data_offset + media.ssd.file_bytes);
  }
  h.set_ssd_direct_io(media.ssd.direct);
  ctx_.geometry = media.ssd;
  rpc::Limits* l = h.mutable_limits();
  l->set_max_frame_bytes(kMaxRequestPayloadBytes);
  l->set_max_batch_keys(kMaxBatchKeys);
  l->set_max_layers(kMaxKvLayers);
  l->set_max_planes(kMaxKvPlanes);
  l->set_max_slice_bytes(kMaxSliceBytes);
  l->set_run_align(SegmentLayout::kRunAlign);
  l->set_max_pins(options_.max_pins_per_client);
  l->set_max_reservations(options_.max_reservations_per_client);
}

void Daemon::Impl::AcceptLoop() {
  while (!ctx_.stopping.load()) {
    Result<UniqueFd> conn = listener_->Accept(kAcceptPoll);
    ReapFinished();
    if (!conn.ok()) {
      if (conn.status().code() != StatusCode::kDeadlineExceeded) {
        // Out of descriptors, say: logged, and tried again after a pause rather than in a spin.
        Logf(LogLevel::kError, "accept: %s", conn.status().ToString().c_str());
        std::this_thread::sleep_for(kAcceptPoll / 4);
      }
      continue;
    }
    if (ctx_.stopping.load()) break;
    Admit(std::move(*conn));
  }
}

void Daemon::Impl::Admit(UniqueFd fd) {
  MutexLock lock(mu_);
  if (sessions_.size() >= options_.max_clients) {
    lock.Unlock();
    RefuseBusy(std::move(fd), options_.max_clients, ctx_.observer);
    return;
  }
  auto session = std::make_shared<ClientSession>(ctx_, std::move(fd), next_token_++);
  sessions_.push_back(Running{session, std::thread([session] { session->Run(); })});
}

void Daemon::Impl::ReapFinished() {
  std::list<Running> done;
  {
    MutexLock lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (it->session->finished()) done.splice(done.end(), sessions_, it);
      it = next;
    }
  }
  for (Running& r : done) r.thread.join();
}

void Daemon::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (!acceptor_.joinable()) return;  // never started: nothing is served
  Log(LogLevel::kInfo, "shutting down: no new connections; serving the requests in flight");
  ctx_.stopping.store(true);
  // A connection of our own wakes the acceptor at once rather than at its next poll.
  (void)ConnectUnix(options_.socket_path, kAcceptPoll);
  acceptor_.join();
  listener_.reset();  // the socket file goes with it
  const Clock::time_point deadline = Clock::now() + options_.shutdown_grace;
  std::list<Running> sessions;
  {
    MutexLock lock(mu_);
    sessions.swap(sessions_);
  }
  for (Running& r : sessions) r.session->StopReading(deadline);
  for (Running& r : sessions) r.thread.join();
  sessions.clear();
  Log(LogLevel::kInfo, "connections closed; closing the store");
  store_.reset();  // syncs a durable pool per its sync option
  Log(LogLevel::kInfo, "shut down");
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Shutdown(); }

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  FC_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

void Daemon::Shutdown() { impl_->Shutdown(); }
FlatStore& Daemon::store() { return impl_->store(); }
const std::string& Daemon::socket_path() const { return impl_->socket_path(); }
std::vector<TenantUsage> Daemon::TenantUsages() const { return impl_->TenantUsages(); }
TenantLedger& Daemon::ledger() { return impl_->ledger(); }
size_t Daemon::num_clients() const { return impl_->num_clients(); }

}  // namespace flatcake::serve
