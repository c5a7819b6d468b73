// `flatcake bench cluster`: the cluster's data path against UCX itself (issue #22's targets).
//
// A private etcd (cluster::EtcdProcess, loopback) and two node daemons, A and B, in this process
// (serve::Daemon, each with its cluster::ClusterNode: UCX worker, membership, peer service),
// each on a temporary pool under --ssd-dir. The client is a cluster::ClusterStore connected to
// A's socket, with its own UCX worker, as an engine process of node A would be.
//  - Remote DRAM: a session of --bytes whose home is B, written through A's client into B's DRAM
//    (PeerPut), restored through A's client (one-sided UCX gets from B's arena into the client's
//    buffers, a get per slice, every block verified). Against it, in the same run between the
//    same two workers' processes: the same number of UCX gets of the same slice size from B's
//    arena into the same destination, with no FlatCake in between (UcxNode::GetSync).
//    remote_dram_vs_ucx = FlatCake / UCX (medians over --reps, alternating which goes first).
//  - Remote SSD: the same for a session in B's SSD pool: B's engine reads it layer by layer and
//    sends each layer as it lands (PeerLayer, a request and its reply). Against it, the same UCX
//    calls without FlatCake: a UCX worker of this process answers requests with a layer's bytes
//    from memory (nothing read, nothing copied, nothing checked), asked by the baseline's worker
//    with as many requests in flight as the restore keeps (ClusterStore::layer_window), one per
//    layer. remote_ssd_vs_ucx = FlatCake / that. Also, for reference, UCX gets of the same sizes
//    from B's arena (ucx_ssd_get_gbps) and local_ssd_gbps, the same session restored by a client
//    of B itself (B's own path), for what the SSD allows.
//  - Both baselines again over the restores' own connection (*_same_ep): the same calls from the
//    client's UCX worker to B's (B's worker answers the requests, kRawLayer, from memory), where
//    the ones above run between two workers of the bench's own, as ucx_perftest would between
//    two processes. remote_*_vs_ucx_same_ep = FlatCake / those.
//  - The first request/reply baseline again while B reads the session from its SSD for a restore
//    of its own, started with it (ucx_ssd_beside_disk_gbps): what those UCX calls move while the
//    disk reads what a remote SSD restore reads. On a VM both can share more than the vCPUs
//    (docs/cluster.md). remote_ssd_vs_ucx_beside_disk = FlatCake / that, for reference only.
//  - Lookup: PeerLookups of 64 keys of the remote session, back to back: P50 and P99 in µs.
//  - Prefill/decode: a client of A writes a --pd-bytes session whose home is A; a client of B
//    restores it: time to its first layer and in total.
// Measuring starts once both nodes have warmed their peer staging (PeerService, at join).
// UCX chooses the transport (TCP on loopback here: ucx_transport.h; UCX_TLS names others).
// Exit 1 on a wrong byte or a missed block, 2 on bad flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "cluster/cluster_node.h"
#include "cluster/cluster_store.h"
#include "cluster/etcd_process.h"
#include "serve/daemon.h"
#include "serve/rpc_convert.h"
#include "serve/serve_log.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The request/reply baseline's handler id at B's worker: outside the peer requests' ids
// (cluster::PeerRequest), so B's PeerService never sees it.
constexpr uint32_t kRawLayer = 900;

