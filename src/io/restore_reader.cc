#include "io/restore_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "util/align.h"

namespace flatcake {
namespace {

constexpr uint64_t kNone = ~0ull;
constexpr uint64_t kStagingAlign = 4096;      // O_DIRECT buffer alignment
constexpr uint64_t kMaxDiscard = 1ull << 20;  // larger gaps take several discard iovecs

// Bytes of slice `s` that fall inside read `r`: [lo, hi) in file offsets.
inline void Intersect(const SliceRead& s, const MergedRead& r, uint64_t* lo, uint64_t* hi) {
  *lo = std::max(s.offset, r.offset);
  *hi = std::min(s.offset + s.len, r.offset + r.len);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReaderHandle

ReaderHandle::ReaderHandle(RestoreReader* reader, CoalescePlan plan, uint32_t num_layers,
                           LayerCallback cb, SliceCallback on_slice)
    : reader_(reader),
      plan_(std::move(plan)),
      num_layers_(num_layers),
      on_layer_(std::move(cb)),
      on_slice_(std::move(on_slice)) {
  if (on_slice_) {
    slice_left_.reset(new std::atomic<uint64_t>[plan_.slices.size()]);
    for (size_t k = 0; k < plan_.slices.size(); ++k) {
      slice_left_[k].store(plan_.slices[k].len, std::memory_order_relaxed);
    }
  }
}

Status ReaderHandle::WaitLayer(uint32_t layer) {
  if (layer >= num_layers_) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(num_layers_) + " layers)");
  }
  MutexLock lock(mu_);
  while (layer_left_[layer] != 0) cv_.Wait(mu_);
  return layer_status_[layer];
}

Status ReaderHandle::Wait() {
  MutexLock lock(mu_);
  while (!done_) cv_.Wait(mu_);
  return first_error_;
}

void ReaderHandle::Cancel(const Status& why) {
  {
    MutexLock lock(mu_);
    if (done_) return;
    if (first_error_.ok()) first_error_ = why;
    failed_.store(true, std::memory_order_relaxed);
  }
  // Wakes the issuer thread, which fails the reads not yet issued (once this restore is at the
  // front of its queue).
  MutexLock lock(reader_->mu_);
  reader_->cv_.NotifyAll();
}

bool ReaderHandle::done() const {
  MutexLock lock(mu_);
  return done_;
}

ReaderStats ReaderHandle::stats() const {
  ReaderStats s;
  s.reads_issued = reads_issued_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.bytes_delivered = bytes_delivered_.load(std::memory_order_relaxed);
  s.bytes_gap = plan_.bytes_gap;
  s.direct_reads = direct_.load(std::memory_order_relaxed);
  s.scattered_reads = scattered_.load(std::memory_order_relaxed);
  s.vectored_reads = vectored_.load(std::memory_order_relaxed);
  s.vectored_ops = vectored_ops_.load(std::memory_order_relaxed);
  return s;
}

void ReaderHandle::ReadBack() {
  // Relaxed: the count orders nothing else (window space is accounted under the reader's lock).
  // No wake-up here: CompleteRead, which always follows, releases the read's space and so issues
  // what now fits, under the lock TakeBatch checks the count under, the waiting restore included.
  // (A read skipped after an error held no space; the issuer thread that skipped it takes the
  // next batch itself.)
  device_left_.fetch_sub(1, std::memory_order_relaxed);
}

void ReaderHandle::OnIoComplete(uint64_t tag, const Status& status) {
  const auto idx = static_cast<uint32_t>(tag);
  ReadState& rs = reads_[idx];
  if (rs.ops > 1) {
    // A split vectored read lands when its last op does, with the first error of any of them:
    // until then other ops may still be writing into the destinations.
    Status combined;
    {
      MutexLock lock(mu_);
      if (!status.ok() && rs.op_error.ok()) rs.op_error = status;
      if (--rs.ops_left > 0) return;
      combined = rs.op_error;
    }
    ReadBack();
    CompleteRead(idx, combined);
    return;
  }
  ReadBack();
  CompleteRead(idx, status);
}

void ReaderHandle::CompleteRead(uint32_t idx, const Status& status) {
  const MergedRead& r = plan_.reads[idx];
  const ReadState& rs = reads_[idx];
  uint64_t delivered = 0;
  if (status.ok()) {
    if (rs.mode == Mode::kDirect && !on_slice_) {
      delivered = r.len;
    } else {
      const bool copy = rs.mode == Mode::kScattered;
      for (uint32_t k = r.first_slice; k < r.first_slice + r.slice_count; ++k) {
        const SliceRead& s = plan_.slices[k];
        uint64_t lo, hi;
        Intersect(s, r, &lo, &hi);
        if (lo >= hi) continue;
        uint8_t* const to = s.dest + (lo - s.offset);
        // Only a scattered read has a staging window (rs.buf); a direct one has none, and an
        // offset from its null pointer would be undefined behaviour.
        const uint8_t* const from = copy ? rs.buf + (lo - r.offset) : nullptr;
        delivered += hi - lo;
        if (copy && on_slice_ && lo == s.offset && hi == s.offset + s.len) {
          // The whole slice is here: the callback copies it out of the staging window and can
          // hash it in the same pass (one trip to memory instead of two).
          on_slice_(s, from, to);
          continue;
        }
        if (copy) std::memcpy(to, from, hi - lo);
        // acq_rel: the worker that lands the last piece sees the other pieces' bytes.
        if (on_slice_ && slice_left_[k].fetch_sub(hi - lo, std::memory_order_acq_rel) == hi - lo) {
          on_slice_(s, s.dest, nullptr);
        }
      }
    }
    bytes_read_.fetch_add(r.len, std::memory_order_relaxed);
    bytes_delivered_.fetch_add(delivered, std::memory_order_relaxed);
  }
  // The failure is recorded before the window space goes back: Release issues the reads that now
  // fit, and must already see that this restore failed (after the first error it issues nothing
  // more).
  {
    MutexLock lock(mu_);
    for (uint32_t k = r.first_slice; k < r.first_slice + r.slice_count; ++k) {
      const SliceRead& s = plan_.slices[k];
      uint64_t lo, hi;
      Intersect(s, r, &lo, &hi);
      if (lo >= hi) continue;
      layer_left_[s.layer] -= hi - lo;
      if (!status.ok() && layer_status_[s.layer].ok()) layer_status_[s.layer] = status;
    }
    if (!status.ok()) {
      if (first_error_.ok()) first_error_ = status;
      failed_.store(true, std::memory_order_relaxed);
    }
    cv_.NotifyAll();
  }
  reader_->Release(rs, r.len);
  ReportLayers();
  // Counted only now, after this thread's last use of the handle: the thread that takes the count
  // to zero may release the last reference.
  bool finished;
  {
    MutexLock lock(mu_);
    finished = --reads_left_ == 0;
  }
  if (!finished) return;
  // The reader's totals include this restore before anyone waiting on it wakes up; after
  // HandleDone the reader may be gone, so only the handle is touched below.
  reader_->HandleDone(stats());
  std::shared_ptr<ReaderHandle> self;
  Status final_status;
  {
    MutexLock lock(mu_);
    done_ = true;
    self = std::move(keepalive_);
    final_status = first_error_;
    cv_.NotifyAll();
  }
  if (on_done_) on_done_(final_status, stats());
  // `self` may drop the last reference here, after the lock is released.
}

void ReaderHandle::ReportLayers() {
  if (!on_layer_) return;
  MutexLock report(report_mu_);
  std::vector<std::pair<uint32_t, Status>> ready;
  {
    MutexLock lock(mu_);
    while (next_report_ < num_layers_ && layer_left_[next_report_] == 0) {
      ready.emplace_back(next_report_, layer_status_[next_report_]);
      ++next_report_;
    }
  }
  for (const auto& [layer, status] : ready) on_layer_(layer, status);
}

// ---------------------------------------------------------------------------------------------
// RestoreReader

RestoreReader::RestoreReader(IoEngine& engine, const ReaderOptions& options)
    : engine_(engine), options_(options), coalesce_(options.coalesce) {}

bool RestoreReader::BuildVectored(const CoalescePlan& p, const MergedRead& r,
                                  std::vector<iovec>* iov) const {
  const size_t mark = iov->size();
  const uint64_t a = options_.vector_alignment;
  bool last_is_slice = false;  // the last entry is a destination (may be extended), not discard
  auto discard = [&](uint64_t n) {
    if (n % a != 0 || discard_.empty()) return false;
    for (; n > 0; n -= std::min(n, discard_bytes_)) {
      iov->push_back(iovec{discard_.data(), std::min(n, discard_bytes_)});
    }
    last_is_slice = false;
    return true;
  };
  auto fail = [&] {
    iov->resize(mark);
    return false;
  };
  uint64_t pos = r.offset;
  for (uint32_t k = r.first_slice; k < r.first_slice + r.slice_count; ++k) {
    const SliceRead& s = p.slices[k];
    uint64_t lo, hi;
    Intersect(s, r, &lo, &hi);
    if (lo >= hi) continue;
    if (lo < pos) return fail();  // overlapping slices: only a copy can serve both
    if (lo > pos && !discard(lo - pos)) return fail();
    uint8_t* dest = s.dest + (lo - s.offset);
    const uint64_t n = hi - lo;
    if (reinterpret_cast<uintptr_t>(dest) % a != 0 || n % a != 0) return fail();
    if (last_is_slice &&
        static_cast<uint8_t*>(iov->back().iov_base) + iov->back().iov_len == dest) {
      iov->back().iov_len += n;  // destinations that happen to continue each other: one entry
    } else {
      iov->push_back(iovec{dest, n});
    }
    last_is_slice = true;
    pos = hi;
  }
  if (pos < r.offset + r.len && !discard(r.offset + r.len - pos)) return fail();
  return true;
}

Result<std::unique_ptr<RestoreReader>> RestoreReader::Create(IoEngine& engine,
                                                             const ReaderOptions& options) {
  FC_RETURN_IF_ERROR(ValidateCoalesceOptions(options.coalesce));
  if (options.vector_alignment == 0 || !std::has_single_bit(options.vector_alignment)) {
    return Status::InvalidArgument("restore: vector_alignment must be a power of two, got " +
                                   std::to_string(options.vector_alignment));
  }
  if (options.max_iovecs == 0 || options.max_iovecs > kMaxIoVecs) {
    return Status::InvalidArgument("restore: max_iovecs must be in 1.." +
                                   std::to_string(kMaxIoVecs) + ", got " +
                                   std::to_string(options.max_iovecs));
  }
  const uint64_t align = std::max(options.coalesce.alignment, kStagingAlign);
  if (options.window_bytes < align) {
    return Status::InvalidArgument("restore window (" + std::to_string(options.window_bytes) +
                                   " bytes) smaller than one aligned block");
  }
  std::unique_ptr<RestoreReader> reader(new RestoreReader(engine, options));
  reader->window_bytes_ = options.window_bytes / align * align;
  reader->inflight_budget_ = options.inflight_bytes == 0
                                 ? reader->window_bytes_
                                 : std::min(options.inflight_bytes, reader->window_bytes_);
  // Every read must fit the window, or it could never be staged.
  if (reader->coalesce_.max_io > reader->window_bytes_) {
    reader->coalesce_.max_io =
        reader->window_bytes_ / options.coalesce.alignment * options.coalesce.alignment;
  }
  // Pre-faulted: the pages are faulted in now, not during restores. Huge pages for a window of
  // one or more; a smaller one (a test's, a fuzz target's) is not rounded up to 2 MiB.
  AlignedBufferOptions window_options =
      AlignedBuffer::HugePagesWhenLarge(reader->window_bytes_, kStagingAlign);
  window_options.prefault = true;
  Result<AlignedBuffer> window = AlignedBuffer::Allocate(reader->window_bytes_, window_options);
  if (!window.ok()) {
    return Status::NoSpace("cannot allocate a " + std::to_string(reader->window_bytes_) +
                           " byte restore window");
  }
  reader->window_ = std::move(window).value();
  if (options.allow_vectored) {
    // Big enough for a bridged gap or an alignment widening in one entry, in the common case.
    const uint64_t discard_align = std::max(options.vector_alignment, kStagingAlign);
    const uint64_t want = std::max(options.coalesce.max_gap, options.coalesce.alignment);
    reader->discard_bytes_ = AlignUp(std::min(want, kMaxDiscard), discard_align);
    Result<AlignedBuffer> discard = AlignedBuffer::Allocate(
        reader->discard_bytes_, {.alignment = discard_align, .prefault = true});
    if (!discard.ok()) return Status::NoSpace("cannot allocate the restore discard buffer");
    reader->discard_ = std::move(discard).value();
  }
  if (options.register_window) {
    IoBufferRegion region{reader->window_.data(), reader->window_bytes_};
    reader->window_registered_ = engine.RegisterBuffers({&region, 1}).ok();
  }
  reader->issuer_ = std::thread([r = reader.get()] { r->IssueLoop(); });
  return reader;
}

RestoreReader::~RestoreReader() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    cv_.NotifyAll();
    while (active_ != 0) cv_.Wait(mu_);
  }
  if (issuer_.joinable()) issuer_.join();
  if (window_registered_) {
    IoBufferRegion region{window_.data(), window_bytes_};
    engine_.UnregisterBuffers({&region, 1});
  }
}

