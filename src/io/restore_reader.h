// RestoreReader: the restore pipeline of FC-CIO (paper §3.4). Given slice reads (file, offset,
// len, destination, layer), it plans them with the coalescer, then issues the merged reads through
// an IoEngine with a bounded number of bytes in flight, earliest layers first, and lands the data:
//   - a read that maps exactly onto one contiguous, aligned destination span is read straight into
//     it ("direct");
//   - a read whose slices each land in a destination whose address and length are multiples of
//     vector_alignment (typically block-contiguous buffers restored from a layer-major file) is
//     read with vectored ops whose iovecs point straight at the destinations ("vectored") when
//     its entries are large enough (min_vector_entry_bytes; small ones are staged instead); bytes
//     the read covers but no slice wants (gaps, alignment widening) go to a shared discard buffer,
//     so they must be whole multiples of vector_alignment too. A read with more than max_iovecs
//     entries is split into several ops at entry boundaries;
//   - any other read lands in the staging window and its slices are copied out ("scattered").
// Completion is reported per layer: ReaderHandle::WaitLayer(l) blocks until every byte of layer l
// has landed (or failed), and an optional callback is invoked once per layer, in layer order, so a
// consumer can start on layer l while later layers are still in flight.
//
// Memory: one staging window of `window_bytes`, allocated aligned once per reader, pre-faulted and
// registered with the engine (io_uring fixed buffers where the engine supports it). Staged reads
// allocate from it in issue order (a ring; a region is reused once every earlier region is freed,
// and an emptied ring starts over at the window's start). Direct and vectored reads do not use
// it, but every read, staged or not, counts against one budget of bytes in flight (inflight_bytes,
// at most the window). The discard buffer of vectored reads is written concurrently by many reads
// and never read. When the budget or the window is full the issuer waits for completions:
// backpressure delays, it never aborts a restore.
//
// Thread safety: Start may be called from any thread; concurrent restores share the window and are
// issued in Start order. A restore started `after` another issues nothing until every read of
// that one has come back from the device, so a small restore queued ahead of a large one (a
// session's first layer ahead of its other layers) has the device to itself: devices serve the
// reads in flight side by side, and the small one's last read would otherwise return only as the
// large one's first window does. An internal thread issues a restore's first reads; after that, the
// engine thread that lands a read and frees its window space submits the reads that now fit, so the
// device gets its next reads without a thread hand-off. With an engine that completes inside Submit
// (posix), those reads are read before the read that freed the space reports its layer. Reads are
// taken in issue order (earliest layer first), but batches taken by two threads at once may reach
// the engine in either order. The engine's threads also run the scatter and the layer callbacks.
// Callbacks must not block on later layers of the same restore, nor destroy the reader. A
// ReaderHandle may be waited on from several threads. After the first error a restore issues
// nothing more: its remaining reads fail with that error.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "io/coalesce.h"
#include "io/io_engine.h"
#include "util/aligned_buffer.h"
#include "util/thread_annotations.h"

