// Helpers of the segment write path: a pool of aligned staging buffers and the gather that
// produces a segment's layer-major byte stream from the caller's buffers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "flatcake/layout.h"
#include "io/io_engine.h"
#include "store/segment_layout.h"
#include "util/aligned_buffer.h"
#include "util/checksum.h"
#include "util/thread_annotations.h"

namespace flatcake {

// The SSD write path's staging: `count` equally sized, 4 KiB-aligned buffers (O_DIRECT needs
// aligned memory) carved from one allocation made when the store opens, huge-page backed and
// faulted in then, since first touch of fresh pages costs more than the copy into them on virtual
// machines (docs/performance.md); region() can be registered with the engine once. A segment
// write borrows up to all of them, gathers into each in turn and keeps a write in flight from each
// while it gathers the next. Borrowers never wait for buffers while they hold some, so the pool
// cannot deadlock; concurrent writers share it and may wait for one another. Thread-safe.
class StagingPool {
 public:
  static constexpr uint32_t kMaxBuffers = 64;

  // Buffers on loan, given back when the loan is destroyed. REQUIRES: the pool outlives it.
  class Loan {
   public:
    Loan(const Loan&) = delete;
    Loan& operator=(const Loan&) = delete;
    ~Loan() { pool_->Return(std::span<uint8_t* const>(bufs_, count_)); }
    uint32_t size() const { return count_; }
    uint8_t* operator[](uint32_t i) const { return bufs_[i]; }

   private:
    friend class StagingPool;
    Loan(StagingPool* pool, uint32_t want) : pool_(pool) { count_ = pool->Take(want, bufs_); }
    StagingPool* const pool_;
    uint8_t* bufs_[kMaxBuffers];
    uint32_t count_ = 0;
  };

  // REQUIRES: buffer_bytes a multiple of 4 KiB; 1 <= count <= kMaxBuffers.
  static Result<std::unique_ptr<StagingPool>> Create(uint64_t buffer_bytes, uint32_t count) {
    // Huge pages for a staging of one or more; a smaller one is not rounded up to 2 MiB.
    AlignedBufferOptions options = AlignedBuffer::HugePagesWhenLarge(buffer_bytes * count, 4096);
    options.prefault = true;
    FC_ASSIGN_OR_RETURN(AlignedBuffer mem, AlignedBuffer::Allocate(buffer_bytes * count, options));
    return std::unique_ptr<StagingPool>(new StagingPool(buffer_bytes, count, std::move(mem)));
  }

  // The staging of a store's (or a daemon client's) SSD segment writes, from its max_io_bytes and
  // write_staging_bytes options: writes of max_io_bytes, at most half the staging so that one
  // buffer is gathered while others are written, and the whole staging in flight, so that a put
  // keeps the disk busy from its first chunk on (the first chunk, gathered before any write can
  // start, is small).
  static Result<std::unique_ptr<StagingPool>> ForSegmentWrites(uint64_t max_io_bytes,
                                                               uint64_t staging_bytes) {
    constexpr uint64_t kAlign = SegmentLayout::kRunAlign;
    const uint64_t chunk =
        std::max<uint64_t>(kAlign, (std::min(max_io_bytes, staging_bytes / 2) / kAlign) * kAlign);
    const auto count =
        static_cast<uint32_t>(std::clamp<uint64_t>(staging_bytes / chunk, 1, kMaxBuffers));
    return Create(chunk, count);
  }

  uint64_t buffer_bytes() const { return bytes_; }
  uint32_t count() const { return count_; }
  IoBufferRegion region() const { return IoBufferRegion{mem_.data(), mem_.size()}; }

  // Lends between 1 and `want` buffers: as many as are free, once at least one is.
  // REQUIRES: the caller holds no loan of this pool.
  Loan Borrow(uint32_t want) { return Loan(this, want); }

 private:
  StagingPool(uint64_t buffer_bytes, uint32_t count, AlignedBuffer mem)
      : bytes_(buffer_bytes), count_(count), mem_(std::move(mem)) {
    MutexLock lock(mu_);  // uncontended: taken for the analysis
    free_.reserve(count);
    for (uint32_t i = count; i-- > 0;) free_.push_back(mem_.data() + i * buffer_bytes);
  }
  // Moves between 1 and `want` free buffers to `out`, waiting until one is free; returns how many.
  uint32_t Take(uint32_t want, uint8_t** out) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (free_.empty()) cv_.Wait(mu_);
    want = std::clamp<uint32_t>(want, 1, count_);
    uint32_t n = 0;
    while (n < want && !free_.empty()) {
      out[n++] = free_.back();
      free_.pop_back();
    }
    return n;
  }
  void Return(std::span<uint8_t* const> bufs) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      free_.insert(free_.end(), bufs.begin(), bufs.end());
    }
    cv_.NotifyAll();
  }

  const uint64_t bytes_;
  const uint32_t count_;
  const AlignedBuffer mem_;
  Mutex mu_;
  CondVar cv_;
  std::vector<uint8_t*> free_ GUARDED_BY(mu_);  // reserved for count_ entries: never reallocates
};

