#include "serve/daemon_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "serve/rpc_convert.h"
#include "serve/unix_socket.h"
#include "serve/wire.h"
#include "util/thread_annotations.h"

namespace flatcake::serve {
namespace {

constexpr uint64_t kHelloId = 1;

// The media a HelloReply describes, as this process reaches them. SSD offsets in replies are
// positions in the files (superblock included), so this process's view of the pool is the
// files back to back from their first byte: file_bytes is a whole file, data_offset 0.
Result<SharedMedia> MediaOf(const rpc::HelloReply& h, const std::vector<UniqueFd>& fds) {
  SharedMedia m;
  if (h.dram_arena().bytes() > 0) {
    if (h.dram_arena().fd_index() >= fds.size()) {
      return Status::InvalidArgument("the HelloReply names descriptor " +
                                     std::to_string(h.dram_arena().fd_index()) + " of " +
                                     std::to_string(fds.size()) + " sent");
    }
    m.dram_fd = fds[h.dram_arena().fd_index()].get();
    m.dram_bytes = h.dram_arena().bytes();
  }
  for (const rpc::SsdFile& f : h.ssd_files()) {
    if (f.bytes() == 0 || (m.ssd.file_bytes != 0 && f.bytes() != m.ssd.file_bytes)) {
      return Status::InvalidArgument("the daemon's pool files are not all of one size");
    }
    m.ssd.file_bytes = f.bytes();
    m.ssd.paths.push_back(f.path());
  }
  m.ssd.direct = h.ssd_direct_io();
  return m;
}

// A reply's body, or the Status its Error carries; InvalidArgument for an unexpected body.
Result<rpc::Response> Expect(Result<rpc::Response> r, rpc::Response::BodyCase expect) {
  if (!r.ok()) return r;
  if (r->body_case() != expect) {
    return Status::InvalidArgument("the daemon answered with another reply than asked for");
  }
  return r;
}

}  // namespace

Result<uint64_t> ClientPoolOffset(const SsdPoolGeometry& geometry, uint32_t file_index,
                                  uint64_t offset) {
  if (file_index >= geometry.num_files() || offset >= geometry.file_bytes) {
    return Status::InvalidArgument("the daemon named SSD file " + std::to_string(file_index) +
                                   " offset " + std::to_string(offset) +
                                   ", outside the pool files");
  }
  return uint64_t{file_index} * geometry.file_bytes + offset;
}

DaemonConnection::DaemonConnection(std::string path, UniqueFd fd, const ClientOptions& options)
    : path_(std::move(path)), fd_(std::move(fd)), options_(options) {}

Result<std::unique_ptr<DaemonConnection>> DaemonConnection::Open(const std::string& socket_path,
                                                                 const std::string& tenant,
                                                                 const ClientOptions& options) {
  FC_RETURN_IF_ERROR(ValidateTenantName(tenant));
  FC_ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket_path, options.connect_timeout));
  std::unique_ptr<DaemonConnection> c(new DaemonConnection(socket_path, std::move(fd), options));
  Status st = c->Handshake(tenant);
  if (!st.ok()) return st.WithContext("daemon at " + socket_path);
  c->reader_ = std::thread([raw = c.get()] { raw->ReaderLoop(); });
  return c;
}

Status DaemonConnection::Handshake(const std::string& tenant) {
  rpc::Request request;
  request.set_id(kHelloId);
  rpc::Hello* hello = request.mutable_hello();
  hello->set_protocol_version(kProtocolVersion);
  hello->set_min_protocol_version(kMinProtocolVersion);
  hello->set_tenant(tenant);
  hello->set_client_pid(static_cast<uint32_t>(::getpid()));
  hello->set_client_name(options_.client_name.substr(0, kMaxClientNameBytes));
  FC_ASSIGN_OR_RETURN(const std::vector<uint8_t> frame, EncodeFrame(request));
  FC_RETURN_IF_ERROR(SendFrame(fd_.get(), frame, {}, options_.connect_timeout));
  const FrameLimits limits{kMinProtocolVersion, kProtocolVersion, kMaxFramePayloadBytes};
  FC_ASSIGN_OR_RETURN(ReceivedFrame got, RecvFrame(fd_.get(), limits, options_.connect_timeout));
  FC_ASSIGN_OR_RETURN(rpc::Response reply, ParseResponse(got.payload));
  FC_RETURN_IF_ERROR(ValidateResponse(reply));
  if (reply.has_error()) return FromRpc(reply.error());
  if (!reply.has_hello() || reply.id() != kHelloId) {
    return Status::InvalidArgument("the daemon did not answer Hello with a HelloReply");
  }
  hello_ = reply.hello();
  const uint32_t v = hello_.protocol_version();
  if (v < kMinProtocolVersion || v > kProtocolVersion) {
    return Status::Unsupported("the daemon speaks protocol " + std::to_string(v) +
                               ", this client " + std::to_string(kMinProtocolVersion) + ".." +
                               std::to_string(kProtocolVersion));
  }
  version_ = static_cast<uint16_t>(v);
  FC_ASSIGN_OR_RETURN(const SharedMedia media, MediaOf(hello_, got.fds));
  // The arena's descriptor is closed with `got` once mapped; the mapping stays.
  FC_ASSIGN_OR_RETURN(media_, AttachedMedia::Open(media, options_.media));
  return Status::OK();
}

