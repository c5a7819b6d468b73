// GpuTransfer's restores: the lease, the pipeline thread, the chunks, the finisher
// (gpu_transfer.h says how a restore moves). Puts are in gpu_put.cc.
#include "gpu/gpu_transfer.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "store/segment_layout.h"
#include "util/checksum.h"

namespace flatcake::gpu {
namespace {

// A batch of cuFile reads issued by the file workers; Wait returns their first error.
class FileBatch {
 public:
  void Add() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++left_;
  }
  void Done(const Status& st) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (status_.ok() && !st.ok()) status_ = st;
      --left_;
    }
    cv_.NotifyAll();
  }
  Status Wait() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (left_ != 0) cv_.Wait(mu_);
    return status_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  size_t left_ GUARDED_BY(mu_) = 0;
  Status status_ GUARDED_BY(mu_);
};

}  // namespace

// Threads that run cuFile's synchronous reads side by side, so that the device sees a queue.
class GpuTransfer::FileWorkers {
 public:
  explicit FileWorkers(uint32_t n) {
    for (uint32_t i = 0; i < std::max(1u, n); ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~FileWorkers() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    for (auto& t : threads_) t.join();
  }
  void Submit(std::shared_ptr<FileBatch> batch, std::function<Status()> read) EXCLUDES(mu_) {
    batch->Add();
    {
      MutexLock lock(mu_);
      work_.push_back({std::move(batch), std::move(read)});
    }
    cv_.NotifyOne();
  }

 private:
  struct Work {
    std::shared_ptr<FileBatch> batch;
    std::function<Status()> read;
  };
  void Loop() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (;;) {
      while (!stop_ && work_.empty()) cv_.Wait(mu_);
      if (work_.empty()) return;
      Work w = std::move(work_.front());
      work_.pop_front();
      lock.Unlock();
      w.batch->Done(w.read());
      lock.Lock();
    }
  }
  Mutex mu_;
  CondVar cv_;
  std::deque<Work> work_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// One layer's slices of hits [first, first + count), in slot `slot` as [plane][block].
struct GpuTransfer::Chunk {
  uint32_t layer = 0;
  uint32_t first = 0;
  uint32_t count = 0;
  bool last_of_layer = false;
  uint32_t slot = 0;
  std::shared_ptr<ReaderHandle> reads;  // bounce: the reader's restore into the bounce slot
  std::shared_ptr<FileBatch> files;     // direct: the cuFile reads into the device slot
};

// Consecutive slices on one medium that are contiguous both there and in the slot.
struct GpuTransfer::Run {
  uint64_t src = 0;       // medium offset (arena or pool)
  uint64_t slot_off = 0;  // in the slot
  uint64_t len = 0;
};

Result<std::vector<void*>> ResolveTarget(const DeviceKvTarget& target, const KvLayout& layout,
                                         size_t num_keys) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  const uint64_t layers = layout.num_layers, planes = layout.num_planes;
  std::vector<void*> out;
  if (!target.slices.empty()) {
    if (!target.bases.empty() || !target.pages.empty()) {
      return Status::InvalidArgument("a device target has either slices or bases and pages");
    }
    if (target.slices.size() != num_keys * layers * planes) {
      return Status::InvalidArgument("device target: " + std::to_string(target.slices.size()) +
                                     " slice pointers for " +
                                     std::to_string(num_keys * layers * planes) + " slices");
    }
    out = target.slices;
  } else {
    if (target.bases.size() != layers * planes) {
      return Status::InvalidArgument("device target: " + std::to_string(target.bases.size()) +
                                     " page arrays for " + std::to_string(layers) + " layers x " +
                                     std::to_string(planes) + " planes");
    }
    if (target.pages.size() != num_keys) {
      return Status::InvalidArgument("device target: " + std::to_string(target.pages.size()) +
                                     " page indices for " + std::to_string(num_keys) + " keys");
    }
    const uint64_t stride = target.page_bytes ? target.page_bytes : layout.slice_bytes;
    if (stride < layout.slice_bytes) {
      return Status::InvalidArgument("device target: page_bytes is below slice_bytes");
    }
    out.resize(num_keys * layers * planes);
    for (size_t i = 0; i < num_keys; ++i) {
      for (uint64_t l = 0; l < layers; ++l) {
        for (uint64_t p = 0; p < planes; ++p) {
          auto* base = static_cast<uint8_t*>(target.bases[l * planes + p]);
          out[(i * layers + l) * planes + p] = base ? base + target.pages[i] * stride : nullptr;
        }
      }
    }
  }
  for (void* p : out) {
    if (p == nullptr) return Status::InvalidArgument("device target: a null pointer");
  }
  return out;
}

