// The tiered policies in the simulator (tiered, tiered-gds, dram-only): the baseline's own
// directory (baseline/tiered_policy.h: LRU, offload into buckets, FIFO bucket drop, promotion),
// staging accounting, prefetch deadline, trim and read batches, on data-less media. The glue
// follows TieredStore::Put / Get step by step (tiered_store.cc); the steps that wait (staging,
// reads) wait in virtual time.
#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_map>

#include "baseline/tiered_policy.h"
#include "io/coalesce.h"
#include "media/extent_allocator.h"
#include "sim/sim_internal.h"

namespace flatcake::sim::internal {
namespace {

using baseline::EvictionVictim;
using baseline::PutAdmission;
using baseline::TieredDirectory;
using baseline::TieredHits;
using baseline::TieredStoreOptions;

enum : uint32_t { kStagingDeadline = kStoreEventBase, kBatchDone, kPromoted, kPutDone };

class TieredModel final : public StoreModel {
 public:
  explicit TieredModel(SimContext* ctx)
      : ctx_(*ctx),
        p_(*ctx->profile),
        gds_(ctx->policy == SimPolicy::kTieredGds),
        opts_(Options(*ctx)),
        dram_alloc_(opts_.dram_bytes, 0, 4096),
        dram_space_(&dram_alloc_),
        dir_(opts_, &dram_space_, baseline::SsdGeometry::ForOptions(opts_)),
        staging_(opts_.staging_bytes) {
    (void)dir_.AdoptLayout(ctx->layout);
    obj_bytes_ = dir_.obj_bytes();
    read_gbps_ = gds_ ? std::min(p_.ssd.read_gbps, p_.ssd.workers * p_.ssd.gds_gbps_per_worker)
                      : p_.ssd.read_gbps;
  }

  uint32_t Lookup(const ReqState& r, uint32_t first) override {
    const auto& ids = (*ctx_.requests)[r.idx].block_ids;
    keys_.clear();
    for (size_t i = first; i < ids.size(); ++i) keys_.push_back(ctx_.KeyOf(ids[i]));
    keys_req_ = r.idx;
    keys_first_ = first;
    return dir_.Lookup(keys_).leading_hits;
  }

  void Restore(ReqState& r, uint32_t first, double now) override {
    Job& job = jobs_[r.idx];
    job.req = r.idx;
    if (keys_req_ != r.idx || keys_first_ != first) Lookup(r, first);  // the keys Lookup built
    job.keys.assign(keys_.begin(), keys_.begin() + r.lookup_hits);
    job.found.assign(job.keys.size(), 0);
    job.deadline =
        now + baseline::PrefetchTimeoutSeconds(opts_, uint64_t{r.lookup_hits} * ctx_.block_tokens);
    TieredHits hits;
    (void)dir_.PinHits(job.keys, ctx_.layout, &hits);
    // DRAM hits are copied out at once and unpinned (DeliverDramHits).
    for (uint32_t i : hits.dram) {
      job.found[i] = 1;
      dir_.UnpinDram(job.keys[i]);
    }
    job.dram_blocks = static_cast<uint32_t>(hits.dram.size());
    job.t = ctx_.h2d->Transfer(now, uint64_t{job.dram_blocks} * ctx_.block_bytes());
    job.ssd_hits = std::move(hits.ssd);
    if (job.ssd_hits.empty()) {
      Deliver(job, job.t);
      return;
    }
    // DeliverSsdHits: trim to the pool, then wait for staging until the deadline (GDS reads go
    // to the GPU: no host staging).
    job.keep = baseline::PrefetchKeep(opts_, obj_bytes_, job.ssd_hits.size());
    if (job.keep < job.ssd_hits.size())
      dir_.CountRevoked(job.ssd_hits.size() - job.keep, &job.revoked);
    if (job.keep == 0) {
      Deliver(job, job.t);
      return;
    }
    if (gds_) {
      StartReads(job, now);
      return;
    }
    job.staging_bytes = job.keep * obj_bytes_;
    if (auto off = staging_.TryAcquire(job.staging_bytes)) {
      job.staging_off = *off;
      StartReads(job, now);
    } else {
      waiters_.push_back(r.idx);
      ctx_.schedule(job.deadline, kStagingDeadline, r.idx);
    }
  }