DaemonConnection::~DaemonConnection() {
  Break(Status::Aborted("connection closed by the client"));
  if (reader_.joinable()) reader_.join();
}

void DaemonConnection::Break(const Status& why) {
  std::unordered_map<uint64_t, Callback> failed;
  {
    MutexLock lock(mu_);
    if (broken_.load()) return;
    why_broken_ = why;
    broken_.store(true, std::memory_order_release);
    failed.swap(pending_);
  }
  ::shutdown(fd_.get(), SHUT_RDWR);  // wakes the reader
  for (auto& [id, done] : failed) done(why);
}

void DaemonConnection::CallAsync(rpc::Request request, Callback done) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  request.set_id(id);
  {
    MutexLock lock(mu_);
    if (broken_.load()) {
      const Status why = why_broken_;
      lock.Unlock();
      done(why);
      return;
    }
    pending_.emplace(id, std::move(done));
  }
  auto frame = EncodeFrame(request, 0, version_);
  Status st = frame.ok() ? Status::OK() : frame.status();
  if (st.ok()) {
    MutexLock lock(send_mu_);
    st = SendFrame(fd_.get(), *frame, {}, options_.request_timeout);
  }
  if (st.ok()) return;
  if (!frame.ok()) {  // this request alone: the connection is fine
    Callback mine;
    {
      MutexLock lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // failed meanwhile by a Break
      mine = std::move(it->second);
      pending_.erase(it);
    }
    mine(st);
    return;
  }
  Break(Status::IOError("sending to the daemon at " + path_ + ": " + st.ToString()));
}

Result<rpc::Response> DaemonConnection::Call(rpc::Request request, rpc::Response::BodyCase expect) {
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool done GUARDED_BY(mu) = false;
    Result<rpc::Response> result GUARDED_BY(mu) = Status::Aborted("no reply");
  };
  auto w = std::make_shared<Waiter>();
  CallAsync(std::move(request), [w](Result<rpc::Response> r) {
    MutexLock lock(w->mu);
    w->result = std::move(r);
    w->done = true;
    w->cv.NotifyAll();
  });
  const auto deadline = std::chrono::steady_clock::now() + options_.request_timeout;
  {
    MutexLock lock(w->mu);
    while (!w->done) {
      if (!w->cv.WaitUntil(w->mu, deadline) && !w->done) break;
    }
    if (w->done) return Expect(std::move(w->result), expect);
  }
  Break(Status::DeadlineExceeded("no reply from the daemon at " + path_ + " within " +
                                 std::to_string(options_.request_timeout.count()) +
                                 " ms; connection dropped"));
  MutexLock lock(w->mu);
  while (!w->done) w->cv.Wait(w->mu);  // Break failed it
  return Expect(std::move(w->result), expect);
}

void DaemonConnection::ReaderLoop() {
  const FrameLimits limits{version_, version_, kMaxFramePayloadBytes};
  for (;;) {
    auto frame = RecvFrame(fd_.get(), limits);
    if (!frame.ok()) {
      Break(Status::IOError("lost the connection to the daemon at " + path_ + ": " +
                            frame.status().ToString()));
      return;
    }
    auto response = ParseResponse(frame->payload);
    if (!response.ok()) {
      Break(Status::IOError("bad frame from the daemon at " + path_ + ": " +
                            response.status().ToString()));
      return;
    }
    Callback done;
    {
      MutexLock lock(mu_);
      auto it = pending_.find(response->id());
      if (it == pending_.end()) continue;  // no call waits for it (none should)
      done = std::move(it->second);
      pending_.erase(it);
    }
    if (Status valid = ValidateResponse(*response); !valid.ok()) {
      done(valid.WithContext("reply from the daemon"));
    } else if (response->has_error()) {
      done(FromRpc(response->error()));
    } else {
      done(std::move(*response));
    }
  }
}

}  // namespace flatcake::serve
