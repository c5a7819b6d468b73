// AttachedMedia: the data half of a process that is not the store's owner (store/data_plan.h),
// built from the store's SharedMedia: its own mapping of the shared DRAM arena, its own
// descriptors of the SSD pool files, its own I/O engine, write staging, restore reader and
// segment writer, none of them the store's. The node daemon's clients (serve/remote_store.h)
// write reservations and read pins through one; so do the store's tests of the leases.
//
// Thread safety: the writer, reader and engine are thread-safe, so writes and reads may run from
// any number of threads at once; construction and destruction are not concurrent with them. The
// arena's bytes are synchronised by the store's protocol: a process writes only extents it
// reserved and reads only extents it pinned.
#pragma once

#include <cstdint>
#include <memory>

#include "flatcake/options.h"
#include "flatcake/status.h"
#include "io/io_engine.h"
#include "io/restore_reader.h"
#include "media/dram_arena.h"
#include "media/ssd_file_pool.h"
#include "store/data_plan.h"
#include "store/segment_writer.h"
#include "store/staging.h"

namespace flatcake {

// How the data half moves bytes; the defaults are the store's own (flatcake/options.h), but for
// a smaller restore window: one process's restores, not a node's.
struct AttachedMediaOptions {
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;
  uint32_t io_queue_depth = 64;
  uint64_t read_window_bytes = 32 * kMiB;
  uint64_t read_inflight_bytes = 32 * kMiB;
  uint64_t write_staging_bytes = 8 * kMiB;
  uint64_t max_gap_bytes = 64 * kKiB;
  uint64_t max_io_bytes = 4 * kMiB;
  // Map every page of the arena at once (MAP_POPULATE) rather than on first touch.
  bool populate_arena = true;
};

// The one mapping between a store's I/O settings and a client's: the options a client reads and
// writes with when it is to move bytes as the store `o` does, and back (the StoreOptions a
// client reports for its own).
AttachedMediaOptions MediaOptionsOf(const StoreOptions& o);
void SetMediaOptions(const AttachedMediaOptions& m, StoreOptions* o);

class AttachedMedia {
 public:
  // Maps the arena (when media.dram_fd >= 0; the descriptor stays the caller's and may be closed
  // afterwards), opens the pool files of media.ssd (when it has any: O_DIRECT where the geometry
  // says so) and registers them with a new engine. Errors name what could not be reached.
  static Result<std::unique_ptr<AttachedMedia>> Open(const SharedMedia& media,
                                                     const AttachedMediaOptions& options = {});
  ~AttachedMedia();
  AttachedMedia(const AttachedMedia&) = delete;
  AttachedMedia& operator=(const AttachedMedia&) = delete;

  // This process's view of the media, for PinnedRead and CheckSegment.
  const MediaAccess& access() const { return access_; }
  const SegmentWriter& writer() const { return *writer_; }
  // Null without SSD.
  RestoreReader* reader() const { return reader_.get(); }
  // Empty (no paths) without SSD.
  const SsdPoolGeometry& geometry() const { return geometry_; }
  std::string_view engine_name() const { return engine_->name(); }
  const std::string& engine_note() const { return engine_note_; }

 private:
  AttachedMedia() = default;

  SsdPoolGeometry geometry_;
  SharedArenaMapping arena_;
  SsdPoolFiles files_;
  std::unique_ptr<IoEngine> engine_;
  std::string engine_note_;
  std::unique_ptr<StagingPool> staging_;  // null without SSD
  std::unique_ptr<RestoreReader> reader_;
  MediaAccess access_;
  std::unique_ptr<SegmentWriter> writer_;
};

}  // namespace flatcake
