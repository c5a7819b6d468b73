#include "io/layered_restore.h"

#include <utility>

namespace flatcake {
namespace {

void AddStats(const ReaderStats& from, ReaderStats* to) {
  to->reads_issued += from.reads_issued;
  to->bytes_read += from.bytes_read;
  to->bytes_delivered += from.bytes_delivered;
  to->bytes_gap += from.bytes_gap;
  to->direct_reads += from.direct_reads;
  to->scattered_reads += from.scattered_reads;
  to->vectored_reads += from.vectored_reads;
  to->vectored_ops += from.vectored_ops;
}

}  // namespace

LayeredRestore::LayeredRestore(bool split, uint32_t first_layer,
                               std::function<void(uint32_t)> on_layer, DoneCallback on_done)
    : split_(split),
      first_layer_(first_layer),
      on_layer_(std::move(on_layer)),
      on_done_(std::move(on_done)) {}

std::shared_ptr<LayeredRestore> LayeredRestore::Start(RestoreReader& reader, uint64_t total_slices,
                                                      uint32_t first_layer, uint32_t end_layer,
                                                      const SliceSource& source,
                                                      std::function<void(uint32_t)> on_layer,
                                                      SliceCallback on_slice,
                                                      DoneCallback on_done) {
  // The reader counts layers from 0: those below the range have no slices and are reported at
  // once by each part, and are not passed on.
  const uint32_t num_layers = end_layer;
  const bool split = end_layer - first_layer > 1 && total_slices >= kSplitSlices;
  std::shared_ptr<LayeredRestore> self(
      new LayeredRestore(split, first_layer, std::move(on_layer), std::move(on_done)));
  {
    // Uncontended (no part has started yet); the lock is taken for the analysis.
    MutexLock lock(self->mu_);
    self->parts_left_ = split ? 2 : 1;
  }
  LayeredRestore* const raw = self.get();
  // Each part's end holds the restore alive until the last one has run.
  ::flatcake::DoneCallback part_done = [self](const Status& st, const ReaderStats& rs) {
    self->PartDone(st, rs);
  };
  std::vector<SliceRead> first;
  source(first_layer, split ? first_layer + 1 : end_layer, &first);
  auto h1 = reader.Start(
      first, num_layers, [raw](uint32_t l, const Status& st) { raw->OnFirstLayer(l, st); },
      on_slice, nullptr, part_done);
  if (!h1.ok()) {
    // Nothing was started: both parts end here, with the error.
    for (int i = split ? 2 : 1; i > 0; --i) self->PartDone(h1.status(), ReaderStats{});
    return self;
  }
  self->Hold(*h1, true);
  if (!split) return self;
  // The first layer is on its way: build the rest. It goes out once the first layer's reads are
  // back, while their bytes are being copied out.
  std::vector<SliceRead> rest;
  source(first_layer + 1, end_layer, &rest);
  auto h2 = reader.Start(
      rest, num_layers, [raw](uint32_t l, const Status& st) { raw->OnRestLayer(l, st); }, on_slice,
      *h1, part_done);
  if (!h2.ok()) {
    self->Fail(h2.status());
    self->PartDone(h2.status(), ReaderStats{});  // stands for the rest that never started
    return self;
  }
  self->Hold(*h2, false);
  return self;
}

void LayeredRestore::Hold(std::shared_ptr<ReaderHandle> h, bool first) {
  MutexLock lock(mu_);
  if (done_) return;
  if (!status_.ok()) h->Cancel(status_);
  (first ? first_ : rest_) = std::move(h);
}

void LayeredRestore::Cancel(const Status& why) { Fail(why); }

void LayeredRestore::Fail(const Status& st) {
  MutexLock lock(mu_);
  if (done_ || !status_.ok()) return;
  status_ = st;
  if (first_) first_->Cancel(st);
  if (rest_) rest_->Cancel(st);
}

void LayeredRestore::PartDone(const Status& st, const ReaderStats& rs) {
  if (!st.ok()) Fail(st);
  Status final_status;
  ReaderStats final_stats;
  std::shared_ptr<ReaderHandle> first, rest;  // released outside the lock
  {
    MutexLock lock(mu_);
    AddStats(rs, &stats_);
    if (--parts_left_ > 0) return;
    done_ = true;
    final_status = status_;
    final_stats = stats_;
    first = std::move(first_);
    rest = std::move(rest_);
  }
  if (on_done_) on_done_(final_status, final_stats);
}

void LayeredRestore::OnFirstLayer(uint32_t layer, const Status& st) {
  if (layer < first_layer_) return;  // below the range
  if (!split_) {
    if (st.ok() && on_layer_) on_layer_(layer);
    return;
  }
  if (layer != first_layer_) return;  // the first part has only that layer; the rest the others
  MutexLock lock(gate_mu_);
  if (st.ok()) {
    if (on_layer_) on_layer_(layer);
  } else {
    Fail(st);  // cancels the rest
  }
  if (on_layer_) {
    for (uint32_t l : held_) on_layer_(l);
  }
  held_.clear();
  first_reported_ = true;
}

void LayeredRestore::OnRestLayer(uint32_t layer, const Status& st) {
  if (layer <= first_layer_ || !st.ok()) return;  // below the range, or the first part's
  MutexLock lock(gate_mu_);
  if (first_reported_) {
    if (on_layer_) on_layer_(layer);
  } else {
    held_.push_back(layer);
  }
}

}  // namespace flatcake
