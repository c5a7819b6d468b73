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
#include "store/scope.h"
#include "store/segment_layout.h"
#include "util/aligned_buffer.h"
#include "util/checksum.h"
#include "util/thread_annotations.h"

namespace flatcake {

// A free list of equally sized, 4 KiB-aligned staging buffers (O_DIRECT needs aligned memory).
// Fresh pages are expensive to fault in (tens of microseconds each in a VM), so buffers are kept
// and reused across writes instead of being allocated per segment. Thread-safe.
class StagingPool {
 public:
  // A buffer on loan from the pool, returned to it when the lease is destroyed. data() is null
  // when memory was exhausted. REQUIRES: the pool outlives its leases.
  class Lease {
   public:
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (!buffer_.empty()) pool_->Return(std::move(buffer_));
    }
    uint8_t* data() const { return buffer_.data(); }

   private:
    friend class StagingPool;
    Lease(StagingPool* pool, AlignedBuffer buffer) : pool_(pool), buffer_(std::move(buffer)) {}
    StagingPool* pool_;
    AlignedBuffer buffer_;
  };

  explicit StagingPool(uint64_t buffer_bytes) : bytes_(buffer_bytes) {}
  uint64_t buffer_bytes() const { return bytes_; }
  // Lends a kept buffer, or a new one.
  Lease Acquire() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (!free_.empty()) {
        AlignedBuffer b = std::move(free_.back());
        free_.pop_back();
        return Lease(this, std::move(b));
      }
    }
    Result<AlignedBuffer> fresh = AlignedBuffer::Allocate(bytes_, {.alignment = 4096});
    return Lease(this, fresh.ok() ? std::move(fresh).value() : AlignedBuffer());
  }

 private:
  void Return(AlignedBuffer b) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    free_.push_back(std::move(b));
  }

  const uint64_t bytes_;
  Mutex mu_;
  std::vector<AlignedBuffer> free_ GUARDED_BY(mu_);
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
  SegmentGather(const KvLayout& layout, const Segment& seg, const BlockBuffers& src,
                std::span<const uint32_t> blocks)
      : layout_(layout),
        seg_(layout, seg.num_blocks),
        src_(src),
        blocks_(blocks),
        sums_(seg.num_blocks, 0) {}

  // Writes segment bytes [pos, pos + len) to dst with `stores` (fenced before it returns).
  void Fill(uint64_t pos, uint64_t len, uint8_t* dst, CopyStores stores) {
    const uint64_t s = layout_.slice_bytes;
    const uint64_t payload = seg_.RunPayload();
    while (len > 0) {
      const uint64_t run = pos / seg_.PlaneStride();  // = layer * planes + plane
      const uint64_t in_run = pos % seg_.PlaneStride();
      uint64_t n;
      if (in_run < payload) {
        const uint64_t b = in_run / s;
        const uint64_t q = in_run % s;
        n = std::min(len, s - q);
        const uint32_t l = static_cast<uint32_t>(run / layout_.num_planes);
        const uint32_t p = static_cast<uint32_t>(run % layout_.num_planes);
        const uint8_t* from = SliceAddress(src_, layout_, blocks_[b], l, p);
        const auto position = static_cast<uint32_t>(run);
        if (n == s) {
          sums_[b] += CopySliceWithChecksum(dst, from, s, position, stores, NextSource(run, b));
        } else {
          if (q == 0) sums_[b] += SliceChecksum(from, s, position);
          CopySlice(dst, from + q, n, stores);
        }
      } else {
        n = std::min(len, seg_.PlaneStride() - in_run);
        std::memset(dst, 0, n);
      }
      dst += n;
      pos += n;
      len -= n;
    }
    // Before the bytes are written out or published.
    if (stores == CopyStores::kStreaming) FenceStreamingStores();
  }

  // Where the slice after block b's of run `run` comes from (the next block's, else the next
  // run's first block's), for the copy to prefetch; null after the last.
  const uint8_t* NextSource(uint64_t run, uint64_t b) const {
    if (b + 1 < blocks_.size()) {
      return SliceAddress(src_, layout_, blocks_[b + 1],
                          static_cast<uint32_t>(run / layout_.num_planes),
                          static_cast<uint32_t>(run % layout_.num_planes));
    }
    if (run + 1 >= seg_.Runs()) return nullptr;
    return SliceAddress(src_, layout_, blocks_[0],
                        static_cast<uint32_t>((run + 1) / layout_.num_planes),
                        static_cast<uint32_t>((run + 1) % layout_.num_planes));
  }

  // Per block of the segment, its BlockChecksum; complete once Fill covered the whole segment.
  std::span<const uint64_t> checksums() const { return sums_; }

 private:
  const KvLayout& layout_;
  const SegmentLayout seg_;
  const BlockBuffers& src_;
  std::span<const uint32_t> blocks_;
  std::vector<uint64_t> sums_;
};

}  // namespace flatcake