// --- GpuRestore ---

GpuRestore::GpuRestore(std::shared_ptr<Device> device, const KvLayout& layout, size_t num_keys)
    : device_(std::move(device)), layout_(layout), num_keys_(num_keys) {}

GpuRestore::~GpuRestore() {
  if (!done()) {
    Cancel();
    (void)Wait();
  }
  for (DeviceEvent e : events_) device_->DestroyEvent(e);
}

Result<GetResult> GpuRestore::Wait() {
  MutexLock lock(mu_);
  while (!done_) cv_.Wait(mu_);
  if (!status_.ok()) return status_;
  return result_;
}

bool GpuRestore::done() const {
  MutexLock lock(mu_);
  return done_;
}

void GpuRestore::Cancel() {
  MutexLock lock(mu_);
  if (!done_) cancelled_ = true;
}

Result<DeviceEvent> GpuRestore::LayerEvent(uint32_t layer) {
  if (layer >= layout_.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(layout_.num_layers) + " layers)");
  }
  MutexLock lock(mu_);
  while (layers_recorded_ <= layer) cv_.Wait(mu_);
  return events_[layer];
}

Status GpuRestore::StreamWaitLayer(uint32_t layer, DeviceStream stream) {
  FC_ASSIGN_OR_RETURN(DeviceEvent e, LayerEvent(layer));
  FC_RETURN_IF_ERROR(device_->StreamWait(stream, e));
  MutexLock lock(mu_);
  return status_;
}

Status GpuRestore::WaitLayer(uint32_t layer) {
  FC_ASSIGN_OR_RETURN(DeviceEvent e, LayerEvent(layer));
  FC_RETURN_IF_ERROR(device_->Synchronize(e));
  MutexLock lock(mu_);
  return status_;
}

// --- GpuTransfer ---

GpuTransfer::GpuTransfer(std::unique_ptr<ReadLeases> leases, std::shared_ptr<Device> device,
                         GpuMode mode, const GpuTransferOptions& options)
    : leases_(std::move(leases)),
      store_(leases_->store()),
      device_(std::move(device)),
      mode_(mode),
      options_(options) {}

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::Create(FlatStore& store,
                                                         std::shared_ptr<Device> device,
                                                         GpuMode mode,
                                                         const GpuTransferOptions& options) {
  return Create(std::make_unique<FlatStoreLeases>(store), std::move(device), mode, options);
}

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::Create(std::unique_ptr<ReadLeases> leases,
                                                         std::shared_ptr<Device> device,
                                                         GpuMode mode,
                                                         const GpuTransferOptions& options) {
  if (leases == nullptr) return Status::InvalidArgument("no store");
  if (device == nullptr) return Status::InvalidArgument("no device (GPU mode none)");
  if (options.window_slots < 2) return Status::InvalidArgument("window_slots must be >= 2");
  if (options.slot_bytes < 4096 || options.slot_bytes % 4096 != 0) {
    return Status::InvalidArgument("slot_bytes must be a positive multiple of 4096");
  }
  if (options.max_io_bytes < 4096) return Status::InvalidArgument("max_io_bytes below 4096");
  std::unique_ptr<GpuTransfer> t(
      new GpuTransfer(std::move(leases), std::move(device), mode, options));
  FC_RETURN_IF_ERROR(t->Init());
  return t;
}