std::vector<uint32_t> RestoreReader::ChooseReadModes(ReaderHandle& handle) const {
  const CoalescePlan& p = handle.plan_;
  const size_t n = p.reads.size();
  handle.reads_.resize(n);
  if (options_.allow_vectored) handle.iov_.reserve(p.slices.size() + n);
  std::vector<uint32_t> min_layer(n);
  const uint64_t align = std::max(coalesce_.alignment, kStagingAlign);
  for (size_t i = 0; i < n; ++i) {
    const MergedRead& r = p.reads[i];
    uint32_t ml = ~0u;
    bool direct = options_.allow_direct;
    uint64_t expect_off = r.offset;
    uint8_t* expect_dest = nullptr;
    for (uint32_t k = r.first_slice; k < r.first_slice + r.slice_count; ++k) {
      const SliceRead& s = p.slices[k];
      ml = std::min(ml, s.layer);
      if (!direct) continue;
      uint64_t lo, hi;
      Intersect(s, r, &lo, &hi);
      uint8_t* dest = s.dest + (lo - s.offset);
      if (lo != expect_off || (expect_dest != nullptr && dest != expect_dest)) {
        direct = false;
        continue;
      }
      if (expect_dest == nullptr) {
        direct = reinterpret_cast<uintptr_t>(dest) % align == 0;
      }
      expect_off = hi;
      expect_dest = dest + (hi - lo);
    }
    direct = direct && expect_off == r.offset + r.len;
    min_layer[i] = ml;
    ReaderHandle::ReadState& rs = handle.reads_[i];
    if (direct) {
      rs.mode = ReaderHandle::Mode::kDirect;
      rs.buf = p.slices[r.first_slice].dest + (r.offset - p.slices[r.first_slice].offset);
    } else if (options_.allow_vectored) {
      const size_t first = handle.iov_.size();
      const bool lines_up = BuildVectored(p, r, &handle.iov_);
      if (lines_up && r.len < options_.min_vector_entry_bytes * (handle.iov_.size() - first)) {
        handle.iov_.resize(first);  // entries too small: one contiguous read and a copy is faster
      } else if (lines_up) {
        rs.mode = ReaderHandle::Mode::kVectored;
        rs.iov_first = static_cast<uint32_t>(first);
        rs.iov_count = static_cast<uint32_t>(handle.iov_.size() - first);
        rs.ops = (rs.iov_count + options_.max_iovecs - 1) / options_.max_iovecs;
        rs.ops_left = rs.ops;
      }
    }
  }
  return min_layer;
}

