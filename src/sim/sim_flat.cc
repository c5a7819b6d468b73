// The flat policy in the simulator: FlatCake's own placement (store/ScopePlacer), segment layout,
// read planning (PlanReads) and FC-MAS (RestoreQueue) on data-less media.
#include "sim/sim_flat.h"

#include <algorithm>
#include <unordered_map>

#include "flatcake/gva.h"
#include "io/coalesce.h"
#include "sched/restore_queue.h"
#include "sim/sim_internal.h"
#include "store/plain_scope_host.h"
#include "store/scope_placer.h"
#include "store/segment_layout.h"

namespace flatcake::sim::internal {

void AppendSsdRunReads(const KvLayout& layout, uint64_t file_bytes, uint64_t seg_base,
                       uint64_t run_stride, uint32_t first_block, uint32_t count,
                       std::vector<SliceRead>* out) {
  const uint64_t layer_stride = uint64_t{layout.num_planes} * run_stride;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      const uint64_t off =
          seg_base + l * layer_stride + p * run_stride + uint64_t{first_block} * layout.slice_bytes;
      out->push_back(SliceRead{static_cast<uint32_t>(off / file_bytes), off % file_bytes,
                               uint64_t{count} * layout.slice_bytes, nullptr, l, 0});
    }
  }
}

namespace {

enum : uint32_t { kPrefetchDone = kStoreEventBase, kPublish };

// The store's scopes with no data (store/plain_scope_host.h), and the index that maps each block to
// its place: what FlatStore's ScopeSlots and BlockIndex hold.
class SimScopeHost final : public PlainScopeHost {
 public:
  struct Loc {
    uint32_t scope, gen, segment, block;
    bool published;
  };

  SimScopeHost(uint64_t dram_bytes, uint64_t ssd_files, uint64_t file_bytes, uint32_t slots)
      // Each pool file starts with its 4 KiB superblock (docs/format.md), as the store's do.
      : PlainScopeHost(dram_bytes, ssd_files * file_bytes, file_bytes, slots, 4096, 4096),
        block_ids_(slots) {}

  // The blocks scope `id` holds, to unpublish when it is freed.
  void AddBlock(uint32_t id, uint64_t block) { block_ids_[id].push_back(block); }
  void ReleaseScope(uint32_t id, uint32_t retired_gen) override {
    for (uint64_t b : block_ids_[id]) {
      auto it = index.find(b);
      if (it != index.end() && it->second.scope == id && it->second.gen == retired_gen) {
        index.erase(it);
      }
    }
  }
  void RecycleScope(uint32_t id) override {
    block_ids_[id].clear();
    PlainScopeHost::RecycleScope(id);
  }

  std::unordered_map<uint64_t, Loc> index;  // block id -> where it is

 private:
  std::vector<std::vector<uint64_t>> block_ids_;
};

class FlatModel final : public StoreModel {
 public:
  explicit FlatModel(SimContext* ctx)
      : ctx_(*ctx),
        p_(*ctx->profile),
        pool_(eval::FlatPoolFor(p_.ssd_bytes, p_.flat_file_bytes)),
        host_(p_.dram_bytes / 4096 * 4096, pool_.files, pool_.file_bytes, 1 << 20),
        placer_(PlacerOptions(), host_),
        queue_(SchedOptions{
            ctx->policy == SimPolicy::kFlatFcfs ? SchedPolicy::kFcfs : SchedPolicy::kMas,
            p_.gpu_window_bytes}) {
    coalesce_.max_gap = p_.max_gap_bytes;
    coalesce_.max_io = p_.max_io_bytes;
    coalesce_.alignment = 4096;
    read_gbps_ = std::min(p_.ssd.read_gbps, p_.ssd.workers * p_.ssd.gds_gbps_per_worker);
  }

  uint32_t Lookup(const ReqState& r, uint32_t first) override {
    const auto& ids = (*ctx_.requests)[r.idx].block_ids;
    uint32_t n = 0;
    for (size_t i = first; i < ids.size(); ++i, ++n) {
      auto it = host_.index.find(ids[i]);
      if (it == host_.index.end() || !it->second.published) break;
    }
    return n;
  }

