// GpuTransfer: restores into, and puts from, device memory laid out as the engine's paged KV
// pool (FC-CIO's GPU path, paper §3.4; docs/gpu.md). One per CUDA stream of the caller's choice
// of concurrency; each owns a bounded window.
//
// A device restore is a lease of the store (store/read_leases.h): the hits are pinned, FC-MAS
// admits the request exactly as it admits a host restore of the same hits, and this class moves
// the bytes, then gives the window share back and the pin, with what it delivered. The leases are
// the embedded store's (FlatStore) or the node daemon's, taken by its client in this process
// (serve::RemoteStore::OpenReadLeases): the path then reads the client's own mapping of the
// arena and the pool files by their paths, as the client's host restores do. The data half runs on
// one pipeline thread, chunk by chunk, through a window of `window_slots` slots (default two:
// ping-pong) of `slot_bytes` each in device memory, and in bounce mode as many pinned host slots:
//   - a chunk is one layer of up to a slot's worth of blocks (a layer larger than a slot goes
//     in several chunks), laid out [plane][block] in its slot, so that consecutive blocks of a
//     segment are one contiguous run both in the medium and in the slot;
//   - SSD hits are read into the slot: with cuFile straight into device memory (gds,
//     cufile-compat), or through the store's restore reader (coalesced, O_DIRECT) into the pinned
//     bounce slot and then copied with one cudaMemcpyAsync per run (bounce);
//   - DRAM hits are copied from the arena (registered with cudaHostRegister) with one
//     cudaMemcpyAsync per run of consecutive blocks;
//   - a scatter kernel copies the slot's slices into their page slots (their addresses go to the
//     device in a small per-slot table, staged in pinned memory so that the copy is asynchronous),
//     an event records that the slot is free again, and after a layer's last chunk the layer's
//     event is recorded;
//   - the next chunk's reads start before this chunk's copies are issued (one chunk of
//     lookahead), and a chunk whose slot is still in use waits for that slot's event: a full
//     window delays restores, it never aborts one.
// Checksums are verified (when `verify`) on the host, where the bytes pass: SSD slices in the
// bounce slot as the reader lands them, DRAM slices in the arena. In the direct-file modes the
// bytes never reach host memory and are not verified (verifies() says so).
//
// Device puts (gpu_put.cc) run on the pipeline thread too, between restores: a gather kernel
// packs a batch's pages into the window layer-major ([layer][plane][block]), one copy brings it
// into the pinned bounce window, and the store's Put writes it from there (its placement,
// checksums and segment writes); batches larger than the window go in several Puts chained by
// prefix_tail.
//
// Thread safety: Restore and Put may be called from any thread; work runs in submission order.
// A GpuRestore handle may be used from any thread. The destructor waits for every restore and put.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "flatcake/store.h"
#include "gpu/device.h"
#include "store/attached_media.h"
#include "store/data_plan.h"
#include "store/read_leases.h"
#include "util/thread_annotations.h"

namespace flatcake {
class FlatStore;
}

namespace flatcake::gpu {

// Where a batch's slices are in device memory. Either the engine's paged pool: bases[l * planes
// + p] is the page array of layer l, plane p (its K or V buffer), and key i's slice lies at
// bases[l * planes + p] + pages[i] * page_bytes; or one device pointer per slice,
// slices[(i * layers + l) * planes + p] (bases and pages empty).
struct DeviceKvTarget {
  std::vector<void*> bases;
  std::vector<uint64_t> pages;
  uint64_t page_bytes = 0;  // 0: slice_bytes
  std::vector<void*> slices;
};

// The per-slice pointers of `target` for `num_keys` keys of `layout`, [(i * L + l) * P + p].
// InvalidArgument for a wrong count, a null pointer or a page stride below slice_bytes.
Result<std::vector<void*>> ResolveTarget(const DeviceKvTarget& target, const KvLayout& layout,
                                         size_t num_keys);

struct GpuTransferOptions {
  uint32_t window_slots = 2;         // ping-pong; at least 2
  uint64_t slot_bytes = 32 * kMiB;   // one layer of up to this many bytes per slot
  bool verify = true;                // hash what passes through host memory (see above)
  uint32_t file_workers = 4;         // threads issuing cuFile reads (direct-file modes)
  uint64_t max_io_bytes = 4 * kMiB;  // cuFile reads are split at this size
};

struct GpuTransferStats {
  uint64_t restores = 0, puts = 0;
  uint64_t chunks = 0;                     // window slots filled
  uint64_t window_waits = 0;               // chunks that found their slot still in use and waited
  uint64_t ssd_bytes = 0, dram_bytes = 0;  // delivered into the window, per medium
  uint64_t file_reads = 0;                 // cuFile reads (direct-file modes)
  uint64_t host_copies = 0;                // host-to-device copies issued
};

class GpuTransfer;

// A device restore in progress (GpuTransfer::Restore). Destroying it before it is done cancels it
// and waits for it.
class GpuRestore {
 public:
  ~GpuRestore();
  GpuRestore(const GpuRestore&) = delete;
  GpuRestore& operator=(const GpuRestore&) = delete;