struct ClusterBenchArgs {
  uint64_t bytes = 256 * kMiB;
  uint64_t pd_bytes = 2 * kGiB;
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice_bytes = 16 * kKiB;
  uint32_t reps = 5;
  uint32_t lookups = 2000;
  std::string ssd_dir;
  bool json = false;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class ClusterBench {
 public:
  explicit ClusterBench(const ClusterBenchArgs& a)
      : a_(a), layout_{a.layers, a.planes, a.slice_bytes} {}
  // Shutdown(): on every path out of Main, a node leaves its cluster before its daemon closes the
  // store (its membership's keeper reads the store's use until it has left).
  ~ClusterBench() { Shutdown(); }
  ClusterBench(const ClusterBench&) = delete;
  ClusterBench& operator=(const ClusterBench&) = delete;
  int Main();

 private:
  struct Node {
    std::unique_ptr<TempDir> dir;
    std::unique_ptr<cluster::ClusterNode> cluster;
    std::unique_ptr<serve::Daemon> daemon;
  };
  Status StartNode(Node* n, const std::string& name, uint64_t dram, uint64_t ssd);
  Status Setup();
  // A session name whose home is `node` for the client.
  std::string HomedAt(cluster::ClusterStore& c, uint32_t node, const std::string& tag);
  std::vector<Key> Keys(const std::string& session, uint64_t n) const;
  // Blocks of each remote session: --bytes of them, at least 64.
  uint64_t SessionBlocks() const {
    return std::max<uint64_t>(64, (a_.bytes + layout_.block_bytes() - 1) / layout_.block_bytes());
  }
  Status Write(Store& s, const std::vector<Key>& keys, const std::string& session,
               MediaType medium);
  // Restores `keys` through `s` into dst_ (block i at i * block_bytes) with `ro` and waits for
  // it; *started (when given) is set just before the restore is asked for.
  Result<GetResult> RestoreIntoDst(Store& s, const std::vector<Key>& keys, const RestoreOptions& ro,
                                   Clock::time_point* started);
  // Restores `keys` through `s` into dst_, timed; every block verified. Time to layer 0 too.
  Result<double> TimedRestore(Store& s, const std::vector<Key>& keys, double* first_layer_s);
  // Restores `keys` through `s` into dst_, unchecked: the reads of B's own restore, beside which
  // ucx_ssd_beside_disk_gbps is measured. Counts its misses.
  Status UntimedRestore(Store& s, const std::vector<Key>& keys);
  // `count` UCX gets of `size` bytes from B's arena into dst_ by `worker`, timed.
  Result<double> TimedRawGets(cluster::UcxNode& worker, uint64_t count, uint64_t size);
  // `count` requests answered by raw_server_ with `size` bytes each, as many in flight as the
  // client's restore of layers of `size` keeps (ClusterStore::layer_window), timed.
  Result<double> TimedRawCalls(uint64_t count, uint64_t size) {
    return TimedRawCalls(*raw_, raw_server_->address(), 1, count, size);
  }
  // The same from `worker` to the worker at `server`, handler `id`.
  Result<double> TimedRawCalls(cluster::UcxNode& worker, const std::string& server, uint32_t id,
                               uint64_t count, uint64_t size);

  // The run's figures (GB/s, microseconds, seconds).
  struct Figures {
    uint64_t session_bytes = 0;
    double remote_dram_gbps = 0, ucx_dram_gbps = 0, remote_ssd_gbps = 0, ucx_ssd_gbps = 0;
    double ucx_ssd_get_gbps = 0, local_ssd_gbps = 0;
    double ucx_dram_same_ep_gbps = 0, ucx_ssd_same_ep_gbps = 0;
    double ucx_ssd_beside_disk_gbps = 0;
    size_t lookup_keys = 0;
    double lookup_p50_us = 0, lookup_p99_us = 0;
    double pd_bytes = 0, pd_write_s = 0, pd_first_s = 0, pd_total_s = 0;
  };
  // Remote DRAM and SSD restores against UCX gets of the same sizes, alternating which goes
  // first; medians.
  Status MeasureRestores(const std::vector<Key>& dram_keys, const std::vector<Key>& ssd_keys,
                         Figures* f);
  void MeasureLookups(const std::vector<Key>& keys, Figures* f);
  // A session written through A (its home), restored through B.
  Status MeasurePrefillDecode(Figures* f);
  // The table, and with --json the JSON line.
  void Report(const Figures& f) const;
  void Shutdown();

  const ClusterBenchArgs a_;
  const KvLayout layout_;
  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<cluster::EtcdProcess> etcd_;
  Node a_node_, b_node_;
  std::unique_ptr<cluster::ClusterStore> client_a_, client_b_;
  std::unique_ptr<cluster::UcxNode> raw_;         // the baseline's own worker
  std::unique_ptr<cluster::UcxNode> raw_server_;  // and the one answering its requests
  std::shared_ptr<AlignedBuffer> raw_reply_;      // with these bytes
  std::string b_address_, b_rkey_;
  uint64_t b_arena_ = 0, b_arena_bytes_ = 0;
  AlignedBuffer dst_;
  uint64_t mismatches_ = 0, misses_ = 0;
};

Status ClusterBench::StartNode(Node* n, const std::string& name, uint64_t dram, uint64_t ssd) {
  n->dir = std::make_unique<TempDir>("flatcake-bench-cluster-" + name, a_.ssd_dir);
  if (!n->dir->ok()) return Status::IOError("cannot create a directory under --ssd-dir");
  FC_ASSIGN_OR_RETURN(n->cluster, cluster::ClusterNode::Create());
  serve::DaemonOptions d;
  StoreOptions& o = d.store;
  o.dram_bytes = dram;
  o.ssd_dirs = {n->dir->path()};
  o.recover = false;
  o.ssd_file_bytes = 256 * kMiB;
  o.ssd_bytes = (ssd / o.ssd_file_bytes + 2) * o.ssd_file_bytes;
  o.high_watermark = 1.0;
  o.low_watermark = 1.0;
  d.socket_path = n->dir->path() + "/sock";
  d.cluster_view = n->cluster->ViewSource();
  FC_ASSIGN_OR_RETURN(n->daemon, serve::Daemon::Start(d));
  cluster::ClusterNodeOptions co;
  FC_ASSIGN_OR_RETURN(co.etcd, cluster::ParseEtcdEndpoints(etcd_->client_url()));
  co.cluster = "bench";
  co.node_name = name;
  co.lease_ttl_s = 10;
  // Room for two restores of the largest session, back to back: not the default (a quarter of
  // memory), which a session as large as CheckHostMemory allows could exceed.
  co.peer.max_staging_bytes = 2 * std::max(a_.bytes, a_.pd_bytes) + 64 * kMiB;
  return n->cluster->Join(n->daemon.get(), co);
}

std::vector<Key> ClusterBench::Keys(const std::string& session, uint64_t n) const {
  std::vector<Key> keys;
  keys.reserve(n);
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyFromString(session + "/" + std::to_string(i)));
  return keys;
}