namespace flatcake {

struct ReaderOptions {
  uint64_t window_bytes = 128ull << 20;  // staging window
  // Bytes of reads in flight at most (a lone read larger than this still goes); 0: window_bytes.
  // A device serves the reads in flight side by side, so a read returns only about
  // inflight_bytes / bandwidth after it went out, however early it is in layer order: a budget of
  // a few reads lets layers land one after another at the device's rate, where the whole window
  // in flight holds every layer back until a window's worth is read.
  uint64_t inflight_bytes = 0;
  CoalesceOptions coalesce;     // max_io is lowered to the window when larger
  bool register_window = true;  // offer the window to the engine as a fixed buffer
  bool allow_direct = true;     // read into destinations when they line up
  bool allow_vectored = true;   // one vectored read into several aligned destinations
  // Alignment every iovec base and length of a vectored read must have: 4096 for O_DIRECT files
  // (the strictest logical block size in use), 1 where every file is buffered. Power of two.
  uint64_t vector_alignment = 4096;
  uint32_t max_iovecs = kMaxIoVecs;  // entries per vectored op; 1..kMaxIoVecs
  // A read is vectored only when its entries average at least this many bytes; otherwise it is
  // staged. Every entry costs at least one DMA segment on the device path, and for small entries
  // that costs more than one contiguous read plus a memcpy: on the development VM, vectored reads
  // into 16 KiB slots ran at about 0.55x of contiguous reads of the same bytes, staging and
  // copying at about 0.8x (medians of `flatcake bench restore --no-verify`, raw-slots and flat
  // against raw-seq). 0 vectors any read that lines up.
  uint64_t min_vector_entry_bytes = 128ull << 10;
};

struct ReaderStats {
  uint64_t reads_issued = 0;     // engine read ops submitted (a split vectored read counts each op)
  uint64_t bytes_read = 0;       // bytes transferred from the files (including gaps, alignment)
  uint64_t bytes_delivered = 0;  // slice bytes landed in their destinations
  uint64_t bytes_gap = 0;        // unrequested bytes bridged between slices
  uint64_t direct_reads = 0;
  uint64_t scattered_reads = 0;
  uint64_t vectored_reads = 0;  // merged reads landed by vectored ops, without a copy
  uint64_t vectored_ops = 0;    // their ops (more than vectored_reads where a read was split)
};

using LayerCallback = std::function<void(uint32_t layer, const Status& status)>;
// Runs once per slice whose bytes were read, on an I/O worker, before the slice's layer is
// reported; only for slices that were read, never for a failed read's. `bytes` holds the slice's
// len bytes exactly as read, valid only during the call:
//  - a slice that one staged read holds whole is handed over in the staging window with
//    `copy_to` = slice.dest, and the callback copies it there itself (it must copy all len
//    bytes), so that it can hash the bytes in the same pass (CopySliceWithChecksum): the slice
//    is read from memory once;
//  - any other slice (direct, vectored, or staged in pieces by two reads) once its last byte has
//    landed, with `bytes` == slice.dest and `copy_to` null.
// It delays the release of the read's staging space, so it should be short (a copy and a hash,
// not I/O).
using SliceCallback =
    std::function<void(const SliceRead& slice, const uint8_t* bytes, uint8_t* copy_to)>;

// Runs once when a restore is done (every read landed, failed or was skipped), with its first
// error and its final stats, on the I/O worker that finished it (inline in Start for a restore
// without reads). The reader may be gone by then: it must not touch the reader.
using DoneCallback = std::function<void(const Status& status, const ReaderStats& stats)>;

class RestoreReader;

class ReaderHandle : public IoCompletionSink {
 public:
  ~ReaderHandle() override = default;
  // Blocks until every slice of `layer` has landed or failed; returns that layer's status.
  Status WaitLayer(uint32_t layer);
  // Blocks until every read finished; returns OK or the first error.
  Status Wait();
  bool done() const;
  // Fails the restore with `why` unless it already failed: its reads not yet issued are never
  // issued and fail with the first error; reads in flight land as usual. A no-op once done.
  // REQUIRES: the reader that started it is alive.
  void Cancel(const Status& why);
  uint32_t num_layers() const { return num_layers_; }
  ReaderStats stats() const;
  const CoalescePlan& plan() const { return plan_; }

  void OnIoComplete(uint64_t tag, const Status& status) override;

 private:
  friend class RestoreReader;
  enum class Mode : uint8_t { kScattered, kDirect, kVectored };
  struct ReadState {
    uint8_t* buf = nullptr;     // destination of the engine read (direct, scattered)
    uint64_t ring_pos = ~0ull;  // staging allocation (absolute ring position), ~0 when none
    Mode mode = Mode::kScattered;
    bool issued = false;     // holds window space or in-flight budget until it completes
    uint32_t iov_first = 0;  // vectored: its entries are iov_[iov_first, iov_first + iov_count)
    uint32_t iov_count = 0;
    uint32_t ops = 1;  // engine ops the read is issued as
    // The handle's mu_ guards these two when ops > 1 (not expressible as GUARDED_BY on a member of
    // a nested struct).
    uint32_t ops_left = 1;  // ops not yet completed
    Status op_error;        // first error among the read's ops
  };
  ReaderHandle(RestoreReader* reader, CoalescePlan plan, uint32_t num_layers, LayerCallback cb,
               SliceCallback on_slice);