  void Restore(ReqState& r, uint32_t first, double now) override {
    const auto& ids = (*ctx_.requests)[r.idx].block_ids;
    Job& job = jobs_[r.idx + 1];
    job.req = r.idx;
    uint32_t n = 0;
    // Pin each scope once (as the store's PinHits does); a hit whose scope cannot be pinned
    // ends the prefix.
    uint32_t last_scope = UINT32_MAX;
    std::vector<SliceRead>& slices = job.slices;
    uint32_t run_seg = UINT32_MAX, run_first = 0, run_count = 0, run_scope = 0;
    auto flush_run = [&] {
      if (run_count == 0) return;
      const Segment& seg = host_.scopes[run_scope].segments[run_seg];
      AppendSsdRunReads(ctx_.layout, pool_.file_bytes, seg.base, seg.run_stride, run_first,
                        run_count, &slices);
      run_count = 0;
    };
    for (uint32_t k = 0; k < r.lookup_hits; ++k) {
      auto it = host_.index.find(ids[first + k]);
      if (it == host_.index.end() || !it->second.published) break;
      const SimScopeHost::Loc& loc = it->second;
      if (loc.scope != last_scope) {
        if (std::find(job.pinned.begin(), job.pinned.end(), loc.scope) == job.pinned.end()) {
          if (!host_.TryPinScope(loc.scope, loc.gen)) break;
          job.pinned.push_back(loc.scope);
          host_.TouchScope(loc.scope, ctx_.Ns(now));
        }
        last_scope = loc.scope;
      }
      if (host_.scopes[loc.scope].medium == MediaType::kSsd) {
        job.ssd_blocks++;
        if (loc.scope == run_scope && loc.segment == run_seg &&
            loc.block == run_first + run_count) {
          run_count++;
        } else {
          flush_run();
          run_scope = loc.scope;
          run_seg = loc.segment;
          run_first = loc.block;
          run_count = 1;
        }
      } else {
        job.dram_blocks++;
      }
      ++n;
    }
    flush_run();
    job.blocks = n;
    const uint64_t bb = ctx_.block_bytes();
    const Gva slowest = job.ssd_blocks ? EncodeGva(MediaType::kSsd, 0, 0) : 0;
    const RestoreRequest rr{r.idx + uint64_t{1}, ctx_.Ns(r.arrival), slowest, job.ssd_blocks * bb};
    (void)queue_.Submit(rr, ctx_.Ns(now));
    Pump(now);
  }

  double Write(ReqState& r, uint32_t first, uint32_t end, double now) override {
    const trace::TraceRequest& req = (*ctx_.requests)[r.idx];
    std::vector<Key> keys;
    std::vector<uint64_t> ids;
    for (uint32_t i = first; i < end; ++i) {
      if (host_.index.count(req.block_ids[i])) continue;  // present, or being written
      ids.push_back(req.block_ids[i]);
      keys.push_back(ctx_.KeyOf(req.block_ids[i]));
    }
    if (keys.empty()) return now;
    const eval::RequestHints& h = ctx_.hints[r.idx];
    WriteHints wh;
    wh.session = h.session;
    wh.turn = h.turn;
    if (h.prior_reply_tokens >= 0) wh.prior_reply_tokens = h.prior_reply_tokens;
    wh.context_tokens = uint64_t{first} * ctx_.block_tokens;
    if (first > 0) wh.prefix_tail = ctx_.KeyOf(req.block_ids[first - 1]);
    Placement pl;
    Status st = placer_.PlaceBatch(wh, keys, ctx_.layout, static_cast<uint32_t>(keys.size()),
                                   ctx_.Ns(now), &pl);
    if (!st.ok()) {
      write_failures_++;
      return now;
    }
    double done = now;
    for (const PendingSegment& ps : pl.segments) {
      const double t = pl.medium == MediaType::kSsd
                           ? ctx_.ssd->Submit(now, CommandsFor(ps.seg.bytes, p_.max_io_bytes),
                                              ps.seg.bytes, true)
                           : ctx_.host_copy->Transfer(now, ps.seg.bytes);
      done = std::max(done, t);
      (pl.medium == MediaType::kSsd ? ssd_written_ : dram_written_) += ps.seg.bytes;
      admitted_ += ps.seg.bytes;
      for (uint32_t b = 0; b < ps.seg.num_blocks; ++b) {
        const uint64_t id = ids[ps.first_block + b];
        host_.index[id] = SimScopeHost::Loc{pl.scope_id, pl.gen, ps.segment_no, b, false};
        host_.AddBlock(pl.scope_id, id);
      }
    }
    const uint64_t batch = next_batch_++;
    batches_[batch] = PendingBatch{pl.scope_id, pl.gen, std::move(ids)};
    ctx_.schedule(done, kPublish, batch);
    return done;
  }