std::string ClusterBench::HomedAt(cluster::ClusterStore& c, uint32_t node, const std::string& tag) {
  for (int i = 0; i < 100000; ++i) {
    const std::string name = tag + std::to_string(i);
    const std::vector<uint32_t> order = c.Placement(Keys(name, 1)[0]);
    if (!order.empty() && order[0] == node) return name;
  }
  return "";
}

Status ClusterBench::Write(Store& s, const std::vector<Key>& keys, const std::string& session,
                           MediaType medium) {
  constexpr size_t kPerPut = 64;
  const uint64_t bb = layout_.block_bytes();
  std::vector<uint8_t> mem(kPerPut * bb);
  for (size_t at = 0; at < keys.size(); at += kPerPut) {
    const size_t n = std::min(kPerPut, keys.size() - at);
    std::vector<void*> ptrs;
    for (size_t i = 0; i < n; ++i) {
      FillBlock(keys[at + i], mem.data() + i * bb, bb);
      ptrs.push_back(mem.data() + i * bb);
    }
    WriteHints h;
    h.session = session;
    h.force_medium = medium;
    if (at > 0) h.prefix_tail = keys[at - 1];
    FC_ASSIGN_OR_RETURN(PutResult r, s.Put(std::span<const Key>(keys.data() + at, n), layout_,
                                           BlockBuffers{BufferKind::kBlockContiguous, ptrs}, h));
    if (r.written + r.already_present != n) return Status::IOError("a put wrote too few blocks");
  }
  return Status::OK();
}

