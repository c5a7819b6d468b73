// GpuTransfer's puts from device memory (gpu_transfer.h): gather kernel into the window
// layer-major, one copy into the pinned bounce window, the store's Put from there.
#include <algorithm>
#include <utility>

#include "gpu/gpu_transfer.h"

namespace flatcake::gpu {

struct GpuTransfer::PutJob {
  std::vector<Key> keys;
  KvLayout layout;
  std::vector<void*> slices;  // ResolveTarget's: [(i * layers + l) * planes + p]
  WriteHints hints;

  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);
  PutResult result GUARDED_BY(mu);
};

Result<PutResult> GpuTransfer::Put(std::span<const Key> keys, const KvLayout& layout,
                                   const DeviceKvTarget& src, const WriteHints& hints) {
  auto job = std::make_shared<PutJob>();
  FC_ASSIGN_OR_RETURN(job->slices, ResolveTarget(src, layout, keys.size()));
  if (layout.block_bytes() > uint64_t{options_.window_slots} * options_.slot_bytes) {
    return Status::InvalidArgument("a block of " + std::to_string(layout.block_bytes()) +
                                   " bytes does not fit the window");
  }
  job->keys.assign(keys.begin(), keys.end());
  job->layout = layout;
  job->hints = hints;
  {
    MutexLock lock(mu_);
    ++busy_;
  }
  Enqueue(Task{nullptr, job});
  MutexLock lock(job->mu);
  while (!job->done) job->cv.Wait(job->mu);
  if (!job->status.ok()) return job->status;
  return job->result;
}

void GpuTransfer::RunPut(PutJob& job) {
  const KvLayout& layout = job.layout;
  const uint64_t layers = layout.num_layers, planes = layout.num_planes, slice = layout.slice_bytes;
  const uint64_t n = job.keys.size();
  const uint64_t per_batch = std::min<uint64_t>(
      n, uint64_t{options_.window_slots} * options_.slot_bytes / layout.block_bytes());
  PutResult acc;
  void* table = nullptr;
  auto run = [&]() -> Status {
    if (n == 0) return Status::OK();
    FC_ASSIGN_OR_RETURN(table, device_->Allocate(layers * planes * per_batch * sizeof(void*)));
    std::vector<const void*> host_table(layers * planes * per_batch);
    std::vector<void*> ptrs(per_batch * layers * planes);
    for (uint64_t b0 = 0; b0 < n; b0 += per_batch) {
      const uint64_t cnt = std::min(per_batch, n - b0);
      // Row l * planes + p of the window holds that layer and plane of every block: layer-major.
      for (uint64_t l = 0; l < layers; ++l) {
        for (uint64_t p = 0; p < planes; ++p) {
          for (uint64_t b = 0; b < cnt; ++b) {
            host_table[(l * planes + p) * cnt + b] =
                job.slices[((b0 + b) * layers + l) * planes + p];
            ptrs[(b * layers + l) * planes + p] = bounce_ + ((l * planes + p) * cnt + b) * slice;
          }
        }
      }
      FC_RETURN_IF_ERROR(device_->Copy(table, host_table.data(),
                                       layers * planes * cnt * sizeof(void*),
                                       CopyKind::kHostToDevice, stream_));
      FC_RETURN_IF_ERROR(device_->Gather(window_, static_cast<const void* const*>(table), cnt,
                                         static_cast<uint32_t>(layers * planes),
                                         static_cast<uint32_t>(cnt), slice, stream_));
      FC_RETURN_IF_ERROR(device_->Copy(bounce_, window_, cnt * layout.block_bytes(),
                                       CopyKind::kDeviceToHost, stream_));
      // The table's host copy and the bounce window are reused by the next batch.
      FC_RETURN_IF_ERROR(device_->SynchronizeStream(stream_));
      WriteHints hints = job.hints;
      if (b0 > 0) {
        hints.prefix_tail = job.keys[b0 - 1];
        if (hints.context_tokens) {
          *hints.context_tokens += b0 * store_.options().tokens_per_block;
        }
      }
      const BlockBuffers buffers{BufferKind::kSlicePointers,
                                 std::span<void* const>(ptrs.data(), cnt * layers * planes)};
      FC_ASSIGN_OR_RETURN(PutResult r, store_.Put(std::span<const Key>(job.keys).subspan(b0, cnt),
                                                  layout, buffers, hints));
      acc.written += r.written;
      acc.already_present += r.already_present;
      acc.segments += r.segments;
      if (r.written > 0) acc.medium = r.medium;
    }
    return Status::OK();
  };
  Status st = run();
  if (table != nullptr) {
    (void)device_->SynchronizeStream(stream_);
    device_->Free(table);
  }
  if (!st.ok()) st = st.WithContext("device put");
  {
    MutexLock lock(mu_);
    ++stats_.puts;
  }
  {
    MutexLock lock(job.mu);
    job.status = st;
    job.result = acc;
    job.done = true;
  }
  job.cv.NotifyAll();
  MutexLock lock(mu_);
  --busy_;
  cv_.NotifyAll();
}

}  // namespace flatcake::gpu