  // Lands read `idx` (or accounts for its failure) and reports layers that became complete.
  void CompleteRead(uint32_t idx, const Status& status);
  // Counts a read as back from the device. Called once per read, just before CompleteRead, whose
  // release of the read's space issues a restore waiting on this one once the count is 0.
  void ReadBack();
  void ReportLayers();

  RestoreReader* const reader_;
  const CoalescePlan plan_;
  const uint32_t num_layers_;
  const LayerCallback on_layer_;
  const SliceCallback on_slice_;
  DoneCallback on_done_;  // fixed once Start returns
  // With on_slice_: bytes of each plan slice not yet landed (a slice split over reads completes on
  // whichever worker lands its last piece).
  std::unique_ptr<std::atomic<uint64_t>[]> slice_left_;
  std::vector<ReadState> reads_;
  std::vector<iovec> iov_;  // iovec lists of the vectored reads; fixed once Start returns
  std::vector<uint32_t> issue_order_;  // read indices, earliest layer first
  // Guarded by reader_->mu_; not annotated: RestoreReader is incomplete here, and TakeBatch, which
  // holds its own mu_, could not tell the analysis that it is reader_'s.
  size_t next_issue_ = 0;
  std::atomic<bool> failed_{false};
  // Reads not yet back from the device (landed, failed, or skipped after an error). A restore
  // started after this one issues once it is 0.
  std::atomic<size_t> device_left_{0};
  // Fixed once Start returns; held until this handle is destroyed, so that `after`'s callbacks
  // are never destroyed under the reader's lock.
  std::shared_ptr<ReaderHandle> after_;

  mutable Mutex mu_;
  CondVar cv_;
  std::vector<uint64_t> layer_left_ GUARDED_BY(mu_);  // bytes not yet landed per layer
  std::vector<Status> layer_status_ GUARDED_BY(mu_);
  size_t reads_left_ GUARDED_BY(mu_) = 0;
  uint32_t next_report_ GUARDED_BY(mu_) = 0;
  Status first_error_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  std::shared_ptr<ReaderHandle> keepalive_ GUARDED_BY(mu_);  // set while reads are pending
  Mutex report_mu_;  // serialises callbacks so they run in layer order

  std::atomic<uint64_t> reads_issued_{0}, bytes_read_{0}, bytes_delivered_{0}, direct_{0},
      scattered_{0}, vectored_{0}, vectored_ops_{0};
};

class RestoreReader {
 public:
  // REQUIRES: `engine` has its files registered and outlives the reader.
  static Result<std::unique_ptr<RestoreReader>> Create(IoEngine& engine,
                                                       const ReaderOptions& options);
  // Waits for every restore started on this reader to finish.
  ~RestoreReader();
  RestoreReader(const RestoreReader&) = delete;
  RestoreReader& operator=(const RestoreReader&) = delete;

  // Plans `slices` and queues the restore; returns at once. `num_layers` = 0 means "highest layer
  // + 1"; layers without slices complete immediately. The destinations must stay valid until the
  // handle is done. Fails only on bad input (see PlanReads, and a layer >= num_layers). With
  // `after` (a restore started earlier on this reader), this one's reads wait until every read of
  // `after` is back from the device; restores started later wait behind this one as usual.
  // `on_done` (may be null) runs once the restore is done, after every layer was reported.
  Result<std::shared_ptr<ReaderHandle>> Start(std::span<const SliceRead> slices,
                                              uint32_t num_layers = 0,
                                              LayerCallback on_layer = nullptr,
                                              SliceCallback on_slice = nullptr,
                                              std::shared_ptr<ReaderHandle> after = nullptr,
                                              DoneCallback on_done = nullptr);
  // Start + Wait.
  Status Restore(std::span<const SliceRead> slices);