  double Write(ReqState& r, uint32_t first, uint32_t end, double now) override {
    const auto& ids = (*ctx_.requests)[r.idx].block_ids;
    double done = now;
    PendingPut put;
    if (!spare_blocks_.empty()) {  // a finished put's buffer: no large allocation per write
      put.blocks = std::move(spare_blocks_.back());
      spare_blocks_.pop_back();
      put.blocks.clear();
    }
    put.blocks.reserve(end - first);
    for (uint32_t i = first; i < end; ++i) {
      const Key key = ctx_.KeyOf(ids[i]);
      const PutAdmission adm = dir_.BeginPut(key);
      if (adm == PutAdmission::kPresent) continue;
      std::optional<uint64_t> off = AllocateDram(now, &done);
      if (off) done = ctx_.host_copy->Transfer(done, obj_bytes_);
      put.blocks.push_back({key, adm, off});
    }
    // The objects stay invisible (writing) until the put's copies are done.
    if (!put.blocks.empty()) {
      const uint64_t id = next_put_++;
      puts_.emplace(id, std::move(put));
      ctx_.schedule(done, kPutDone, id);
    }
    return done;
  }

  void OnEvent(uint32_t kind, uint64_t a, double now) override {
    if (kind == kPutDone) {
      auto p = puts_.find(a);
      for (const PendingPut::Block& b : p->second.blocks) dir_.FinishPut(b.key, b.admission, b.off);
      if (spare_blocks_.size() < kSpareBuffers)
        spare_blocks_.push_back(std::move(p->second.blocks));
      puts_.erase(p);
      return;
    }
    auto it = jobs_.find(static_cast<uint32_t>(a));
    if (it == jobs_.end()) return;
    Job& job = it->second;
    switch (kind) {
      case kStagingDeadline: {
        auto w = std::find(waiters_.begin(), waiters_.end(), job.req);
        if (w == waiters_.end()) return;  // got its staging before the deadline
        waiters_.erase(w);
        dir_.CountRevoked(static_cast<uint32_t>(job.keep), &job.revoked);
        job.keep = 0;
        Deliver(job, std::max(job.t, now));
        return;
      }
      case kBatchDone: {
        job.next_batch++;
        // The deadline is checked as each batch completes: a late one is not delivered, and the
        // batches after it are never issued.
        if (now > job.deadline) {
          FinishReads(job, now);
        } else {
          job.landed_reads = job.batch_ends[job.next_batch - 1];
          if (job.next_batch < job.batch_ends.size()) {
            IssueBatch(job, now);
          } else {
            FinishReads(job, now);
          }
        }
        return;
      }
      case kPromoted:
        if (!gds_ && job.staging_bytes) {
          staging_.Release(job.staging_off, job.staging_bytes);
          ServeWaiters(now);
        }
        jobs_.erase(it);
        return;
    }
  }

  void Finish(SimReport* rep) override {
    const baseline::TieredStats s = dir_.Stats();
    rep->ssd_bytes_delivered = ssd_delivered_;
    rep->dram_bytes_written = s.dram.written_bytes;
    rep->bytes_admitted = s.dram.admitted_bytes + s.ssd.admitted_bytes;
    rep->promotions = s.promotions;
    rep->evictions = s.evictions;
    rep->buckets_dropped = s.buckets_dropped;
  }

 private:
  struct Job {
    uint32_t req = 0;
    std::vector<Key> keys;
    std::vector<uint8_t> found;
    double deadline = 0, t = 0;
    uint32_t dram_blocks = 0, revoked = 0;
    std::vector<uint32_t> ssd_hits;
    size_t keep = 0;
    uint64_t staging_off = 0, staging_bytes = 0;
    std::vector<int64_t> pinned_buckets;
    CoalescePlan plan;
    std::vector<size_t> batch_ends;
    size_t next_batch = 0, landed_reads = 0;
  };

  struct PendingPut {
    struct Block {
      Key key;
      PutAdmission admission;
      std::optional<uint64_t> off;
    };
    std::vector<Block> blocks;
  };

