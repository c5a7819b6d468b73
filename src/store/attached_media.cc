#include "store/attached_media.h"

#include <utility>

namespace flatcake {

Result<std::unique_ptr<AttachedMedia>> AttachedMedia::Open(const SharedMedia& media,
                                                           const AttachedMediaOptions& options) {
  std::unique_ptr<AttachedMedia> m(new AttachedMedia());
  if (media.dram_fd >= 0) {
    auto mapping = SharedArenaMapping::Map(media.dram_fd, media.dram_bytes, options.populate_arena);
    if (!mapping.ok()) return mapping.status().WithContext("mapping the DRAM arena");
    m->arena_ = std::move(*mapping);
  }
  IoEngineOptions eo;
  eo.kind = options.io_engine;
  eo.workers = options.io_workers;
  eo.queue_depth = options.io_queue_depth;
  FC_ASSIGN_OR_RETURN(m->engine_, MakeIoEngine(eo, &m->engine_note_));
  m->geometry_ = media.ssd;
  if (m->geometry_.num_files() > 0) {
    FC_ASSIGN_OR_RETURN(m->files_, SsdFilePool::OpenFiles(m->geometry_));
    FC_RETURN_IF_ERROR(m->engine_->RegisterFiles(m->files_.fds()));
    FC_ASSIGN_OR_RETURN(m->staging_, StagingPool::ForSegmentWrites(options.max_io_bytes,
                                                                   options.write_staging_bytes));
    // Best effort, as the store's own staging (flat_store.cc).
    const IoBufferRegion staging = m->staging_->region();
    (void)m->engine_->RegisterBuffers({&staging, 1});
    ReaderOptions ro;
    ro.window_bytes = options.read_window_bytes;
    ro.inflight_bytes = options.read_inflight_bytes;
    ro.coalesce.max_gap = options.max_gap_bytes;
    ro.coalesce.max_io = options.max_io_bytes;
    FC_ASSIGN_OR_RETURN(m->reader_, RestoreReader::Create(*m->engine_, ro));
    m->access_.ssd = &m->geometry_;
  }
  m->access_.dram = m->arena_.base();
  m->access_.dram_bytes = m->arena_.size();
  m->access_.engine = m->engine_.get();
  m->writer_ = std::make_unique<SegmentWriter>(m->access_, m->staging_.get());
  return m;
}

AttachedMedia::~AttachedMedia() {
  // The reader drains its restores through the engine, whose workers use the files: both go
  // before the files close (the members' order would close them last anyway; stated here).
  writer_.reset();
  reader_.reset();
  if (engine_ && staging_) {
    const IoBufferRegion staging = staging_->region();
    engine_->UnregisterBuffers({&staging, 1});
  }
  engine_.reset();
}

AttachedMediaOptions MediaOptionsOf(const StoreOptions& o) {
  AttachedMediaOptions m;
  m.io_engine = o.io_engine;
  m.io_workers = o.io_workers;
  m.io_queue_depth = o.io_queue_depth;
  m.read_window_bytes = o.read_window_bytes;
  m.read_inflight_bytes = o.read_inflight_bytes;
  m.write_staging_bytes = o.write_staging_bytes;
  m.max_gap_bytes = o.max_gap_bytes;
  m.max_io_bytes = o.max_io_bytes;
  return m;
}

void SetMediaOptions(const AttachedMediaOptions& m, StoreOptions* o) {
  o->io_engine = m.io_engine;
  o->io_workers = m.io_workers;
  o->io_queue_depth = m.io_queue_depth;
  o->read_window_bytes = m.read_window_bytes;
  o->read_inflight_bytes = m.read_inflight_bytes;
  o->write_staging_bytes = m.write_staging_bytes;
  o->max_gap_bytes = m.max_gap_bytes;
  o->max_io_bytes = m.max_io_bytes;
}

}  // namespace flatcake
