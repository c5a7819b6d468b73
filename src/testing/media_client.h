// MediaClient: the data half of another process, as a client of the node daemon builds it from a
// store's SharedMedia: its own mapping of the shared arena, its own descriptors of the pool files,
// its own engine, staging, reader and writer, none of them the store's. Blocks carry FillBlock's
// content. Test-only. Write and Read may be called from several threads (the writer, reader and
// engine are thread-safe); construction and destruction are not concurrent with them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "io/posix_io_engine.h"
#include "io/restore_reader.h"
#include "media/dram_arena.h"
#include "media/ssd_file_pool.h"
#include "store/data_plan.h"
#include "store/pinned_read.h"
#include "store/segment_writer.h"
#include "store/staging.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"

namespace flatcake::testing {

class MediaClient {
 public:
  explicit MediaClient(const SharedMedia& media) : geometry_(media.ssd) {
    auto mapping = SharedArenaMapping::Map(media.dram_fd, media.dram_bytes);
    EXPECT_TRUE(mapping.ok()) << mapping.status().ToString();
    if (mapping.ok()) arena_ = std::move(*mapping);
    auto files = SsdFilePool::OpenFiles(geometry_);
    EXPECT_TRUE(files.ok()) << files.status().ToString();
    if (files.ok()) files_ = std::move(*files);
    EXPECT_TRUE(engine_.RegisterFiles(files_.fds()).ok());
    auto staging = StagingPool::Create(256 * kKiB, 4);
    EXPECT_TRUE(staging.ok());
    if (staging.ok()) staging_ = std::move(*staging);
    ReaderOptions ro;
    ro.window_bytes = 4 * kMiB;  // ample for test batches, quick to map
    auto reader = RestoreReader::Create(engine_, ro);
    EXPECT_TRUE(reader.ok());
    if (reader.ok()) reader_ = std::move(*reader);
    access_ = MediaAccess{arena_.base(), arena_.size(), &geometry_, &engine_};
    writer_ = std::make_unique<SegmentWriter>(access_, staging_.get());
  }

  // Fills every segment of `r` with the blocks of `keys` (the batch it was reserved for) and
  // returns their checksums for PublishWrite; empty when the write failed (which fails the test).
  std::vector<uint64_t> Write(const WriteReservation& r, const std::vector<Key>& keys) {
    HostBlocks src(r.layout, keys.size());
    src.Fill(keys);
    std::vector<uint64_t> sums;
    Status st = writer_->WriteAll(r, src.buffers(), &sums);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(sums.size(), r.blocks.size());
    return sums;
  }

  // Reads the hits of `pin` (of `keys`) into fresh buffers; every block found must hold its
  // bytes, or the test fails.
  GetResult Read(const ReadPin& pin, const std::vector<Key>& keys) {
    HostBlocks dst(pin.layout, keys.size());
    PinnedRead read(pin.layout, dst.buffers(), pin.hits, /*verify=*/true);
    auto r = read.Run(access_, reader_.get(), keys.size());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    ExpectFoundBlocksExact(keys, r->found, dst);
    return *r;
  }

  uint8_t* arena() { return arena_.base(); }
  const MediaAccess& access() const { return access_; }

 private:
  SsdPoolGeometry geometry_;
  SharedArenaMapping arena_;
  SsdPoolFiles files_;
  PosixIoEngine engine_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<RestoreReader> reader_;
  MediaAccess access_;
  std::unique_ptr<SegmentWriter> writer_;
};

}  // namespace flatcake::testing