Result<std::shared_ptr<ReaderHandle>> RestoreReader::Start(
    std::span<const SliceRead> slices, uint32_t num_layers, LayerCallback on_layer,
    SliceCallback on_slice, std::shared_ptr<ReaderHandle> after, DoneCallback on_done) {
  if (after != nullptr && after->reader_ != this) {
    return Status::InvalidArgument("restore: `after` was started on another reader");
  }
  uint32_t max_layer = 0;
  for (const auto& s : slices) max_layer = std::max(max_layer, s.layer);
  if (num_layers == 0) {
    num_layers = slices.empty() ? 0 : max_layer + 1;
  } else if (!slices.empty() && max_layer >= num_layers) {
    return Status::InvalidArgument("restore: slice layer " + std::to_string(max_layer) +
                                   " >= num_layers " + std::to_string(num_layers));
  }
  FC_ASSIGN_OR_RETURN(CoalescePlan plan, PlanReads(slices, coalesce_));
  std::shared_ptr<ReaderHandle> h(new ReaderHandle(this, std::move(plan), num_layers,
                                                   std::move(on_layer), std::move(on_slice)));
  h->on_done_ = std::move(on_done);
  const CoalescePlan& p = h->plan_;
  {
    MutexLock lock(h->mu_);  // uncontended: no other thread has the handle yet
    h->layer_left_.assign(num_layers, 0);
    h->layer_status_.assign(num_layers, Status::OK());
    for (const auto& s : p.slices) h->layer_left_[s.layer] += s.len;
  }

  const size_t n = p.reads.size();
  const std::vector<uint32_t> min_layer = ChooseReadModes(*h);
  h->issue_order_.resize(n);
  for (uint32_t i = 0; i < n; ++i) h->issue_order_[i] = i;
  std::stable_sort(h->issue_order_.begin(), h->issue_order_.end(),
                   [&](uint32_t a, uint32_t b) { return min_layer[a] < min_layer[b]; });

  h->ReportLayers();  // layers without slices
  if (n == 0) {
    {
      MutexLock lock(h->mu_);
      h->done_ = true;
    }
    if (h->on_done_) h->on_done_(Status::OK(), h->stats());  // not under the handle's lock
    return h;
  }
  {
    MutexLock lock(h->mu_);
    h->reads_left_ = n;
    h->keepalive_ = h;
  }
  h->device_left_.store(n, std::memory_order_relaxed);
  h->after_ = std::move(after);
  {
    MutexLock lock(mu_);
    ++active_;
    queue_.push_back(h);
  }
  cv_.NotifyAll();
  return h;
}