  // Blocks until the restore is done: every layer scattered into its pages (the device work
  // completed) and the pins dropped; its result, or its error (Aborted when cancelled). A block
  // that failed verification is a miss (found 0, counted corrupt); its pages hold what was read.
  Result<GetResult> Wait() EXCLUDES(mu_);
  bool done() const EXCLUDES(mu_);
  // Blocks the host until layer `layer` is in its pages. OK, or the restore's error.
  Status WaitLayer(uint32_t layer) EXCLUDES(mu_);
  // Makes `stream`'s later work wait for layer `layer` (cudaStreamWaitEvent); blocks the host
  // only until the layer's event is recorded, which is when its copies are queued. After an
  // error the event is still recorded (so no stream waits forever), and this returns the error.
  Status StreamWaitLayer(uint32_t layer, DeviceStream stream) EXCLUDES(mu_);
  // Layer `layer`'s event (a cudaEvent_t), once recorded (blocks until then). Valid until this
  // handle is destroyed.
  Result<DeviceEvent> LayerEvent(uint32_t layer) EXCLUDES(mu_);
  // Fails the restore with Aborted unless it is done: chunks not yet read are skipped (their
  // layers' events are still recorded). A no-op once done.
  void Cancel() EXCLUDES(mu_);
  uint32_t num_layers() const { return layout_.num_layers; }

 private:
  friend class GpuTransfer;
  GpuRestore(std::shared_ptr<Device> device, const KvLayout& layout, size_t num_keys);

  const std::shared_ptr<Device> device_;
  const KvLayout layout_;
  const size_t num_keys_;

  // Set before the handle is shared, then read by the pipeline thread only.
  ReadPin pin_;
  std::vector<DeviceEvent> events_;                // one per layer
  std::vector<void*> host_table_;                  // destination pointers [l][p][hit]
  std::unique_ptr<std::atomic<uint64_t>[]> sums_;  // per hit: its slices' checksums, summed
  int64_t arrival_ns_ = 0;

  mutable Mutex mu_;
  CondVar cv_;
  Status admitted_ GUARDED_BY(mu_);  // FC-MAS's answer
  bool cancelled_ GUARDED_BY(mu_) = false;
  uint32_t layers_recorded_ GUARDED_BY(mu_) = 0;
  Status status_ GUARDED_BY(mu_);  // the first error
  bool done_ GUARDED_BY(mu_) = false;
  GetResult result_ GUARDED_BY(mu_);
};

class GpuTransfer {
 public:
  // A transfer path on `device` (OpenGpu's, in `mode`) for `store`: creates its stream and its
  // window, registers the DRAM arena with the device (best effort: a second path on one store
  // finds it registered), and in the direct-file modes registers the pool files with cuFile; in
  // bounce mode opens its own reader of the pool files. `mode` kFake runs the bounce logic, or the
  // direct-file logic when the fake device does direct file I/O.
  static Result<std::unique_ptr<GpuTransfer>> Create(FlatStore& store,
                                                     std::shared_ptr<Device> device, GpuMode mode,
                                                     const GpuTransferOptions& options = {});
  // The same over any store's read leases: the node daemon's client's
  // (serve::RemoteStore::OpenReadLeases) run the path in the client process, on its own mapping
  // of the arena and its own descriptors of the pool files.
  static Result<std::unique_ptr<GpuTransfer>> Create(std::unique_ptr<ReadLeases> leases,
                                                     std::shared_ptr<Device> device, GpuMode mode,
                                                     const GpuTransferOptions& options = {});
  ~GpuTransfer();
  GpuTransfer(const GpuTransfer&) = delete;
  GpuTransfer& operator=(const GpuTransfer&) = delete;