Status GpuTransfer::Init() {
  direct_ = mode_ == GpuMode::kGds || mode_ == GpuMode::kCuFileCompat ||
            (mode_ == GpuMode::kFake && device_->direct_file_io());
  verify_ = options_.verify;
  const uint64_t bytes = uint64_t{options_.window_slots} * options_.slot_bytes;
  FC_ASSIGN_OR_RETURN(stream_, device_->CreateStream());
  FC_ASSIGN_OR_RETURN(void* w, device_->Allocate(bytes));
  window_ = static_cast<uint8_t*>(w);
  FC_ASSIGN_OR_RETURN(void* b, device_->AllocateHost(bytes));
  bounce_ = static_cast<uint8_t*>(b);
  for (uint32_t i = 0; i < options_.window_slots; ++i) {
    FC_ASSIGN_OR_RETURN(DeviceEvent e, device_->CreateEvent());
    slot_free_.push_back(e);
  }
  // A chunk has at most one table entry per 512 bytes of its slot (smaller slices go in more
  // chunks).
  table_entries_ = std::max<uint64_t>(options_.slot_bytes / 512, kMaxKvPlanes);
  const uint64_t table_bytes = uint64_t{options_.window_slots} * table_entries_ * sizeof(void*);
  FC_ASSIGN_OR_RETURN(void* th, device_->AllocateHost(table_bytes));
  table_host_ = static_cast<void**>(th);
  FC_ASSIGN_OR_RETURN(void* td, device_->Allocate(table_bytes));
  table_dev_ = static_cast<void**>(td);
  arena_ = const_cast<uint8_t*>(leases_->dram_arena());
  arena_bytes_ = leases_->dram_bytes();
  // Best effort: a second path on the same store finds the arena registered already, and copies
  // from it still work (at the speed of pageable memory when nobody registered it).
  if (arena_ != nullptr) arena_registered_ = device_->RegisterHost(arena_, arena_bytes_).ok();
  geometry_ = leases_->ssd_geometry();
  if (geometry_.num_files() > 0) {
    if (direct_) {
      FC_ASSIGN_OR_RETURN(files_, SsdFilePool::OpenFiles(geometry_));
      if (Status st = device_->RegisterFiles(files_.fds()); !st.ok()) {
        // cuFile refuses these files (in GDS mode it wants O_DIRECT): the bounce window serves.
        direct_note_ = std::string(st.message()) + "; reading through the bounce window";
        direct_ = false;
        files_ = SsdPoolFiles();
      }
    }
    if (direct_) {
      (void)device_->RegisterBuffer(window_, bytes);
      file_workers_ = std::make_unique<FileWorkers>(options_.file_workers);
    } else {
      AttachedMediaOptions mo = MediaOptionsOf(store_.options());
      mo.read_window_bytes = options_.slot_bytes;
      mo.write_staging_bytes = std::min<uint64_t>(mo.write_staging_bytes, 4 * kMiB);
      SharedMedia ssd_only;
      ssd_only.ssd = geometry_;
      FC_ASSIGN_OR_RETURN(media_, AttachedMedia::Open(ssd_only, mo));
    }
  }
  pipeline_ = std::thread([this] { PipelineLoop(); });
  finisher_ = std::thread([this] { FinishLoop(); });
  return Status::OK();
}