Status RestoreReader::Restore(std::span<const SliceRead> slices) {
  FC_ASSIGN_OR_RETURN(auto handle, Start(slices));
  return handle->Wait();
}

ReaderStats RestoreReader::stats() const {
  MutexLock lock(mu_);
  return totals_;
}

uint64_t RestoreReader::RingAllocate(uint64_t len) {
  // An empty ring restarts at the window's start: otherwise a read needing more than the space
  // between the old head position and the window's end (plus the space before it, which is free
  // but sits behind the padding) would wait forever with nothing in flight to free anything.
  if (ring_.empty()) ring_tail_ = ring_head_ = AlignUp(ring_head_, window_bytes_);
  const uint64_t pos = ring_head_ % window_bytes_;
  const uint64_t pad = pos + len > window_bytes_ ? window_bytes_ - pos : 0;
  if (ring_head_ + pad + len - ring_tail_ > window_bytes_) return kNone;
  if (pad > 0) {
    ring_.push_back(RingBlock{ring_head_, pad, true});
    ring_head_ += pad;
  }
  const uint64_t start = ring_head_;
  ring_.push_back(RingBlock{start, len, false});
  ring_head_ += len;
  return start;
}

void RestoreReader::Release(const ReaderHandle::ReadState& read, uint64_t len) {
  {
    MutexLock lock(mu_);
    if (!read.issued) return;  // skipped after an error: it never took any budget
    inflight_ -= std::min(inflight_, len);
    if (read.mode == ReaderHandle::Mode::kScattered && read.ring_pos != kNone) {
      auto it = std::lower_bound(ring_.begin(), ring_.end(), read.ring_pos,
                                 [](const RingBlock& b, uint64_t pos) { return b.start < pos; });
      if (it != ring_.end() && it->start == read.ring_pos) it->freed = true;
      while (!ring_.empty() && ring_.front().freed) {
        ring_tail_ = ring_.front().start + ring_.front().len;
        ring_.pop_front();
      }
    }
  }
  IssueFreedSpace();
}

