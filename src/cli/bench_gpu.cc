// `flatcake bench gpu`: the GPU data path (docs/gpu.md) against the limits of the same bytes,
// measured side by side in one run:
//   ssd_to_hbm_vs_raw      an SSD restore into a paged pool in device memory, against the same
//                          slice reads (the store's reader, coalesced, O_DIRECT where the pool
//                          has it) into pinned host memory;
//   dram_to_hbm_vs_memcpy  a DRAM restore into the paged pool, against one host-to-device copy of
//                          the same bytes from pinned memory;
//   scatter_vs_d2d         the scatter kernel over a window of slices, against one device-to-device
//                          copy of the same bytes;
//   mismatches             blocks whose pages differ from what was stored, over every restore;
// and the time to the first layer of each restore, and the window's memory. Medians of --reps.
// Without a GPU it measures nothing and exits 1; --fake runs it against the fake device (host
// memory), and says so in every line: those figures describe host memory, not a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/report_format.h"
#include "cli/store_flags.h"
#include "gpu/device.h"
#include "gpu/gpu_transfer.h"
#include "store/flat_store.h"
#include "store/segment_layout.h"
#include "testing/paged_pool.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GpuBenchArgs {
  uint64_t bytes = 2 * kGiB;  // per restore
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice = 16 * kKiB;
  uint64_t slot_bytes = 32 * kMiB;
  uint32_t reps = 3;
  std::string dir;
  std::string gpu_mode = "auto";
  bool fake = false;
  bool verify = false;
  bool json = false;
};

struct GpuFigures {
  std::string mode, device;
  bool fake = false;
  uint64_t bytes = 0;
  double ssd_hbm_gbps = 0, ssd_raw_gbps = 0;
  double dram_hbm_gbps = 0, memcpy_gbps = 0;
  double scatter_gbps = 0, d2d_gbps = 0;
  double ssd_first_layer_ms = 0, dram_first_layer_ms = 0;
  uint64_t mismatches = 0;
  uint64_t window_bytes = 0;
  bool direct_io = false;
};

double Gbps(uint64_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0; }

class GpuBench {
 public:
  GpuBench(const GpuBenchArgs& a, gpu::OpenedDevice opened)
      : a_(a), opened_(std::move(opened)), dev_(*opened_.device) {}
  ~GpuBench();
  Status Run(GpuFigures* f);

 private:
  Status Setup();
  // Restores `keys` into the device pool: seconds to the whole restore, ms to layer 0.
  Status RestoreOnce(const std::vector<Key>& keys, double* seconds, double* first_layer_ms);
  // The device pool's blocks that differ from `keys`' content.
  Result<uint64_t> CountMismatches(const std::vector<Key>& keys);
  Result<double> RawSsdSeconds(const std::vector<Key>& keys);
  Result<double> MemcpySeconds(uint64_t bytes);
  Status MeasureScatter(double* scatter_s, double* d2d_s, uint64_t* bytes);

  const GpuBenchArgs a_;
  gpu::OpenedDevice opened_;
  gpu::Device& dev_;
  KvLayout layout_;
  uint64_t blocks_ = 0;
  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<FlatStore> store_;
  std::unique_ptr<gpu::GpuTransfer> transfer_;
  gpu::DeviceStream stream_ = nullptr;
  std::vector<void*> pool_;  // device: one page array per (layer, plane)
  std::vector<uint64_t> pages_;
  std::vector<Key> ssd_keys_, dram_keys_;
};

GpuBench::~GpuBench() {
  transfer_.reset();
  for (void* p : pool_) dev_.Free(p);
  if (stream_) dev_.DestroyStream(stream_);
}