GpuTransfer::~GpuTransfer() {
  {
    MutexLock lock(mu_);
    while (busy_ != 0) cv_.Wait(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (pipeline_.joinable()) pipeline_.join();
  if (finisher_.joinable()) finisher_.join();
  if (stream_ != nullptr) {
    (void)device_->SynchronizeStream(stream_);
    device_->DestroyStream(stream_);
  }
  file_workers_.reset();
  media_.reset();
  if (direct_ && window_ != nullptr) device_->UnregisterBuffer(window_);
  device_->UnregisterFiles();
  for (DeviceEvent e : slot_free_) device_->DestroyEvent(e);
  device_->Free(table_dev_);
  device_->FreeHost(table_host_);
  device_->Free(window_);
  device_->FreeHost(bounce_);
  if (arena_registered_) device_->UnregisterHost(arena_);
}

uint64_t GpuTransfer::window_bytes() const {
  return 2 * uint64_t{options_.window_slots} * options_.slot_bytes;
}

GpuTransferStats GpuTransfer::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void GpuTransfer::Enqueue(Task task) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.NotifyAll();
}

Result<std::shared_ptr<GpuRestore>> GpuTransfer::Restore(std::span<const Key> keys,
                                                         const KvLayout& layout,
                                                         const DeviceKvTarget& dst,
                                                         const RestoreOptions& options) {
  FC_ASSIGN_OR_RETURN(std::vector<void*> slices, ResolveTarget(dst, layout, keys.size()));
  const uint64_t layers = layout.num_layers, planes = layout.num_planes;
  if (planes * layout.slice_bytes > options_.slot_bytes) {
    return Status::InvalidArgument(
        "one block's layer (" + std::to_string(planes * layout.slice_bytes) +
        " bytes) does not fit a window slot of " + std::to_string(options_.slot_bytes) + " bytes");
  }
  const int64_t arrival = options.arrival_ns == kArrivalNow ? SteadyNowNs() : options.arrival_ns;
  // Pinned before the handle exists: a handle that is not done waits for itself when dropped.
  FC_ASSIGN_OR_RETURN(ReadPin pin, leases_->Pin(keys, layout, arrival));
  std::shared_ptr<GpuRestore> r(new GpuRestore(device_, layout, keys.size()));
  r->arrival_ns_ = arrival;
  r->pin_ = std::move(pin);
  const std::vector<PinnedHit>& hits = r->pin_.hits;
  const uint64_t nhits = hits.size();
  auto unpin_on_error = [&](Status st) {
    if (r->pin_.id != 0) (void)leases_->Unpin(r->pin_.id, keys.size(), nullptr);
    MutexLock lock(r->mu_);
    r->done_ = true;  // nothing queued: the handle may go
    return st;
  };
  for (uint64_t l = 0; l < layers; ++l) {
    auto e = device_->CreateEvent();
    if (!e.ok()) return unpin_on_error(e.status());
    r->events_.push_back(*e);
  }
  r->sums_ = std::make_unique<std::atomic<uint64_t>[]>(nhits);
  for (uint64_t j = 0; j < nhits; ++j) r->sums_[j].store(0, std::memory_order_relaxed);
  if (nhits > 0) {
    r->host_table_.resize(layers * planes * nhits);
    for (uint64_t l = 0; l < layers; ++l) {
      for (uint64_t p = 0; p < planes; ++p) {
        for (uint64_t j = 0; j < nhits; ++j) {
          r->host_table_[(l * planes + p) * nhits + j] =
              slices[(hits[j].key * layers + l) * planes + p];
        }
      }
    }
  }
  {
    MutexLock lock(mu_);
    ++busy_;
    ++stats_.restores;
  }
  if (r->pin_.id == 0) {  // no hit: nothing to admit
    Enqueue(Task{r, nullptr});
    return r;
  }
  Status st = leases_->Admit(r->pin_.id, r->arrival_ns_, [this, r](Status admitted) {
    {
      MutexLock lock(r->mu_);
      r->admitted_ = std::move(admitted);
    }
    Enqueue(Task{r, nullptr});
  });
  if (!st.ok()) {
    // Never queued: the admission callback will not run.
    {
      MutexLock lock(mu_);
      --busy_;
    }
    cv_.NotifyAll();
    return unpin_on_error(st.WithContext("device restore"));
  }
  return r;
}

void GpuTransfer::PipelineLoop() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && queue_.empty()) cv_.Wait(mu_);
    if (queue_.empty()) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    if (task.restore) {
      RunRestore(task.restore);
    } else {
      RunPut(*task.put);
    }
    lock.Lock();
  }
}

void GpuTransfer::ReportRecorded(GpuRestore& r, uint32_t layers) {
  {
    MutexLock lock(r.mu_);
    r.layers_recorded_ = std::max(r.layers_recorded_, layers);
  }
  r.cv_.NotifyAll();
}

void GpuTransfer::RecordRemaining(GpuRestore& r, uint32_t from) {
  for (uint32_t l = from; l < r.layout_.num_layers; ++l) {
    (void)device_->Record(r.events_[l], stream_);
  }
  ReportRecorded(r, r.layout_.num_layers);
}

void GpuTransfer::Fail(GpuRestore& r, const Status& st) {
  MutexLock lock(r.mu_);
  if (r.status_.ok()) r.status_ = st;
}