void RestoreReader::HandleDone(const ReaderStats& s) {
  MutexLock lock(mu_);
  totals_.reads_issued += s.reads_issued;
  totals_.bytes_read += s.bytes_read;
  totals_.bytes_delivered += s.bytes_delivered;
  totals_.bytes_gap += s.bytes_gap;
  totals_.direct_reads += s.direct_reads;
  totals_.scattered_reads += s.scattered_reads;
  totals_.vectored_reads += s.vectored_reads;
  totals_.vectored_ops += s.vectored_ops;
  --active_;
  cv_.NotifyAll();
}

void RestoreReader::AppendVectoredOps(ReaderHandle& h, uint32_t idx, std::vector<IoOp>* batch) {
  const MergedRead& r = h.plan_.reads[idx];
  const ReaderHandle::ReadState& rs = h.reads_[idx];
  uint64_t offset = r.offset;
  for (uint32_t k = 0; k < rs.iov_count; k += options_.max_iovecs) {
    const iovec* v = &h.iov_[rs.iov_first + k];
    const uint32_t cnt = std::min(options_.max_iovecs, rs.iov_count - k);
    uint64_t len = 0;
    for (uint32_t j = 0; j < cnt; ++j) len += v[j].iov_len;
    IoOp op{IoOpcode::kRead, r.file, offset, v[0].iov_base, len, idx};
    op.iov = v;
    op.iovcnt = cnt;
    batch->push_back(op);
    offset += len;
  }
  h.vectored_.fetch_add(1, std::memory_order_relaxed);
  h.vectored_ops_.fetch_add(rs.ops, std::memory_order_relaxed);
}