Status GpuBench::Setup() {
  layout_ = KvLayout{a_.layers, a_.planes, a_.slice};
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout_));
  blocks_ = std::max<uint64_t>(1, a_.bytes / layout_.block_bytes());
  const uint64_t bytes = blocks_ * layout_.block_bytes();
  // The arena and two pinned host buffers of the restore's size; the pool files on disk.
  FC_RETURN_IF_ERROR(CheckHostMemory(3 * bytes + 256 * kMiB, "bench gpu (--bytes)",
                                     "the DRAM arena and the pinned baselines"));
  tmp_ = std::make_unique<TempDir>("flatcake-bench-gpu", a_.dir);
  StoreOptions o;
  o.dram_bytes = bytes + 128 * kMiB;
  o.ssd_dirs = {tmp_->path()};
  o.ssd_file_bytes = 256 * kMiB;
  o.ssd_bytes = (bytes + 512 * kMiB) / o.ssd_file_bytes * o.ssd_file_bytes;
  o.max_scopes = 1024;
  o.recover = false;
  o.sync = SyncMode::kNone;
  FC_ASSIGN_OR_RETURN(store_, FlatStore::OpenWithEngine(o, nullptr));
  gpu::GpuTransferOptions to;
  to.slot_bytes = a_.slot_bytes;
  to.verify = a_.verify;
  FC_ASSIGN_OR_RETURN(transfer_,
                      gpu::GpuTransfer::Create(*store_, opened_.device, opened_.probe.mode, to));
  FC_ASSIGN_OR_RETURN(stream_, dev_.CreateStream());
  for (uint64_t i = 0; i < uint64_t{layout_.num_layers} * layout_.num_planes; ++i) {
    FC_ASSIGN_OR_RETURN(void* p, dev_.Allocate(blocks_ * layout_.slice_bytes));
    pool_.push_back(p);
  }
  pages_ = testing::ReversedPages(blocks_, blocks_);
  ssd_keys_ = MakeKeys(1, 0, blocks_);
  dram_keys_ = MakeKeys(2, 0, blocks_);
  // Written in batches of 64 MiB, as an engine offloads.
  const uint64_t batch = std::max<uint64_t>(1, 64 * kMiB / layout_.block_bytes());
  HostBlocks src(layout_, batch);
  for (const auto* keys : {&ssd_keys_, &dram_keys_}) {
    for (uint64_t b0 = 0; b0 < blocks_; b0 += batch) {
      const uint64_t n = std::min(batch, blocks_ - b0);
      std::vector<Key> part(keys->begin() + b0, keys->begin() + b0 + n);
      src.Fill(part);
      WriteHints hints;
      hints.force_medium = keys == &ssd_keys_ ? MediaType::kSsd : MediaType::kDram;
      if (b0 > 0) hints.prefix_tail = (*keys)[b0 - 1];
      BlockBuffers buffers{BufferKind::kBlockContiguous,
                           std::span<void* const>(src.ptrs.data(), n)};
      FC_ASSIGN_OR_RETURN(PutResult r, store_->Put(part, layout_, buffers, hints));
      if (r.written != n) return Status::IOError("bench gpu: a put wrote fewer blocks");
    }
  }
  return Status::OK();
}

Status GpuBench::RestoreOnce(const std::vector<Key>& keys, double* seconds,
                             double* first_layer_ms) {
  gpu::DeviceKvTarget target;
  target.bases = pool_;
  target.pages = pages_;
  const auto t0 = Clock::now();
  FC_ASSIGN_OR_RETURN(auto r, transfer_->Restore(keys, layout_, target));
  FC_RETURN_IF_ERROR(r->WaitLayer(0));
  *first_layer_ms = SecondsSince(t0) * 1e3;
  FC_ASSIGN_OR_RETURN(GetResult got, r->Wait());
  *seconds = SecondsSince(t0);
  if (got.hits != keys.size()) {
    return Status::IOError("bench gpu: a restore found " + std::to_string(got.hits) + " of " +
                           std::to_string(keys.size()) + " blocks");
  }
  return Status::OK();
}

Result<uint64_t> GpuBench::CountMismatches(const std::vector<Key>& keys) {
  testing::HostPagedPool host(layout_, blocks_);
  for (size_t i = 0; i < pool_.size(); ++i) {
    FC_RETURN_IF_ERROR(dev_.Copy(host.arrays[i].data(), pool_[i], host.arrays[i].size(),
                                 gpu::CopyKind::kDeviceToHost, stream_));
  }
  FC_RETURN_IF_ERROR(dev_.SynchronizeStream(stream_));
  uint64_t bad = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!host.Holds(keys[i], pages_[i], layout_.num_layers)) ++bad;
  }
  return bad;
}