  ReaderStats stats() const;  // cumulative over all restores
  bool window_registered() const { return window_registered_; }
  uint64_t window_bytes() const { return window_bytes_; }
  const CoalesceOptions& coalesce_options() const { return coalesce_; }

 private:
  friend class ReaderHandle;
  RestoreReader(IoEngine& engine, const ReaderOptions& options);

  // The issuer thread: submits queued restores' reads as window space frees, and fails the reads
  // of a restore that already failed.
  void IssueLoop();
  // Moves the front restore's next reads that fit the window into `*batch`, in issue order, and
  // returns that restore (null when none is queued). Reads of a failed restore go to `*skipped`;
  // with skipped == nullptr it stops there instead. *window_full tells whether it stopped for
  // lack of window space or because the restore waits for the one it was started after (either
  // way a completion wakes it).
  std::shared_ptr<ReaderHandle> TakeBatch(std::vector<IoOp>* batch, std::vector<uint32_t>* skipped,
                                          bool* window_full) REQUIRES(mu_);
  // Called by the thread that just freed window space (an I/O worker, in Release): submits the
  // reads that now fit itself, so the device is fed without waking the issuer thread and waiting
  // for it to be scheduled (on a busy machine, behind the very workers that are copying).
  void IssueFreedSpace();
  // Decides how each read of `handle`'s plan lands (direct, vectored or staged) and returns, per
  // read, the earliest layer it serves (the issue order). REQUIRES: called from Start, before the
  // handle is shared.
  std::vector<uint32_t> ChooseReadModes(ReaderHandle& handle) const;
  // Appends read `r`'s iovec list to `*iov` and returns true when every part of it can be read
  // in place (see the header comment); otherwise leaves `*iov` as it was and returns false.
  bool BuildVectored(const CoalescePlan& p, const MergedRead& r, std::vector<iovec>* iov) const;
  // Appends the ops of vectored read `idx` (max_iovecs entries each) to `*batch`.
  void AppendVectoredOps(ReaderHandle& h, uint32_t idx, std::vector<IoOp>* batch);
  // Staging ring: returns the absolute position of `len` bytes, or ~0 when they do not fit now.
  uint64_t RingAllocate(uint64_t len) REQUIRES(mu_);
  // Gives a landed (or failed) read's window space back and issues what now fits.
  void Release(const ReaderHandle::ReadState& read, uint64_t len);
  void HandleDone(const ReaderStats& s);

  IoEngine& engine_;
  const ReaderOptions options_;
  CoalesceOptions coalesce_;
  uint64_t window_bytes_ = 0;
  uint64_t inflight_budget_ = 0;  // options_.inflight_bytes, or the window; at most the window
  AlignedBuffer window_;          // window_bytes_ of staging space
  bool window_registered_ = false;
  AlignedBuffer discard_;  // sink for unwanted bytes of vectored reads; empty when disabled
  uint64_t discard_bytes_ = 0;

  mutable Mutex mu_;
  CondVar cv_;  // window space freed, work queued, handle finished
  struct RingBlock {
    uint64_t start;
    uint64_t len;
    bool freed;
  };
  std::deque<RingBlock> ring_ GUARDED_BY(mu_);  // in start order
  uint64_t ring_head_ GUARDED_BY(mu_) = 0;
  uint64_t ring_tail_ GUARDED_BY(mu_) = 0;
  uint64_t inflight_ GUARDED_BY(mu_) = 0;  // bytes of issued reads
  std::deque<std::shared_ptr<ReaderHandle>> queue_ GUARDED_BY(mu_);
  size_t active_ GUARDED_BY(mu_) = 0;  // restores not yet done
  bool stop_ GUARDED_BY(mu_) = false;
  ReaderStats totals_ GUARDED_BY(mu_);
  std::thread issuer_;
};

}  // namespace flatcake
