// MediaClient: the data half of another process in the store's tests of the leases: an
// AttachedMedia (store/attached_media.h) over a store's SharedMedia, with the posix engine and a
// small read window, writing and reading blocks of FillBlock's content. Test-only. Write and
// Read may be called from several threads; construction and destruction are not concurrent with
// them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "store/attached_media.h"
#include "store/data_plan.h"
#include "store/pinned_read.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"

namespace flatcake::testing {

class MediaClient {
 public:
  explicit MediaClient(const SharedMedia& media) {
    AttachedMediaOptions o;
    o.io_engine = IoEngineKind::kPosix;
    o.read_window_bytes = 4 * kMiB;  // ample for test batches, quick to map
    o.write_staging_bytes = 1 * kMiB;
    o.max_io_bytes = 256 * kKiB;
    auto opened = AttachedMedia::Open(media, o);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (opened.ok()) media_ = std::move(*opened);
  }

  // Fills every segment of `r` with the blocks of `keys` (the batch it was reserved for) and
  // returns their checksums for PublishWrite; empty when the write failed (which fails the test).
  std::vector<uint64_t> Write(const WriteReservation& r, const std::vector<Key>& keys) {
    HostBlocks src(r.layout, keys.size());
    src.Fill(keys);
    std::vector<uint64_t> sums;
    Status st = media_->writer().WriteAll(r, src.buffers(), &sums);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(sums.size(), r.blocks.size());
    return sums;
  }

  // Reads the hits of `pin` (of `keys`) into fresh buffers; every block found must hold its
  // bytes, or the test fails.
  GetResult Read(const ReadPin& pin, const std::vector<Key>& keys) {
    HostBlocks dst(pin.layout, keys.size());
    PinnedRead read(pin.layout, dst.buffers(), pin.hits, /*verify=*/true);
    auto r = read.Run(media_->access(), media_->reader(), keys.size());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    ExpectFoundBlocksExact(keys, r->found, dst);
    return *r;
  }

  uint8_t* arena() { return media_->access().dram; }
  const MediaAccess& access() const { return media_->access(); }

 private:
  std::unique_ptr<AttachedMedia> media_;
};

}  // namespace flatcake::testing