  // Starts restoring `keys` into `dst` and returns at once (RestoreOptions::on_layer is not
  // used: the handle's events report layers). Errors before anything is read: bad layout or
  // target, a hit stored with another layout, a layer whose single block does not fit a slot.
  // The target's memory must stay valid until the restore is done.
  Result<std::shared_ptr<GpuRestore>> Restore(std::span<const Key> keys, const KvLayout& layout,
                                              const DeviceKvTarget& dst,
                                              const RestoreOptions& options = {});
  // Writes `keys` from device memory `src` (gpu_put.cc); returns when the store has them.
  Result<PutResult> Put(std::span<const Key> keys, const KvLayout& layout,
                        const DeviceKvTarget& src, const WriteHints& hints = {});

  Device& device() const { return *device_; }
  DeviceStream stream() const { return stream_; }
  GpuMode mode() const { return mode_; }
  bool verifies() const { return verify_; }
  bool direct_file_io() const { return direct_; }
  // Set when the direct-file mode could not register the pool files with cuFile (they are not
  // O_DIRECT, say) and the path reads through the bounce window instead.
  const std::string& direct_note() const { return direct_note_; }
  // Device window plus pinned bounce window.
  uint64_t window_bytes() const;
  uint64_t slot_bytes() const { return options_.slot_bytes; }
  GpuTransferStats stats() const EXCLUDES(mu_);

 private:
  struct Chunk;
  struct Run;
  struct PutJob;
  class FileWorkers;
  // Work for the pipeline thread: a restore, or a put.
  struct Task {
    std::shared_ptr<GpuRestore> restore;
    std::shared_ptr<PutJob> put;
  };

  GpuTransfer(std::unique_ptr<ReadLeases> leases, std::shared_ptr<Device> device, GpuMode mode,
              const GpuTransferOptions& options);
  Status Init();
  void Enqueue(Task task) EXCLUDES(mu_);
  void PipelineLoop() EXCLUDES(mu_);
  void FinishLoop() EXCLUDES(mu_);
  void RunRestore(const std::shared_ptr<GpuRestore>& r) EXCLUDES(mu_);
  void RunPut(PutJob& job) EXCLUDES(mu_);
  // Records events [from, layers) so that no waiter hangs on a restore that stopped early.
  void RecordRemaining(GpuRestore& r, uint32_t from);
  void ReportRecorded(GpuRestore& r, uint32_t layers);
  // The chunk's runs of consecutive blocks on one medium (and, for SSD, one file).
  std::vector<Run> RunsOf(const GpuRestore& r, const Chunk& c, MediaType medium) const;
  // Waits for the slot, then starts the chunk's SSD reads (they land asynchronously).
  Status StartChunk(GpuRestore& r, Chunk& c) EXCLUDES(mu_);
  // Waits for the chunk's reads, then queues its copies, its scatter and its events.
  Status CompleteChunk(GpuRestore& r, Chunk& c) EXCLUDES(mu_);
  void Fail(GpuRestore& r, const Status& st);
  GetResult OutcomeOf(const GpuRestore& r, const Status& st) const;

  const std::unique_ptr<ReadLeases> leases_;  // this path's pins, under an owner of their own
  Store& store_;                              // leases_'s: the puts
  const std::shared_ptr<Device> device_;
  const GpuMode mode_;
  const GpuTransferOptions options_;
  bool direct_ = false;
  bool verify_ = true;
  DeviceStream stream_ = nullptr;
  uint8_t* window_ = nullptr;  // device: window_slots * slot_bytes
  uint8_t* bounce_ = nullptr;  // pinned host, same size (bounce mode and puts)
  // Per slot: the scatter's destination table, staged in pinned memory, and on the device.
  uint64_t table_entries_ = 0;  // per slot
  void** table_host_ = nullptr;
  void** table_dev_ = nullptr;
  std::string direct_note_;  // why a direct-file mode runs the bounce logic instead
  std::vector<DeviceEvent> slot_free_;
  uint64_t next_slot_ = 0;  // chunks started, over every restore: slot = next_slot_ % slots
  uint8_t* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  bool arena_registered_ = false;
  SsdPoolGeometry geometry_;
  std::unique_ptr<AttachedMedia> media_;  // bounce mode with SSD: its own reader
  SsdPoolFiles files_;                    // direct-file modes with SSD
  std::unique_ptr<FileWorkers> file_workers_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ GUARDED_BY(mu_);
  std::deque<std::shared_ptr<GpuRestore>> finishing_ GUARDED_BY(mu_);
  size_t busy_ GUARDED_BY(mu_) = 0;  // tasks queued or running, restores not yet finished
  bool stop_ GUARDED_BY(mu_) = false;
  GpuTransferStats stats_ GUARDED_BY(mu_);
  std::thread pipeline_;
  std::thread finisher_;
};

}  // namespace flatcake::gpu