std::vector<GpuTransfer::Run> GpuTransfer::RunsOf(const GpuRestore& r, const Chunk& c,
                                                  MediaType medium) const {
  const KvLayout& layout = r.layout_;
  const uint64_t slice = layout.slice_bytes;
  std::vector<Run> runs;
  for (uint32_t p = 0; p < layout.num_planes; ++p) {
    for (uint32_t j = c.first; j < c.first + c.count; ++j) {
      const PinnedHit& h = r.pin_.hits[j];
      if (h.medium != medium) continue;
      const uint64_t src =
          h.offset + SegmentLayout::FromLayerStride(layout, h.layer_stride).RunOffset(c.layer, p);
      const uint64_t slot_off = (uint64_t{p} * c.count + (j - c.first)) * slice;
      if (!runs.empty()) {
        Run& last = runs.back();
        const bool same_file =
            medium != MediaType::kSsd || geometry_.FileOf(src) == geometry_.FileOf(last.src);
        if (last.src + last.len == src && last.slot_off + last.len == slot_off && same_file) {
          last.len += slice;
          continue;
        }
      }
      runs.push_back(Run{src, slot_off, slice});
    }
  }
  return runs;
}

Status GpuTransfer::StartChunk(GpuRestore& r, Chunk& c) {
  c.slot = static_cast<uint32_t>(next_slot_++ % options_.window_slots);
  const DeviceEvent free_event = slot_free_[c.slot];
  FC_ASSIGN_OR_RETURN(const bool is_free, device_->Query(free_event));
  if (!is_free) {
    {
      MutexLock lock(mu_);
      ++stats_.window_waits;
    }
    FC_RETURN_IF_ERROR(device_->Synchronize(free_event));  // backpressure: wait, never abort
  }
  {
    MutexLock lock(mu_);
    ++stats_.chunks;
  }
  const uint64_t slot_base = uint64_t{c.slot} * options_.slot_bytes;
  const std::vector<Run> runs = RunsOf(r, c, MediaType::kSsd);
  if (runs.empty()) return Status::OK();
  if (direct_) {
    c.files = std::make_shared<FileBatch>();
    uint64_t reads = 0;
    for (const Run& run : runs) {
      for (uint64_t done = 0; done < run.len; done += options_.max_io_bytes) {
        const uint64_t len = std::min(options_.max_io_bytes, run.len - done);
        const uint64_t src = run.src + done;
        const uint64_t dev_off = slot_base + run.slot_off + done;
        file_workers_->Submit(c.files, [this, src, dev_off, len] {
          return device_->ReadFile(geometry_.FileOf(src), geometry_.FileOffset(src), window_,
                                   dev_off, len);
        });
        ++reads;
      }
    }
    MutexLock lock(mu_);
    stats_.file_reads += reads;
    return Status::OK();
  }
  // Bounce: the reader coalesces the slices (runs of them are one file range) and reads them into
  // the pinned slot, hashing each as it lands.
  const KvLayout& layout = r.layout_;
  const uint32_t planes = layout.num_planes;
  uint8_t* host = bounce_ + slot_base;
  std::vector<SliceRead> slices;
  for (uint32_t p = 0; p < planes; ++p) {
    for (uint32_t j = c.first; j < c.first + c.count; ++j) {
      const PinnedHit& h = r.pin_.hits[j];
      if (h.medium != MediaType::kSsd) continue;
      const uint64_t off =
          h.offset + SegmentLayout::FromLayerStride(layout, h.layer_stride).RunOffset(c.layer, p);
      uint8_t* dest = host + (uint64_t{p} * c.count + (j - c.first)) * layout.slice_bytes;
      slices.push_back(SliceRead{geometry_.FileOf(off), geometry_.FileOffset(off),
                                 layout.slice_bytes, dest, 0, j * planes + p});
    }
  }
  SliceCallback on_slice;
  if (verify_) {
    const uint32_t base_position = c.layer * planes;
    std::atomic<uint64_t>* sums = r.sums_.get();
    on_slice = [sums, base_position, planes](const SliceRead& s, const uint8_t* bytes,
                                             uint8_t* copy_to) {
      const uint32_t position = base_position + s.tag % planes;
      const uint64_t h =
          copy_to ? CopySliceWithChecksum(copy_to, bytes, s.len, position, CopyStores::kCached)
                  : SliceChecksum(bytes, s.len, position);
      sums[s.tag / planes].fetch_add(h, std::memory_order_relaxed);
    };
  }
  FC_ASSIGN_OR_RETURN(c.reads, media_->reader()->Start(slices, 1, nullptr, std::move(on_slice)));
  return Status::OK();
}