  static TieredStoreOptions Options(const SimContext& ctx) {
    const SimProfile& p = *ctx.profile;
    TieredStoreOptions o;
    o.dram_bytes = p.dram_bytes;
    if (ctx.policy != SimPolicy::kDramOnly) {
      o.ssd_dirs = {"(simulated)"};
      o.ssd_bytes = p.ssd_bytes;
    }
    o.bucket_bytes = p.bucket_bytes;
    o.bucket_keys = p.bucket_keys;
    o.staging_bytes = p.staging_bytes;
    o.prefetch_timeout_base_s = p.prefetch_timeout_base_s;
    o.prefetch_timeout_per_ki_token_s = p.prefetch_timeout_per_ki_token_s;
    o.prefetch_timeout_max_s = p.prefetch_timeout_max_s;
    o.promote_on_hit = ctx.policy == SimPolicy::kTiered;  // GDS data never passes through host
    o.promotion_rereads = p.promotion_rereads;
    o.prefetch_batch_objects = p.prefetch_batch_objects;
    o.tokens_per_block = ctx.block_tokens;
    o.max_io_bytes = p.max_io_bytes;
    return o;
  }

  // TieredStore::AllocateDram with its evictions: the offload writes go to the SSD, and whoever
  // allocates waits for them (`*t`).
  std::optional<uint64_t> AllocateDram(double now, double* t) {
    for (int attempt = 0; attempt < TieredDirectory::kAllocateAttempts; ++attempt) {
      if (dir_.NeedsEviction(obj_bytes_)) {
        std::vector<EvictionVictim> victims = dir_.ChooseVictims();
        uint64_t bytes = 0;
        for (const EvictionVictim& v : victims) bytes += v.write ? obj_bytes_ : 0;
        if (bytes > 0) {
          // Victims are appended back to back: one write per run of max_io bytes.
          *t =
              ctx_.ssd->Submit(std::max(now, *t), CommandsFor(bytes, p_.max_io_bytes), bytes, true);
        }
        dir_.FinishEviction(victims, true);
      }
      auto off = dir_.TryAllocateDram(obj_bytes_);
      if (off.ok()) return *off;
    }
    return std::nullopt;
  }

  void ServeWaiters(double now) {
    for (auto w = waiters_.begin(); w != waiters_.end();) {
      Job& job = jobs_.at(*w);
      if (auto off = staging_.TryAcquire(job.staging_bytes)) {
        job.staging_off = *off;
        w = waiters_.erase(w);
        StartReads(job, now);
      } else {
        ++w;
      }
    }
  }

  void StartReads(Job& job, double now) {
    std::vector<uint32_t> keep(job.ssd_hits.begin(), job.ssd_hits.begin() + job.keep);
    std::vector<SliceRead> slices = dir_.PinBuckets(job.keys, keep, &job.pinned_buckets);
    if (gds_) {
      // Straight into the engine's layer-first paged KV: each object's layers are separate
      // destinations, so each (object, layer) is one read (its planes are adjacent in the object).
      std::vector<SliceRead> per_layer;
      const uint64_t layer_bytes = uint64_t{ctx_.layout.num_planes} * ctx_.layout.slice_bytes;
      for (const SliceRead& s : slices) {
        for (uint32_t l = 0; l < ctx_.layout.num_layers; ++l) {
          per_layer.push_back(
              SliceRead{s.file, s.offset + l * layer_bytes, layer_bytes, nullptr, s.layer, l});
        }
      }
      slices = std::move(per_layer);
    }
    if (slices.empty()) {
      FinishReads(job, std::max(job.t, now));
      return;
    }
    (void)PlanReads(slices, baseline::StagedReadOptions(opts_), &job.plan);
    job.batch_ends = baseline::PartitionReadBatches(
        job.plan, gds_ ? opts_.prefetch_batch_objects * ctx_.layout.num_layers
                       : opts_.prefetch_batch_objects);
    job.next_batch = 0;
    IssueBatch(job, now);
  }

  void IssueBatch(Job& job, double now) {
    const size_t begin = job.next_batch == 0 ? 0 : job.batch_ends[job.next_batch - 1];
    const size_t end = job.batch_ends[job.next_batch];
    uint64_t bytes = 0;
    for (size_t k = begin; k < end; ++k) bytes += job.plan.reads[k].len;
    const double t = ctx_.ssd->Submit(now, end - begin, bytes, false, read_gbps_);
    ctx_.schedule(t, kBatchDone, job.req);
  }