Result<GetResult> ClusterBench::RestoreIntoDst(Store& s, const std::vector<Key>& keys,
                                               const RestoreOptions& ro,
                                               Clock::time_point* started) {
  const uint64_t bb = layout_.block_bytes();
  std::vector<void*> ptrs(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ptrs[i] = dst_.data() + i * bb;
  if (started != nullptr) *started = Clock::now();
  FC_ASSIGN_OR_RETURN(
      auto h, s.Restore(keys, layout_, BlockBuffers{BufferKind::kBlockContiguous, ptrs}, ro));
  return h->Wait();
}

Result<double> ClusterBench::TimedRestore(Store& s, const std::vector<Key>& keys,
                                          double* first_layer_s) {
  const uint64_t bb = layout_.block_bytes();
  std::memset(dst_.data(), 0, keys.size() * bb);
  std::atomic<int64_t> first_ns{0};
  RestoreOptions ro;
  Clock::time_point t0;
  ro.on_layer = [&](uint32_t l) {
    if (l == 0)
      first_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  };
  FC_ASSIGN_OR_RETURN(GetResult r, RestoreIntoDst(s, keys, ro, &t0));
  const double secs = Seconds(Clock::now() - t0);
  if (first_layer_s != nullptr) *first_layer_s = first_ns.load() * 1e-9;
  std::vector<uint8_t> expect(bb);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r.found[i]) {
      misses_++;
      continue;
    }
    FillBlock(keys[i], expect.data(), bb);
    if (std::memcmp(expect.data(), dst_.data() + i * bb, bb) != 0) mismatches_++;
  }
  return secs;
}

Status ClusterBench::UntimedRestore(Store& s, const std::vector<Key>& keys) {
  FC_ASSIGN_OR_RETURN(GetResult r, RestoreIntoDst(s, keys, RestoreOptions{}, nullptr));
  for (uint8_t found : r.found) misses_ += found ? 0 : 1;
  return Status::OK();
}

Result<double> ClusterBench::TimedRawGets(cluster::UcxNode& worker, uint64_t count, uint64_t size) {
  std::vector<cluster::UcxNode::GetPiece> pieces;
  pieces.reserve(count);
  const uint64_t span = std::min<uint64_t>(b_arena_bytes_, count * size);
  for (uint64_t i = 0; i < count; ++i) {
    pieces.push_back({dst_.data() + i * size, b_arena_ + (i * size) % (span - size + 1), size});
  }
  const auto t0 = Clock::now();
  FC_RETURN_IF_ERROR(
      worker.GetSync(b_address_, b_rkey_, std::move(pieces), std::chrono::seconds(60)));
  return Seconds(Clock::now() - t0);
}