  void OnEvent(uint32_t kind, uint64_t a, double now) override {
    if (kind == kPrefetchDone) {
      Job& job = jobs_.at(a);
      (*ctx_.reqs)[job.req].ssd_in = now;
      (void)queue_.CompletePrefetch(a, Status::OK(), ctx_.Ns(now));
      Pump(now);
    } else if (kind == kPublish) {
      auto it = batches_.find(a);
      PendingBatch& pb = it->second;
      PlainScopeHost::Scope& scope = host_.scopes[pb.scope];
      for (uint64_t id : pb.ids) {
        auto loc = host_.index.find(id);
        if (loc != host_.index.end() && loc->second.scope == pb.scope &&
            loc->second.gen == pb.gen) {
          loc->second.published = true;
          scope.blocks++;
        }
      }
      host_.Unpin(pb.scope);
      batches_.erase(it);
    }
  }

  void Finish(SimReport* rep) override {
    rep->ssd_bytes_delivered = ssd_delivered_;
    rep->ssd_bytes_written = ssd_written_;
    rep->dram_bytes_written = dram_written_;
    rep->bytes_admitted = admitted_;
    rep->scopes_reclaimed = host_.reclaimed_scopes;
  }

 private:
  struct Job {
    uint32_t req = 0;
    uint32_t blocks = 0, dram_blocks = 0, ssd_blocks = 0;
    std::vector<SliceRead> slices;  // one per segment run, layer and plane
    std::vector<uint32_t> pinned;
  };
  struct PendingBatch {
    uint32_t scope, gen;
    std::vector<uint64_t> ids;
  };

  StoreOptions PlacerOptions() const {
    StoreOptions so;
    so.tokens_per_block = ctx_.block_tokens;
    so.tau_tokens = p_.tau_tokens;
    so.l_agent_tokens = p_.l_agent_tokens;
    return so;
  }

  // FC-MAS: starts every admitted prefetch, then serves every ready request, until neither is
  // left (under FCFS, serving the head is what lets the next one be admitted).
  void Pump(double now) {
    while (PumpOnce(now)) {
    }
  }

  bool PumpOnce(double now) {
    bool progress = false;
    for (const RestoreRequest& adm : queue_.TakeAdmissions(ctx_.Ns(now))) {
      progress = true;
      Job& job = jobs_.at(adm.id);
      (void)PlanReads(job.slices, coalesce_, &plan_);
      double t = ctx_.ssd->Submit(now, plan_.reads.size(), plan_.bytes_read, false, read_gbps_);
      // Each layer is scattered into its page slots as it lands: pipelined, the last one ends
      // the restore; otherwise the whole copy follows the reads.
      t += TransferSeconds(p_.scatter_pipelined ? plan_.bytes_requested / ctx_.layout.num_layers
                                                : plan_.bytes_requested,
                           p_.scatter_gbps);
      ctx_.schedule(t, kPrefetchDone, adm.id);
      job.slices.clear();
      job.slices.shrink_to_fit();
    }
    while (auto ready = queue_.PopReady()) {
      progress = true;
      auto it = jobs_.find(ready->request.id);
      Job& job = it->second;
      ReqState& r = (*ctx_.reqs)[job.req];
      const uint64_t bb = ctx_.block_bytes();
      const double t = ctx_.h2d->Transfer(now, uint64_t{job.dram_blocks} * bb);
      ssd_delivered_ += uint64_t{job.ssd_blocks} * bb;
      r.delivered = job.blocks;
      r.from_ssd = job.ssd_blocks;
      for (uint32_t s : job.pinned) host_.Unpin(s);
      ctx_.restored(job.req, t);
      jobs_.erase(it);
    }
    return progress;
  }

  SimContext& ctx_;
  const SimProfile& p_;
  const eval::FlatPool pool_;  // the replay's flat pool for the same budget
  SimScopeHost host_;
  ScopePlacer placer_;
  RestoreQueue queue_;
  CoalesceOptions coalesce_;
  CoalescePlan plan_;
  double read_gbps_ = 0;
  std::unordered_map<uint64_t, Job> jobs_;
  std::unordered_map<uint64_t, PendingBatch> batches_;
  uint64_t next_batch_ = 0;
  uint64_t ssd_delivered_ = 0, ssd_written_ = 0, dram_written_ = 0, admitted_ = 0;
  uint64_t write_failures_ = 0;
};

}  // namespace

std::unique_ptr<StoreModel> MakeFlatModel(SimContext* ctx) {
  return std::make_unique<FlatModel>(ctx);
}

}  // namespace flatcake::sim::internal