// Tracks asynchronously submitted ops by tag (tags 0, 1, 2, ... in submission order) so a caller
// can wait for one particular op, whatever order the engine's workers complete them in; keeps the
// first error.
class IoWaiter final : public IoCompletionSink {
 public:
  void OnIoComplete(uint64_t tag, const Status& status) override {
    MutexLock lock(mu_);
    if (!status.ok() && error_.ok()) error_ = status;
    if (tag >= done_.size()) done_.resize(tag + 1, false);
    done_[tag] = true;
    ++completed_;
    cv_.NotifyAll();
  }
  // Submits `op` with the next tag and returns that tag.
  uint64_t Submit(IoEngine& engine, IoOp op) {
    {
      MutexLock lock(mu_);
      op.tag = submitted_++;
    }
    engine.Submit(std::span<const IoOp>(&op, 1), this);
    return op.tag;
  }
  // Waits for the op with `tag`; returns the first error seen so far.
  Status WaitFor(uint64_t tag) {
    MutexLock lock(mu_);
    while (tag >= done_.size() || !done_[tag]) cv_.Wait(mu_);
    return error_;
  }
  Status WaitAll() {
    MutexLock lock(mu_);
    while (completed_ != submitted_) cv_.Wait(mu_);
    return error_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<bool> done_ GUARDED_BY(mu_);
  uint64_t submitted_ GUARDED_BY(mu_) = 0;
  uint64_t completed_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);
};

// Produces any byte range of a segment laid out [layer][plane][block] (SegmentLayout: each run
// padded with zeros to its plane stride) from source blocks `blocks` (indices into `src`), and the
// blocks' checksums in the same pass: each whole slice is copied by CopySliceWithChecksum, which
// hashes the bytes it stores. A slice that a range boundary splits is hashed whole, from the
// source, by the range that holds its first byte. Not thread-safe (the sums accumulate).
class SegmentGather {
 public:
  // A segment of `num_blocks` blocks of `layout`. REQUIRES: blocks.size() == num_blocks.
  SegmentGather(const KvLayout& layout, uint64_t num_blocks, const BlockBuffers& src,
                std::span<const uint32_t> blocks)
      : layout_(layout),
        seg_(layout, num_blocks),
        src_(src),
        blocks_(blocks),
        sums_(num_blocks, 0) {}

  // Writes segment bytes [pos, pos + len) to dst with `stores` (fenced before it returns).
  void Fill(uint64_t pos, uint64_t len, uint8_t* dst, CopyStores stores) {
    const uint64_t s = layout_.slice_bytes;
    const uint64_t stride = seg_.PlaneStride();
    const uint64_t payload = seg_.RunPayload();
    const uint32_t planes = layout_.num_planes;
    // Where pos lies: run (l, p), offset in the run, and within the payload block b, byte q;
    // advanced piece by piece below (no division per slice).
    const uint64_t run = pos / stride;
    auto l = static_cast<uint32_t>(run / planes);
    auto p = static_cast<uint32_t>(run % planes);
    uint64_t in_run = pos % stride;
    uint64_t b = in_run / s;
    uint64_t q = in_run % s;
    while (len > 0) {
      uint64_t n;
      if (in_run < payload) {
        n = std::min(len, s - q);
        const uint8_t* from = SliceAddress(src_, layout_, blocks_[b], l, p);
        const uint32_t position = l * planes + p;
        if (n == s) {
          sums_[b] += CopySliceWithChecksum(dst, from, s, position, stores, NextSource(l, p, b));
        } else {
          if (q == 0) sums_[b] += SliceChecksum(from, s, position);
          CopySlice(dst, from + q, n, stores);
        }
        q += n;
        if (q == s) {
          q = 0;
          ++b;
        }
      } else {
        n = std::min(len, stride - in_run);
        std::memset(dst, 0, n);
      }
      dst += n;
      len -= n;
      in_run += n;
      if (in_run == stride) {  // the next run
        in_run = b = q = 0;
        if (++p == planes) {
          p = 0;
          ++l;
        }
      }
    }
    // Before the bytes are written out or published.
    if (stores == CopyStores::kStreaming) FenceStreamingStores();
  }

  // Per block of the segment, its BlockChecksum; complete once Fill covered the whole segment.
  std::span<const uint64_t> checksums() const { return sums_; }

 private:
  // Where the slice after block b's slice (l, p) comes from in segment order (the next block's,
  // else the next run's first block's), for the copy to prefetch; null after the last.
  const uint8_t* NextSource(uint32_t l, uint32_t p, uint64_t b) const {
    if (b + 1 < blocks_.size()) return SliceAddress(src_, layout_, blocks_[b + 1], l, p);
    if (p + 1 < layout_.num_planes) return SliceAddress(src_, layout_, blocks_[0], l, p + 1);
    if (l + 1 < layout_.num_layers) return SliceAddress(src_, layout_, blocks_[0], l + 1, 0);
    return nullptr;
  }

  const KvLayout& layout_;
  const SegmentLayout seg_;
  const BlockBuffers& src_;
  std::span<const uint32_t> blocks_;
  std::vector<uint64_t> sums_;
};

}  // namespace flatcake