Result<double> GpuBench::RawSsdSeconds(const std::vector<Key>& keys) {
  // The same slice reads as the device restore's, into pinned host memory, layer-major.
  FC_ASSIGN_OR_RETURN(ReadPin pin, store_->PinRead(~uint64_t{0} - 1, keys, layout_));
  const SharedMedia media = store_->shared_media();
  SharedMedia ssd_only;
  ssd_only.ssd = media.ssd;
  AttachedMediaOptions mo = MediaOptionsOf(store_->options());
  FC_ASSIGN_OR_RETURN(auto attached, AttachedMedia::Open(ssd_only, mo));
  const uint64_t nhits = pin.hits.size(), planes = layout_.num_planes, slice = layout_.slice_bytes;
  FC_ASSIGN_OR_RETURN(void* host, dev_.AllocateHost(nhits * layout_.block_bytes()));
  std::vector<SliceRead> slices;
  slices.reserve(nhits * layout_.num_layers * planes);
  for (uint32_t l = 0; l < layout_.num_layers; ++l) {
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint64_t j = 0; j < nhits; ++j) {
        const PinnedHit& h = pin.hits[j];
        const uint64_t off =
            h.offset + SegmentLayout::FromLayerStride(layout_, h.layer_stride).RunOffset(l, p);
        slices.push_back(
            SliceRead{media.ssd.FileOf(off), media.ssd.FileOffset(off), slice,
                      static_cast<uint8_t*>(host) + ((l * planes + p) * nhits + j) * slice, l, 0});
      }
    }
  }
  const auto t0 = Clock::now();
  Status st = attached->reader()->Restore(slices);
  const double s = SecondsSince(t0);
  dev_.FreeHost(host);
  (void)store_->Unpin(~uint64_t{0} - 1, pin.id);
  FC_RETURN_IF_ERROR(st);
  return s;
}

Result<double> GpuBench::MemcpySeconds(uint64_t bytes) {
  FC_ASSIGN_OR_RETURN(void* host, dev_.AllocateHost(bytes));
  std::fill_n(static_cast<uint8_t*>(host), bytes, uint8_t{1});
  auto dst = dev_.Allocate(bytes);
  if (!dst.ok()) {
    dev_.FreeHost(host);
    return dst.status();
  }
  const auto t0 = Clock::now();
  Status st = dev_.Copy(*dst, host, bytes, gpu::CopyKind::kHostToDevice, stream_);
  if (st.ok()) st = dev_.SynchronizeStream(stream_);
  const double s = SecondsSince(t0);
  dev_.Free(*dst);
  dev_.FreeHost(host);
  FC_RETURN_IF_ERROR(st);
  return s;
}

Status GpuBench::MeasureScatter(double* scatter_s, double* d2d_s, uint64_t* bytes) {
  // The window of one slot, scattered to the pool's page slots of layer 0's planes.
  const uint64_t cols = std::min<uint64_t>(
      blocks_, a_.slot_bytes / (uint64_t{layout_.num_planes} * layout_.slice_bytes));
  *bytes = cols * layout_.num_planes * layout_.slice_bytes;
  std::vector<void*> table(layout_.num_planes * cols);
  for (uint32_t p = 0; p < layout_.num_planes; ++p) {
    for (uint64_t c = 0; c < cols; ++c) {
      table[p * cols + c] = static_cast<uint8_t*>(pool_[p]) + pages_[c] * layout_.slice_bytes;
    }
  }
  FC_ASSIGN_OR_RETURN(void* window, dev_.Allocate(*bytes));
  FC_ASSIGN_OR_RETURN(void* copy_dst, dev_.Allocate(*bytes));
  FC_ASSIGN_OR_RETURN(void* dtable, dev_.Allocate(table.size() * sizeof(void*)));
  Status st = dev_.Copy(dtable, table.data(), table.size() * sizeof(void*),
                        gpu::CopyKind::kHostToDevice, stream_);
  constexpr int kIters = 20;
  auto time = [&](auto&& op) -> Result<double> {
    FC_RETURN_IF_ERROR(op());  // warm-up
    FC_RETURN_IF_ERROR(dev_.SynchronizeStream(stream_));
    const auto t0 = Clock::now();
    for (int i = 0; i < kIters; ++i) FC_RETURN_IF_ERROR(op());
    FC_RETURN_IF_ERROR(dev_.SynchronizeStream(stream_));
    return SecondsSince(t0) / kIters;
  };
  if (st.ok()) {
    auto s = time([&] {
      return dev_.Scatter(window, static_cast<void* const*>(dtable), cols, layout_.num_planes,
                          static_cast<uint32_t>(cols), layout_.slice_bytes, stream_);
    });
    auto d = time([&] {
      return dev_.Copy(copy_dst, window, *bytes, gpu::CopyKind::kDeviceToDevice, stream_);
    });
    if (s.ok() && d.ok()) {
      *scatter_s = *s;
      *d2d_s = *d;
    } else {
      st = s.ok() ? d.status() : s.status();
    }
  }
  for (void* p : {window, copy_dst, dtable}) dev_.Free(p);
  return st;
}