std::shared_ptr<ReaderHandle> RestoreReader::TakeBatch(std::vector<IoOp>* batch,
                                                       std::vector<uint32_t>* skipped,
                                                       bool* window_full) {
  *window_full = false;
  if (queue_.empty()) return nullptr;
  const size_t first_op = batch->size();
  std::shared_ptr<ReaderHandle> h = queue_.front();
  const CoalescePlan& p = h->plan_;
  if (h->after_ != nullptr && !h->failed_.load(std::memory_order_relaxed) &&
      h->after_->device_left_.load(std::memory_order_relaxed) > 0) {
    *window_full = true;  // the release of `after_`'s last read to come back issues this one
    return h;
  }
  while (h->next_issue_ < h->issue_order_.size()) {
    const uint32_t idx = h->issue_order_[h->next_issue_];
    if (h->failed_.load(std::memory_order_relaxed)) {
      if (skipped == nullptr) break;  // failing reads is the issuer thread's job
      skipped->push_back(idx);
      ++h->next_issue_;
      continue;
    }
    const MergedRead& r = p.reads[idx];
    ReaderHandle::ReadState& rs = h->reads_[idx];
    // One budget of bytes in flight for every mode (a lone read larger than the budget still
    // goes); staged reads also need their space in the window.
    if (inflight_ > 0 && inflight_ + r.len > inflight_budget_) {
      *window_full = true;
      break;
    }
    if (rs.mode == ReaderHandle::Mode::kScattered) {
      const uint64_t pos = RingAllocate(AlignUp(r.len, kStagingAlign));
      if (pos == kNone) {
        *window_full = true;
        break;
      }
      rs.ring_pos = pos;
      rs.buf = window_.data() + pos % window_bytes_;
      h->scattered_.fetch_add(1, std::memory_order_relaxed);
    }
    inflight_ += r.len;
    rs.issued = true;
    if (rs.mode == ReaderHandle::Mode::kVectored) {
      AppendVectoredOps(*h, idx, batch);
    } else {
      if (rs.mode == ReaderHandle::Mode::kDirect) {
        h->direct_.fetch_add(1, std::memory_order_relaxed);
      }
      batch->push_back(IoOp{IoOpcode::kRead, r.file, r.offset, rs.buf, r.len, idx});
    }
    ++h->next_issue_;
  }
  if (h->next_issue_ == h->issue_order_.size()) queue_.pop_front();
  // The reads are counted before they are submitted: once they are, the handle may finish.
  h->reads_issued_.fetch_add(batch->size() - first_op, std::memory_order_relaxed);
  return h;
}

void RestoreReader::IssueFreedSpace() {
  // Set while this thread is inside its own Submit below: an engine may complete reads inline
  // (posix), and their releases leave the issuing to the issuer thread rather than recurse.
  thread_local bool submitting = false;
  thread_local std::vector<IoOp> batch;
  std::shared_ptr<ReaderHandle> h;
  {
    MutexLock lock(mu_);
    if (submitting) {
      cv_.NotifyAll();
      return;
    }
    batch.clear();
    bool full;
    h = TakeBatch(&batch, nullptr, &full);
    // The issuer thread takes over what this pass leaves while there is still room: the next
    // restore once this one is all issued, or the reads of a restore that failed.
    if (!full && !queue_.empty()) cv_.NotifyAll();
  }
  if (batch.empty()) return;
  submitting = true;
  engine_.Submit(batch, h.get());
  submitting = false;
}

void RestoreReader::IssueLoop() {
  std::vector<IoOp> batch;
  std::vector<uint32_t> skipped;
  for (;;) {
    batch.clear();
    skipped.clear();
    std::shared_ptr<ReaderHandle> h;
    {
      MutexLock lock(mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(mu_);
      if (queue_.empty()) return;  // stopping, nothing left to issue
      bool full;
      h = TakeBatch(&batch, &skipped, &full);
      if (batch.empty() && skipped.empty()) {
        if (full) cv_.Wait(mu_);  // window full: wait for a completion to free space
        continue;
      }
    }
    if (!batch.empty()) engine_.Submit(batch, h.get());
    for (uint32_t idx : skipped) {
      Status first;
      {
        MutexLock lock(h->mu_);
        first = h->first_error_;
      }
      h->ReadBack();
      h->CompleteRead(idx, first.WithContext("not issued after an earlier error"));
    }
  }
}

}  // namespace flatcake