  void FinishReads(Job& job, double now) {
    ReqState& r = (*ctx_.reqs)[job.req];
    const size_t landed =
        job.plan.slices.empty() ? 0 : baseline::SlicesLanded(job.plan, job.landed_reads);
    // Objects landed (GDS: all layers of an object).
    std::vector<uint32_t> delivered_keys;
    if (gds_) {
      std::vector<uint32_t> layers(job.keys.size(), 0);
      for (size_t s = 0; s < landed; ++s) {
        if (++layers[job.plan.slices[s].layer] == ctx_.layout.num_layers) {
          delivered_keys.push_back(job.plan.slices[s].layer);
        }
      }
    } else {
      for (size_t s = 0; s < landed; ++s) delivered_keys.push_back(job.plan.slices[s].layer);
    }
    const uint32_t pinned_objs =
        gds_ ? static_cast<uint32_t>(job.plan.slices.size() / ctx_.layout.num_layers)
             : static_cast<uint32_t>(job.plan.slices.size());
    const uint32_t late = pinned_objs - static_cast<uint32_t>(delivered_keys.size());
    if (late > 0) dir_.CountRevoked(late, &job.revoked);
    dir_.UnpinBuckets(job.pinned_buckets);
    for (uint32_t ki : delivered_keys) job.found[ki] = 1;
    ssd_delivered_ += delivered_keys.size() * ctx_.block_bytes();
    r.ssd_in = now;
    // Staged objects are copied to the GPU (GDS: scattered into their page slots).
    const uint64_t bytes = delivered_keys.size() * ctx_.block_bytes();
    const double ready =
        gds_ ? std::max(job.t,
                        now + TransferSeconds(bytes / ctx_.layout.num_layers, p_.scatter_gbps))
             : std::max(job.t, ctx_.h2d->Transfer(now, bytes));
    Deliver(job, ready);
    // Promotion of the delivered objects: read again from SSD, then copied into DRAM.
    double t = ready;
    if (!gds_ && opts_.promote_on_hit && !delivered_keys.empty()) {
      if (opts_.promotion_rereads) {
        uint64_t rb = 0, cmds = 0;
        for (size_t k = 0; k < job.landed_reads; ++k) {
          rb += job.plan.reads[k].len;
          cmds++;
        }
        t = ctx_.ssd->Submit(t, cmds, rb, false, read_gbps_);
        dir_.counters().promotion_read_bytes += rb;
      }
      for (uint32_t ki : delivered_keys) {
        if (!dir_.BeginPromotion(job.keys[ki])) continue;
        std::optional<uint64_t> off = AllocateDram(t, &t);
        if (off) t = ctx_.host_copy->Transfer(t, obj_bytes_);
        dir_.FinishPromotion(job.keys[ki], off);
      }
    }
    ctx_.schedule(t, kPromoted, job.req);
  }

  // The request is ready at `t`: its delivered prefix is the leading run of found keys.
  void Deliver(Job& job, double t) {
    ReqState& r = (*ctx_.reqs)[job.req];
    uint32_t n = 0, ssd = 0;
    std::vector<uint8_t> is_ssd(job.keys.size(), 0);
    for (uint32_t i : job.ssd_hits) is_ssd[i] = 1;
    while (n < job.found.size() && job.found[n]) ssd += is_ssd[n++];
    r.delivered = n;
    r.from_ssd = ssd;
    r.revoked = job.revoked;
    ctx_.restored(job.req, t);
    // Nothing was staged or read: the job ends here (else at kPromoted).
    if (job.ssd_hits.empty() || job.keep == 0) jobs_.erase(job.req);
  }

  SimContext& ctx_;
  const SimProfile& p_;
  const bool gds_;
  const TieredStoreOptions opts_;
  ExtentAllocator dram_alloc_;
  baseline::DramSpaceOf<ExtentAllocator> dram_space_;
  TieredDirectory dir_;
  baseline::StagingPool staging_;
  uint64_t obj_bytes_ = 0;
  double read_gbps_ = 0;
  // The keys of the last Lookup: request keys_req_'s blocks from keys_first_ on.
  std::vector<Key> keys_;
  uint32_t keys_req_ = UINT32_MAX, keys_first_ = 0;
  std::unordered_map<uint32_t, Job> jobs_;
  std::deque<uint32_t> waiters_;
  std::unordered_map<uint64_t, PendingPut> puts_;
  static constexpr size_t kSpareBuffers = 64;
  std::vector<std::vector<PendingPut::Block>> spare_blocks_;  // of finished puts, for reuse
  uint64_t next_put_ = 0;
  uint64_t ssd_delivered_ = 0;
};

}  // namespace

std::unique_ptr<StoreModel> MakeTieredModel(SimContext* ctx) {
  return std::make_unique<TieredModel>(ctx);
}

}  // namespace flatcake::sim::internal