Status GpuBench::Run(GpuFigures* f) {
  FC_RETURN_IF_ERROR(Setup());
  f->mode = std::string(gpu::GpuModeName(opened_.probe.mode));
  f->device = dev_.Describe();
  f->fake = dev_.fake();
  f->bytes = blocks_ * layout_.block_bytes();
  f->window_bytes = transfer_->window_bytes();
  f->direct_io = store_->shared_media().ssd.direct;
  std::vector<double> hbm, raw, dram, cpy, ssd_first, dram_first;
  for (uint32_t rep = 0; rep < a_.reps; ++rep) {
    double s = 0, first = 0;
    FC_RETURN_IF_ERROR(RestoreOnce(ssd_keys_, &s, &first));
    hbm.push_back(s);
    ssd_first.push_back(first);
    FC_ASSIGN_OR_RETURN(uint64_t bad, CountMismatches(ssd_keys_));
    f->mismatches += bad;
    FC_ASSIGN_OR_RETURN(double r, RawSsdSeconds(ssd_keys_));
    raw.push_back(r);
    FC_RETURN_IF_ERROR(RestoreOnce(dram_keys_, &s, &first));
    dram.push_back(s);
    dram_first.push_back(first);
    FC_ASSIGN_OR_RETURN(bad, CountMismatches(dram_keys_));
    f->mismatches += bad;
    FC_ASSIGN_OR_RETURN(double m, MemcpySeconds(f->bytes));
    cpy.push_back(m);
  }
  f->ssd_hbm_gbps = Gbps(f->bytes, Median(hbm));
  f->ssd_raw_gbps = Gbps(f->bytes, Median(raw));
  f->dram_hbm_gbps = Gbps(f->bytes, Median(dram));
  f->memcpy_gbps = Gbps(f->bytes, Median(cpy));
  f->ssd_first_layer_ms = Median(ssd_first);
  f->dram_first_layer_ms = Median(dram_first);
  double scatter_s = 0, d2d_s = 0;
  uint64_t scatter_bytes = 0;
  FC_RETURN_IF_ERROR(MeasureScatter(&scatter_s, &d2d_s, &scatter_bytes));
  // Both move the bytes once each way: the ratio compares like with like.
  f->scatter_gbps = Gbps(scatter_bytes, scatter_s);
  f->d2d_gbps = Gbps(scatter_bytes, d2d_s);
  return Status::OK();
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

void Report(const GpuFigures& f, bool json) {
  if (json) {
    std::printf(
        "{\"bench\": \"gpu\", \"device\": \"%s\", \"fake_device\": %s, \"mode\": \"%s\", "
        "\"bytes\": %lu, \"ssd_to_hbm_vs_raw\": %.3f, \"dram_to_hbm_vs_memcpy\": %.3f, "
        "\"scatter_vs_d2d\": %.3f, \"mismatches\": %lu, \"ssd_to_hbm_gbps\": %.2f, "
        "\"ssd_raw_gbps\": %.2f, \"dram_to_hbm_gbps\": %.2f, \"memcpy_h2d_gbps\": %.2f, "
        "\"scatter_gbps\": %.2f, \"d2d_gbps\": %.2f, \"ssd_first_layer_ms\": %.3f, "
        "\"dram_first_layer_ms\": %.3f, \"window_bytes\": %lu, \"ssd_direct_io\": %s}\n",
        f.device.c_str(), f.fake ? "true" : "false", f.mode.c_str(),
        static_cast<unsigned long>(f.bytes), Ratio(f.ssd_hbm_gbps, f.ssd_raw_gbps),
        Ratio(f.dram_hbm_gbps, f.memcpy_gbps), Ratio(f.scatter_gbps, f.d2d_gbps),
        static_cast<unsigned long>(f.mismatches), f.ssd_hbm_gbps, f.ssd_raw_gbps, f.dram_hbm_gbps,
        f.memcpy_gbps, f.scatter_gbps, f.d2d_gbps, f.ssd_first_layer_ms, f.dram_first_layer_ms,
        static_cast<unsigned long>(f.window_bytes), f.direct_io ? "true" : "false");
    return;
  }
  if (f.fake) std::printf("FAKE DEVICE (host memory): these figures describe no GPU\n");
  std::printf("device %s, mode %s, %s per restore, window %s, SSD %s\n", f.device.c_str(),
              f.mode.c_str(), FormatBytes(f.bytes).c_str(), FormatBytes(f.window_bytes).c_str(),
              f.direct_io ? "O_DIRECT" : "buffered");
  std::printf("SSD  -> paged HBM  %8.2f GB/s  raw reads to pinned  %8.2f GB/s  ratio %.3f\n",
              f.ssd_hbm_gbps, f.ssd_raw_gbps, Ratio(f.ssd_hbm_gbps, f.ssd_raw_gbps));
  std::printf("DRAM -> paged HBM  %8.2f GB/s  cudaMemcpy H2D       %8.2f GB/s  ratio %.3f\n",
              f.dram_hbm_gbps, f.memcpy_gbps, Ratio(f.dram_hbm_gbps, f.memcpy_gbps));
  std::printf("scatter kernel     %8.2f GB/s  cudaMemcpy D2D       %8.2f GB/s  ratio %.3f\n",
              f.scatter_gbps, f.d2d_gbps, Ratio(f.scatter_gbps, f.d2d_gbps));
  std::printf("first layer: SSD %.3f ms, DRAM %.3f ms; mismatches %lu\n", f.ssd_first_layer_ms,
              f.dram_first_layer_ms, static_cast<unsigned long>(f.mismatches));
}

int RunGpuBench(const GpuBenchArgs& a) {
  if (a.reps == 0)
    return ReportArgError("bench gpu", Status::InvalidArgument("--reps must be >= 1"));
  auto mode = gpu::ParseGpuMode(a.fake ? "fake" : a.gpu_mode);
  if (int rc = ReportArgError("bench gpu", mode.status())) return rc;
  gpu::GpuOptions go;
  go.mode = *mode;
  auto opened = gpu::OpenGpu(go);
  if (!opened.ok()) return ReportStatus("bench gpu", opened.status());
  if (opened->device == nullptr) {
    std::fprintf(stderr,
                 "flatcake bench gpu: no GPU (%s); nothing measured. --fake runs the path on the "
                 "fake device (host memory), labelled as such.\n",
                 opened->probe.reason.c_str());
    return 1;
  }
  GpuBench bench(a, std::move(*opened));
  GpuFigures f;
  if (Status st = bench.Run(&f); !st.ok()) return ReportStatus("bench gpu", st);
  Report(f, a.json);
  return f.mismatches == 0 ? 0 : 1;
}

}  // namespace

void RegisterGpuBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<GpuBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "gpu",
      "The GPU data path: SSD and DRAM restores into a paged pool in device memory against raw "
      "reads and cudaMemcpy of the same bytes, the scatter kernel against a device-to-device "
      "copy; exits 1 without a GPU (or on a mismatch), 2 on bad flags");
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--bytes", a->bytes, "Bytes per restore (whole blocks)")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "Layers per block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--slice", a->slice, "Slice bytes")->transform(size)->capture_default_str();
  cmd->add_option("--slot-bytes", a->slot_bytes, "Bytes of each of the window's two slots")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (medians reported)")->capture_default_str();
  cmd->add_option("--dir", a->dir, "Where the SSD pool files go (default: $TMPDIR or /tmp)");
  cmd->add_option("--gpu-mode", a->gpu_mode,
                  "auto, gds, cufile-compat or bounce (auto reads FLATCAKE_GPU_MODE)")
      ->capture_default_str();
  cmd->add_flag("--fake", a->fake,
                "Run on the fake device (host memory); every figure is labelled fake");
  cmd->add_flag("--verify", a->verify, "Verify checksums where bytes pass through host memory");
  cmd->add_flag("--json", a->json, "Print one JSON line instead of the table");
  cmd->callback([a, exit_code] { *exit_code = RunGpuBench(*a); });
}

}  // namespace flatcake::cli