Status GpuTransfer::CompleteChunk(GpuRestore& r, Chunk& c) {
  Status st;
  if (c.reads) st = c.reads->Wait();
  if (c.files) st = c.files->Wait();
  c.reads.reset();
  c.files.reset();
  FC_RETURN_IF_ERROR(st);
  const KvLayout& layout = r.layout_;
  const uint64_t slice = layout.slice_bytes;
  const uint32_t planes = layout.num_planes;
  const uint64_t slot_base = uint64_t{c.slot} * options_.slot_bytes;
  uint8_t* dev = window_ + slot_base;
  uint64_t copies = 0, ssd_bytes = 0, dram_bytes = 0;
  for (const Run& run : RunsOf(r, c, MediaType::kSsd)) {
    if (!direct_) {
      FC_RETURN_IF_ERROR(device_->Copy(dev + run.slot_off, bounce_ + slot_base + run.slot_off,
                                       run.len, CopyKind::kHostToDevice, stream_));
      ++copies;
    }
    ssd_bytes += run.len;
  }
  for (const Run& run : RunsOf(r, c, MediaType::kDram)) {
    FC_RETURN_IF_ERROR(device_->Copy(dev + run.slot_off, arena_ + run.src, run.len,
                                     CopyKind::kHostToDevice, stream_));
    ++copies;
    dram_bytes += run.len;
  }
  if (verify_ && dram_bytes > 0) {
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t j = c.first; j < c.first + c.count; ++j) {
        const PinnedHit& h = r.pin_.hits[j];
        if (h.medium != MediaType::kDram) continue;
        const uint64_t off =
            h.offset + SegmentLayout::FromLayerStride(layout, h.layer_stride).RunOffset(c.layer, p);
        r.sums_[j].fetch_add(SliceChecksum(arena_ + off, slice, c.layer * planes + p),
                             std::memory_order_relaxed);
      }
    }
  }
  // The chunk's destinations, [plane][block], staged in the slot's pinned table (free: the slot's
  // event completed before StartChunk returned) and copied ahead of the scatter.
  const uint64_t nhits = r.pin_.hits.size();
  void** staged = table_host_ + uint64_t{c.slot} * table_entries_;
  void** table = table_dev_ + uint64_t{c.slot} * table_entries_;
  for (uint32_t p = 0; p < planes; ++p) {
    std::copy_n(r.host_table_.data() + (uint64_t{c.layer} * planes + p) * nhits + c.first, c.count,
                staged + uint64_t{p} * c.count);
  }
  FC_RETURN_IF_ERROR(device_->Copy(table, staged, uint64_t{planes} * c.count * sizeof(void*),
                                   CopyKind::kHostToDevice, stream_));
  FC_RETURN_IF_ERROR(device_->Scatter(dev, table, c.count, planes, c.count, slice, stream_));
  FC_RETURN_IF_ERROR(device_->Record(slot_free_[c.slot], stream_));
  if (c.last_of_layer) {
    FC_RETURN_IF_ERROR(device_->Record(r.events_[c.layer], stream_));
    ReportRecorded(r, c.layer + 1);
  }
  MutexLock lock(mu_);
  stats_.host_copies += copies;
  stats_.ssd_bytes += ssd_bytes;
  stats_.dram_bytes += dram_bytes;
  return Status::OK();
}