Result<double> ClusterBench::TimedRawCalls(cluster::UcxNode& worker, const std::string& server,
                                           uint32_t id, uint64_t count, uint64_t size) {
  rpc::PeerLayer req;  // the header a PeerLayer has; the server does not read it
  req.set_restore_id(1);
  req.set_layer(size);
  const std::string header = req.SerializeAsString();
  const uint32_t window = client_a_->layer_window(size);
  const auto t0 = Clock::now();
  std::vector<std::thread> callers;
  std::vector<Status> failed(window);
  for (uint32_t w = 0; w < window; ++w) {
    callers.emplace_back([&, w] {
      for (uint64_t i = w; i < count; i += window) {
        auto r = worker.CallSync(server, id, header, {}, std::chrono::seconds(60));
        if (!r.ok() || r->second.size() != size) {
          failed[w] = r.ok() ? Status::IOError("a reply of the wrong size") : r.status();
          return;
        }
        worker.Reuse(std::move(r->second));
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (const Status& st : failed) FC_RETURN_IF_ERROR(st);
  return Seconds(Clock::now() - t0);
}

Status ClusterBench::Setup() {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout_));
  const uint64_t need = std::max(a_.bytes, a_.pd_bytes) * 3;
  FC_RETURN_IF_ERROR(CheckHostMemory(need, "bench cluster",
                                     "the destination, B's arena and the staging of a restore"));
  FC_ASSIGN_OR_RETURN(etcd_, cluster::EtcdProcess::Start());
  const uint64_t slack = a_.bytes / 8 + 64 * kMiB;
  FC_RETURN_IF_ERROR(StartNode(&a_node_, "a", 64 * kMiB, a_.pd_bytes + a_.pd_bytes / 8 + slack));
  FC_RETURN_IF_ERROR(StartNode(&b_node_, "b", a_.bytes + slack, a_.bytes + slack));
  serve::ClientOptions co;
  co.client_name = "bench cluster";
  FC_ASSIGN_OR_RETURN(client_a_,
                      cluster::ClusterStore::Connect(a_node_.daemon->socket_path(), "bench", co));
  FC_ASSIGN_OR_RETURN(client_b_,
                      cluster::ClusterStore::Connect(b_node_.daemon->socket_path(), "bench", co));
  for (int i = 0; i < 100 && client_a_->Placement(Key{1, 1}).size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (client_a_->Placement(Key{1, 1}).size() < 2) {
    return Status::IOError("the two nodes never saw each other");
  }
  // Nothing is measured while a node still warms its staging at join (a daemon's start-up work,
  // seconds of CPU on this VM's fresh pages).
  for (int i = 0;
       i < 600 && !(a_node_.cluster->peer_staging_warm() && b_node_.cluster->peer_staging_warm());
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FC_ASSIGN_OR_RETURN(
      dst_, AllocateHostMemory(std::max(a_.bytes, a_.pd_bytes) + layout_.block_bytes(), true));
  // The baseline's worker learns B's arena the way a client does (a PeerHello).
  FC_ASSIGN_OR_RETURN(raw_, cluster::UcxNode::Create());
  for (const auto& m : b_node_.cluster->View().members) {
    if (m.node_id == b_node_.cluster->node_id()) b_address_ = m.data_address;
  }
  FC_ASSIGN_OR_RETURN(auto hello, raw_->CallSync(b_address_, cluster::kPeerHello,
                                                 rpc::PeerHello().SerializeAsString(), {},
                                                 std::chrono::seconds(5)));
  rpc::PeerHelloReply r;
  if (!r.ParseFromString(hello.first)) return Status::Corruption("PeerHello");
  b_arena_ = r.arena_base();
  b_arena_bytes_ = r.arena_bytes();
  b_rkey_ = r.arena_rkey();
  FC_RETURN_IF_ERROR(raw_->Register(dst_.data(), dst_.size()).status());
  // The request/reply baseline's server: a layer of the session's size, from memory.
  const uint64_t layer_bytes = SessionBlocks() * layout_.num_planes * layout_.slice_bytes;
  FC_ASSIGN_OR_RETURN(AlignedBuffer reply, AllocateHostMemory(layer_bytes, true));
  std::memset(reply.data(), 0x5a, reply.size());
  raw_reply_ = std::make_shared<AlignedBuffer>(std::move(reply));
  FC_ASSIGN_OR_RETURN(raw_server_, cluster::UcxNode::Create());
  const auto answer = [reply = raw_reply_](std::string, std::string,
                                           cluster::UcxNode::Responder respond) {
    respond(
        Status::OK(), {},
        cluster::UcxPayload(reinterpret_cast<const char*>(reply->data()), reply->size(), reply));
  };
  raw_server_->SetHandler(1, answer);
  b_node_.cluster->ucx().SetHandler(kRawLayer, answer);  // the *_same_ep baseline's
  FC_RETURN_IF_ERROR(client_a_->ucx_worker().Register(dst_.data(), dst_.size()).status());
  return Status::OK();
}

Status ClusterBench::MeasureRestores(const std::vector<Key>& dram_keys,
                                     const std::vector<Key>& ssd_keys, Figures* f) {
  const uint64_t per_block_slices = uint64_t{layout_.num_layers} * layout_.num_planes;
  const uint64_t blocks = dram_keys.size();
  const double gb = static_cast<double>(f->session_bytes) / 1e9;
  std::vector<double> fc_dram, raw_dram, fc_ssd, raw_ssd, raw_ssd_get, local_ssd;
  std::vector<double> same_dram, same_ssd, beside_disk;
  cluster::UcxNode& client = client_a_->ucx_worker();
  for (uint32_t rep = 0; rep < a_.reps; ++rep) {
    const bool raw_first = rep % 2 == 1;
    for (int side = 0; side < 2; ++side) {
      if ((side == 0) != raw_first) {
        FC_ASSIGN_OR_RETURN(const double d, TimedRestore(*client_a_, dram_keys, nullptr));
        fc_dram.push_back(gb / d);
        FC_ASSIGN_OR_RETURN(const double s, TimedRestore(*client_a_, ssd_keys, nullptr));
        fc_ssd.push_back(gb / s);
      } else {
        FC_ASSIGN_OR_RETURN(const double d,
                            TimedRawGets(*raw_, blocks * per_block_slices, layout_.slice_bytes));
        raw_dram.push_back(gb / d);
        const uint64_t layer_bytes = blocks * layout_.num_planes * layout_.slice_bytes;
        FC_ASSIGN_OR_RETURN(const double s, TimedRawCalls(layout_.num_layers, layer_bytes));
        raw_ssd.push_back(gb / s);
        FC_ASSIGN_OR_RETURN(const double g, TimedRawGets(*raw_, layout_.num_layers, layer_bytes));
        raw_ssd_get.push_back(gb / g);
        FC_ASSIGN_OR_RETURN(const double sd,
                            TimedRawGets(client, blocks * per_block_slices, layout_.slice_bytes));
        same_dram.push_back(gb / sd);
        FC_ASSIGN_OR_RETURN(const double ss, TimedRawCalls(client, b_address_, kRawLayer,
                                                           layout_.num_layers, layer_bytes));
        same_ssd.push_back(gb / ss);
        // The first request/reply baseline again while B reads the session from its SSD for a
        // restore of its own (one read of it, as a remote restore makes): what these UCX calls
        // move while that disk reads, on the same machine.
        Status disk;
        std::thread reader([&] { disk = UntimedRestore(*client_b_, ssd_keys); });
        Result<double> bd = TimedRawCalls(layout_.num_layers, layer_bytes);
        reader.join();
        FC_RETURN_IF_ERROR(disk);
        FC_RETURN_IF_ERROR(bd.status());
        beside_disk.push_back(gb / *bd);
      }
    }
    // B's own path, for what the SSD allows.
    FC_ASSIGN_OR_RETURN(const double l, TimedRestore(*client_b_, ssd_keys, nullptr));
    local_ssd.push_back(gb / l);
  }
  f->remote_dram_gbps = Median(fc_dram);
  f->ucx_dram_gbps = Median(raw_dram);
  f->remote_ssd_gbps = Median(fc_ssd);
  f->ucx_ssd_gbps = Median(raw_ssd);
  f->ucx_ssd_get_gbps = Median(raw_ssd_get);
  f->ucx_dram_same_ep_gbps = Median(same_dram);
  f->ucx_ssd_same_ep_gbps = Median(same_ssd);
  f->ucx_ssd_beside_disk_gbps = Median(beside_disk);
  f->local_ssd_gbps = Median(local_ssd);
  return Status::OK();
}

void ClusterBench::MeasureLookups(const std::vector<Key>& keys, Figures* f) {
  std::vector<double> us;
  f->lookup_keys = std::min<size_t>(64, keys.size());
  for (uint32_t i = 0; i < a_.lookups; ++i) {
    // A prompt's lookup starts at its first block: the session's root names the home.
    const auto t0 = Clock::now();
    const LookupResult r = client_a_->Lookup(std::span<const Key>(keys.data(), f->lookup_keys));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (r.leading_hits != f->lookup_keys) misses_++;
  }
  f->lookup_p50_us = Percentile(us, 0.50);
  f->lookup_p99_us = Percentile(us, 0.99);
}

Status ClusterBench::MeasurePrefillDecode(Figures* f) {
  const uint64_t bb = layout_.block_bytes();
  const std::string session = HomedAt(*client_a_, a_node_.cluster->node_id(), "pd-");
  const std::vector<Key> keys = Keys(session, std::max<uint64_t>(1, a_.pd_bytes / bb));
  const auto w0 = Clock::now();
  FC_RETURN_IF_ERROR(Write(*client_a_, keys, session, MediaType::kSsd)
                         .WithContext("writing the prefill/decode session"));
  f->pd_write_s = Seconds(Clock::now() - w0);
  FC_ASSIGN_OR_RETURN(f->pd_total_s, TimedRestore(*client_b_, keys, &f->pd_first_s));
  f->pd_bytes = static_cast<double>(keys.size() * bb);
  return Status::OK();
}

void ClusterBench::Report(const Figures& f) const {
  const char* tls = std::getenv("UCX_TLS");
  const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0; };
  const double dram_vs_ucx = ratio(f.remote_dram_gbps, f.ucx_dram_gbps);
  const double ssd_vs_ucx = ratio(f.remote_ssd_gbps, f.ucx_ssd_gbps);
  const double dram_vs_same = ratio(f.remote_dram_gbps, f.ucx_dram_same_ep_gbps);
  const double ssd_vs_same = ratio(f.remote_ssd_gbps, f.ucx_ssd_same_ep_gbps);
  const double ssd_vs_beside_disk = ratio(f.remote_ssd_gbps, f.ucx_ssd_beside_disk_gbps);
  const double pd_gbps = ratio(f.pd_bytes / 1e9, f.pd_total_s);
  std::printf("bench cluster: two nodes, UCX %s, %s blocks (%s), session %s\n",
              tls != nullptr ? tls : "auto", FormatBytes(layout_.block_bytes()).c_str(),
              layout_.ToString().c_str(), FormatBytes(f.session_bytes).c_str());
  std::printf("  remote DRAM restore %.2f GB/s, UCX gets of the same sizes %.2f GB/s: %.3f x\n",
              f.remote_dram_gbps, f.ucx_dram_gbps, dram_vs_ucx);
  std::printf(
      "  remote SSD restore %.2f GB/s, UCX requests answered with the same sizes %.2f GB/s: %.3f x "
      "(UCX gets of them %.2f GB/s; B's own SSD restore %.2f GB/s)\n",
      f.remote_ssd_gbps, f.ucx_ssd_gbps, ssd_vs_ucx, f.ucx_ssd_get_gbps, f.local_ssd_gbps);
  std::printf(
      "  the same UCX calls over the restores' own connection: gets %.2f GB/s (DRAM %.3f x), "
      "requests %.2f GB/s (SSD %.3f x)\n",
      f.ucx_dram_same_ep_gbps, dram_vs_same, f.ucx_ssd_same_ep_gbps, ssd_vs_same);
  std::printf(
      "  UCX's requests while B's SSD reads the session for B's own restore: %.2f GB/s (remote "
      "SSD restore %.3f x of that)\n",
      f.ucx_ssd_beside_disk_gbps, ssd_vs_beside_disk);
  std::printf("  lookup of %zu keys at the remote home: P50 %.1f us, P99 %.1f us\n", f.lookup_keys,
              f.lookup_p50_us, f.lookup_p99_us);
  std::printf(
      "  prefill/decode: %s written through A in %.2f s; restored through B: first layer %.1f "
      "ms, all %.1f ms (%.2f GB/s)\n",
      FormatBytes(static_cast<uint64_t>(f.pd_bytes)).c_str(), f.pd_write_s, f.pd_first_s * 1e3,
      f.pd_total_s * 1e3, pd_gbps);
  std::printf("  mismatches %lu, misses %lu\n", static_cast<unsigned long>(mismatches_),
              static_cast<unsigned long>(misses_));
  if (!a_.json) return;
  const json out = {{"bench", "cluster"},
                    {"transport", tls != nullptr ? tls : "auto"},
                    {"layout", layout_.ToString()},
                    {"session_bytes", f.session_bytes},
                    {"reps", a_.reps},
                    {"remote_dram_gbps", f.remote_dram_gbps},
                    {"ucx_dram_gbps", f.ucx_dram_gbps},
                    {"remote_dram_vs_ucx", dram_vs_ucx},
                    {"remote_ssd_gbps", f.remote_ssd_gbps},
                    {"ucx_ssd_gbps", f.ucx_ssd_gbps},
                    {"ucx_ssd_get_gbps", f.ucx_ssd_get_gbps},
                    {"remote_ssd_vs_ucx", ssd_vs_ucx},
                    {"local_ssd_gbps", f.local_ssd_gbps},
                    {"remote_ssd_vs_local_ssd", ratio(f.remote_ssd_gbps, f.local_ssd_gbps)},
                    {"ucx_dram_same_ep_gbps", f.ucx_dram_same_ep_gbps},
                    {"remote_dram_vs_ucx_same_ep", dram_vs_same},
                    {"ucx_ssd_same_ep_gbps", f.ucx_ssd_same_ep_gbps},
                    {"remote_ssd_vs_ucx_same_ep", ssd_vs_same},
                    {"ucx_ssd_beside_disk_gbps", f.ucx_ssd_beside_disk_gbps},
                    {"remote_ssd_vs_ucx_beside_disk", ssd_vs_beside_disk},
                    {"lookup_keys", f.lookup_keys},
                    {"lookup_p50_us", f.lookup_p50_us},
                    {"lookup_p99_us", f.lookup_p99_us},
                    {"pd_bytes", f.pd_bytes},
                    {"pd_write_s", f.pd_write_s},
                    {"pd_first_layer_ms", f.pd_first_s * 1e3},
                    {"pd_total_ms", f.pd_total_s * 1e3},
                    {"pd_restore_gbps", pd_gbps},
                    {"mismatches", mismatches_},
                    {"misses", misses_}};
  std::printf("%s\n", out.dump().c_str());
}

void ClusterBench::Shutdown() {
  client_a_.reset();
  client_b_.reset();
  raw_.reset();
  raw_server_.reset();
  for (Node* node : {&a_node_, &b_node_}) {
    if (node->cluster != nullptr) node->cluster->Leave();
    if (node->daemon != nullptr) node->daemon->Shutdown();
    node->daemon.reset();
  }
}

int ClusterBench::Main() {
  serve::SetLogLevel(serve::LogLevel::kWarning);
  if (Status st = Setup(); !st.ok()) return ReportStatus("bench cluster", st);
  const uint64_t bb = layout_.block_bytes();
  const uint64_t blocks = SessionBlocks();
  const uint32_t b = b_node_.cluster->node_id();
  const std::string dram_session = HomedAt(*client_a_, b, "dram-");
  const std::string ssd_session = HomedAt(*client_a_, b, "ssd-");
  const std::vector<Key> dram_keys = Keys(dram_session, blocks),
                         ssd_keys = Keys(ssd_session, blocks);
  Figures f;
  f.session_bytes = blocks * bb;
  Status st = Write(*client_a_, dram_keys, dram_session, MediaType::kDram)
                  .WithContext("writing the DRAM session");
  if (st.ok()) {
    st = Write(*client_a_, ssd_keys, ssd_session, MediaType::kSsd)
             .WithContext("writing the SSD session");
  }
  if (st.ok()) st = MeasureRestores(dram_keys, ssd_keys, &f);
  if (st.ok()) {
    MeasureLookups(dram_keys, &f);
    st = MeasurePrefillDecode(&f);
  }
  if (!st.ok()) return ReportStatus("bench cluster", st);
  Report(f);
  return mismatches_ + misses_ > 0 ? 1 : 0;
}

}  // namespace

void RegisterClusterBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<ClusterBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "cluster",
      "Two node daemons in this process on a private etcd: remote DRAM and SSD restores against "
      "the same UCX calls (gets; requests and replies) of the same sizes without FlatCake, lookup "
      "latency at a remote home, and a prefill/decode "
      "hand-off (docs/cluster.md); exit 1 on any wrong or missing byte");
  cmd->add_option("--bytes", a->bytes, "Remote session size, per medium")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--pd-bytes", a->pd_bytes, "Prefill/decode session size")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "Layers per block")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer")
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str();
  cmd->add_option("--slice-bytes", a->slice_bytes, "Bytes per (layer, plane) slice")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (medians reported)")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  cmd->add_option("--lookups", a->lookups, "Lookups timed")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  cmd->add_option("--ssd-dir", a->ssd_dir,
                  "Directory for the two pools (default: $TMPDIR or /tmp)");
  cmd->add_flag("--json", a->json, "Print one JSON object on the last line");
  cmd->callback([a, exit_code] { *exit_code = ClusterBench(*a).Main(); });
}

}  // namespace flatcake::cli