void GpuTransfer::RunRestore(const std::shared_ptr<GpuRestore>& rp) {
  GpuRestore& r = *rp;
  Status st;
  bool admitted_ok;
  {
    MutexLock lock(r.mu_);
    st = r.admitted_;
    admitted_ok = r.admitted_.ok();
    if (st.ok() && r.cancelled_) st = Status::Aborted("device restore cancelled");
  }
  const bool admitted = r.pin_.id != 0 && admitted_ok;
  const KvLayout& layout = r.layout_;
  const uint32_t nhits = static_cast<uint32_t>(r.pin_.hits.size());
  // At least one: Restore refused a layout whose block's layer exceeds a slot, and a slot's
  // table has room for every plane.
  const uint32_t per_chunk = static_cast<uint32_t>(std::max<uint64_t>(
      1, std::min(options_.slot_bytes / (uint64_t{layout.num_planes} * layout.slice_bytes),
                  table_entries_ / layout.num_planes)));
  std::vector<Chunk> chunks;
  for (uint32_t l = 0; l < layout.num_layers && nhits > 0; ++l) {
    for (uint32_t first = 0; first < nhits; first += per_chunk) {
      Chunk c;
      c.layer = l;
      c.first = first;
      c.count = std::min(per_chunk, nhits - first);
      c.last_of_layer = first + c.count >= nhits;
      chunks.push_back(std::move(c));
    }
  }
  // One chunk of lookahead: chunk i's reads are started before chunk i - 1's copies are queued.
  bool prev_started = false;
  for (size_t i = 0; i <= chunks.size() && (st.ok() || prev_started); ++i) {
    bool started = false;
    if (i < chunks.size() && st.ok()) {
      bool cancelled;
      {
        MutexLock lock(r.mu_);
        cancelled = r.cancelled_;
      }
      if (cancelled) {
        st = Status::Aborted("device restore cancelled");
      } else {
        st = StartChunk(r, chunks[i]);
        started = st.ok();
      }
    }
    if (prev_started) {
      Chunk& prev = chunks[i - 1];
      if (st.ok()) {
        st = CompleteChunk(r, prev);
      } else {  // its reads still land in memory this path owns: wait for them
        if (prev.reads) (void)prev.reads->Wait();
        if (prev.files) (void)prev.files->Wait();
      }
    }
    if (!st.ok() && started) {
      Chunk& cur = chunks[i];
      if (cur.reads) (void)cur.reads->Wait();
      if (cur.files) (void)cur.files->Wait();
      started = false;
    }
    prev_started = started;
  }
  if (!st.ok()) {
    Fail(r, st);
    // A chunk that failed halfway may have queued copies into its slot without marking the slot
    // in use: let them land before the next restore reuses the window.
    (void)device_->SynchronizeStream(stream_);
  }
  uint32_t recorded;
  {
    MutexLock lock(r.mu_);
    recorded = r.layers_recorded_;
  }
  RecordRemaining(r, recorded);  // every layer when there was no hit, or after an error
  // The window share goes back once every read is done; the pin once the copies from the arena
  // are (the finisher waits for the last event).
  if (admitted) leases_->ReadsDone(r.pin_.id);
  {
    MutexLock lock(mu_);
    finishing_.push_back(rp);
  }
  cv_.NotifyAll();
}

GetResult GpuTransfer::OutcomeOf(const GpuRestore& r, const Status& st) const {
  GetResult result;
  result.found.assign(r.num_keys_, 0);
  const uint64_t block_bytes = r.layout_.block_bytes();
  for (size_t j = 0; j < r.pin_.hits.size(); ++j) {
    const PinnedHit& h = r.pin_.hits[j];
    bool ok = st.ok();
    const bool verified = verify_ && (h.medium == MediaType::kDram || !direct_);
    if (ok && verified && r.sums_[j].load(std::memory_order_relaxed) != h.checksum) {
      ok = false;
      result.corrupt++;
    }
    if (ok) {
      result.found[h.key] = 1;
      result.hits++;
      (h.medium == MediaType::kSsd ? result.bytes_from_ssd : result.bytes_from_dram) += block_bytes;
    }
  }
  while (result.leading_hits < r.num_keys_ && result.found[result.leading_hits]) {
    result.leading_hits++;
  }
  return result;
}

void GpuTransfer::FinishLoop() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && finishing_.empty()) cv_.Wait(mu_);
    if (finishing_.empty()) return;
    std::shared_ptr<GpuRestore> rp = std::move(finishing_.front());
    finishing_.pop_front();
    lock.Unlock();
    GpuRestore& r = *rp;
    // Stream order: the last layer's event completes after every copy and scatter before it.
    Status sync = device_->Synchronize(r.events_.back());
    if (!sync.ok()) Fail(r, sync);
    Status st;
    {
      MutexLock rl(r.mu_);
      st = r.status_;
    }
    GetResult result = OutcomeOf(r, st);
    if (r.pin_.id != 0) {
      if (Status held = leases_->Unpin(r.pin_.id, r.num_keys_, &result); !held.ok()) {
        Fail(r, held);
        result = OutcomeOf(r, held);  // every key a miss
      }
    }
    {
      MutexLock rl(r.mu_);
      r.result_ = std::move(result);
      r.done_ = true;
    }
    r.cv_.NotifyAll();
    rp.reset();
    lock.Lock();
    --busy_;
    cv_.NotifyAll();
  }
}

}  // namespace flatcake::gpu
