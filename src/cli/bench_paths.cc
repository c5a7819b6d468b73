// `flatcake bench paths`: every data path of the store beside its medium's own limit, measured in
// the same run on the same bytes and memory.
//
// For each slice size (the block is --layers x --planes slices, the layers capped so a block stays
// within --max-block-bytes) and each caller buffer kind, --bytes of blocks go through the store in
// batches of --batch-bytes, and the same bytes through the medium without the store:
//  - dram_put: Store::Put into the DRAM arena, against memcpy of the same bytes from the caller's
//    memory into a pre-faulted buffer backed like the arena;
//  - dram_get: Store::Get of DRAM hits into the caller's pre-faulted destination, against memcpy of
//    the same bytes into that same destination;
//  - ssd_put: Store::Put onto the SSD pool, against raw O_DIRECT sequential writes of the same
//    bytes from the caller's memory into a file beside the pool, with the store's write size and
//    writes in flight (StoreInfo::ssd_write_io_bytes, ssd_writes_in_flight);
//  - ssd_get: Store::Get of SSD hits into the destination, against raw O_DIRECT sequential reads of
//    that file into the same destination, max_io_bytes each with the read window in flight.
// Every get is compared byte for byte with what was put. The caller's memory is one allocation per
// side (source, destination) that the buffer kinds only point into differently: block_contiguous
// (one pointer per block), plane_pointers (a pool per plane, page_first_direct-like) and
// slice_pointers (a pool per layer and plane, layer_first-like); both are pre-faulted, since first
// touch is the machine's cost, not the path's (docs/performance.md). Repetitions alternate which of
// the store and the limit goes first; a row reports medians, its ratio the median of the
// repetitions' ratios.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/store.h"
#include "io/io_engine.h"
#include "store/segment_layout.h"
#include "util/align.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

enum Path : int { kDramPut, kDramGet, kSsdPut, kSsdGet, kPaths };
constexpr const char* kPathNames[kPaths] = {"dram_put", "dram_get", "ssd_put", "ssd_get"};
constexpr const char* kLimitNames[kPaths] = {"memcpy", "memcpy", "o_direct_write", "o_direct_read"};

struct PathsArgs {
  uint64_t bytes = 256 * kMiB;
  std::vector<uint64_t> slices = {4 * kKiB, 8 * kKiB, 16 * kKiB, 64 * kKiB, 256 * kKiB};
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t max_block = 8 * kMiB;
  uint64_t batch_bytes = 32 * kMiB;
  std::vector<std::string> kinds = {"block_contiguous", "plane_pointers", "slice_pointers"};
  std::vector<std::string> paths = {"dram_put", "dram_get", "ssd_put", "ssd_get"};
  uint32_t reps = 3;
  std::string dir;
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;
  uint32_t queue_depth = 64;
  bool no_verify = false;
  std::string dest_pages = "thp";
  bool json = false;
};

Status CheckSizes(const PathsArgs& a) {
  if (a.bytes == 0 || a.bytes > 256 * kGiB) {
    return Status::InvalidArgument("--bytes must be in [1, 256 GiB], got " +
                                   std::to_string(a.bytes));
  }
  for (uint64_t s : a.slices) {
    if (s == 0 || s > kGiB) {
      return Status::InvalidArgument("--slices: each must be in [1, 1 GiB], got " +
                                     std::to_string(s));
    }
  }
  if (a.max_block == 0 || a.batch_bytes == 0) {
    return Status::InvalidArgument("--max-block-bytes and --batch-bytes must be positive");
  }
  return Status::OK();
}

// The block shape of a row: --layers, fewer when a block would exceed --max-block-bytes.
KvLayout RowLayout(const PathsArgs& a, uint64_t slice) {
  const uint64_t fit = a.max_block / (uint64_t{a.planes} * slice);
  return KvLayout{static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, a.layers)), a.planes, slice};
}

// The caller's pointer table of kind `kind` over `n` blocks in the allocation at `base`.
std::vector<void*> KindPointers(BufferKind kind, const KvLayout& l, uint64_t n, uint8_t* base) {
  const uint64_t s = l.slice_bytes;
  std::vector<void*> p;
  p.reserve(n * PointersPerBlock(kind, l));
  for (uint64_t b = 0; b < n; ++b) {
    if (kind == BufferKind::kBlockContiguous) {
      p.push_back(base + b * l.block_bytes());
    } else if (kind == BufferKind::kPlanePointers) {
      for (uint32_t q = 0; q < l.num_planes; ++q) {
        p.push_back(base + (q * n + b) * l.num_layers * s);
      }
    } else {
      for (uint32_t y = 0; y < l.num_layers; ++y) {
        for (uint32_t q = 0; q < l.num_planes; ++q) {
          p.push_back(base + ((uint64_t{y} * l.num_planes + q) * n + b) * s);
        }
      }
    }
  }
  return p;
}

using Clock = std::chrono::steady_clock;

struct Row {
  int path = 0;
  KvLayout layout;
  BufferKind kind = BufferKind::kBlockContiguous;
  std::vector<double> store_gbps, limit_gbps, ratio;
};

class PathsBench {
 public:
  explicit PathsBench(const PathsArgs& a) : a_(a), huge_(a.dest_pages == "thp") {}
  ~PathsBench() {
    raw_engine_.reset();
    if (raw_fd_ >= 0) close(raw_fd_);
    if (!raw_path_.empty()) unlink(raw_path_.c_str());
  }
  int Main();

 private:
  // One slice size: opens a store for its layout and runs every wanted kind.
  Status RunSlice(uint64_t slice, std::vector<Row>* rows);
  // One repetition of every wanted path for one layout and kind; appends to rows[path].
  Status RunRep(uint32_t rep, Store& store, const KvLayout& l, BufferKind kind, uint64_t n,
                Row* rows);
  // Times store.Put or store.Get over all batches (seconds).
  Result<double> StorePass(Store& store, const KvLayout& l, BufferKind kind, uint64_t n, bool put,
                           MediaType medium);
  // Raw sequential I/O of the first `bytes` of the raw file from or into `buf`, `io` bytes per op
  // with at most `budget` in flight (seconds).
  Result<double> RawPass(bool write, uint8_t* buf, uint64_t bytes, uint64_t io, uint64_t budget);
  Status OpenRawFile(uint64_t bytes);

  const PathsArgs a_;
  const bool huge_;
  bool want_path_[kPaths] = {};
  std::vector<BufferKind> kinds_;
  std::unique_ptr<TempDir> tmp_;
  std::string dir_;
  AlignedBuffer src_, dst_, arena_like_;
  std::vector<Key> keys_[2];  // per medium: the keys a row puts there
  std::vector<void*> src_ptrs_, dst_ptrs_;
  uint64_t batch_ = 1;
  StoreInfo info_;
  StoreOptions opened_;
  int raw_fd_ = -1;
  std::string raw_path_;
  bool raw_direct_ = false;
  bool raw_registered_ = false;
  uint64_t raw_bytes_ = 0;  // allocated
  std::unique_ptr<IoEngine> raw_engine_;
  uint64_t verified_ = 0, mismatches_ = 0, misses_ = 0;
};

Status PathsBench::OpenRawFile(uint64_t bytes) {
  if (raw_fd_ < 0) {
    raw_path_ = dir_ + "/paths-raw.dat";
    raw_fd_ = open(raw_path_.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0644);
    raw_direct_ = raw_fd_ >= 0;
    if (raw_fd_ < 0 && errno == EINVAL) {
      raw_fd_ = open(raw_path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    }
    if (raw_fd_ < 0) return Status::FromErrno(errno, "create " + raw_path_);
    IoEngineOptions eo;
    eo.kind = a_.io_engine;
    eo.workers = a_.io_workers;
    eo.queue_depth = a_.queue_depth;
    FC_ASSIGN_OR_RETURN(raw_engine_, MakeIoEngine(eo));
    FC_RETURN_IF_ERROR(raw_engine_->RegisterFiles(std::span<const int>(&raw_fd_, 1)));
    // The caller's memory as registered buffers where the engine has them (io_uring), as the
    // store registers its staging: the raw I/O then pins no pages per write either.
    const IoBufferRegion regions[2] = {{src_.data(), src_.size()}, {dst_.data(), dst_.size()}};
    raw_registered_ = raw_engine_->RegisterBuffers(regions).ok();
  }
  // Pre-allocated like a pool file, and kept across repetitions as the pool's files are: both
  // write into allocated, unwritten extents the first time and overwrite written ones afterwards.
  if (bytes > raw_bytes_) {
    if (fallocate(raw_fd_, 0, 0, static_cast<off_t>(bytes)) != 0) {
      return Status::FromErrno(errno, "fallocate " + raw_path_);
    }
    raw_bytes_ = bytes;
  }
  return Status::OK();
}

Result<double> PathsBench::RawPass(bool write, uint8_t* buf, uint64_t bytes, uint64_t io,
                                   uint64_t budget) {
  std::vector<IoOp> ops;
  for (uint64_t pos = 0; pos < bytes; pos += io) {
    IoOp op;
    op.opcode = write ? IoOpcode::kWrite : IoOpcode::kRead;
    op.offset = pos;
    op.buf = buf + pos;
    op.len = std::min(io, bytes - pos);
    ops.push_back(op);
  }
  const Clock::time_point t0 = Clock::now();
  FC_RETURN_IF_ERROR(ExecuteSyncBounded(*raw_engine_, ops, budget));
  return SecondsSince(t0);
}

Result<double> PathsBench::StorePass(Store& store, const KvLayout& l, BufferKind kind, uint64_t n,
                                     bool put, MediaType medium) {
  const uint64_t ppb = PointersPerBlock(kind, l);
  const std::vector<void*>& ptrs = put ? src_ptrs_ : dst_ptrs_;
  double s = 0;
  for (uint64_t b0 = 0; b0 < n; b0 += batch_) {
    const uint64_t m = std::min(batch_, n - b0);
    const std::span<const Key> keys(keys_[static_cast<int>(medium)].data() + b0, m);
    const BlockBuffers bufs{kind, std::span<void* const>(ptrs.data() + b0 * ppb, m * ppb)};
    if (put) {
      WriteHints h;
      h.session = medium == MediaType::kDram ? "dram" : "ssd";
      h.force_medium = medium;
      const Clock::time_point t0 = Clock::now();
      FC_ASSIGN_OR_RETURN(PutResult r, store.Put(keys, l, bufs, h));
      s += SecondsSince(t0);
      if (r.written != m || r.medium != medium) {
        return Status::Aborted("bench paths: a batch was not written whole to its medium");
      }
    } else {
      const Clock::time_point t0 = Clock::now();
      FC_ASSIGN_OR_RETURN(GetResult r, store.Get(keys, l, bufs));
      s += SecondsSince(t0);
      misses_ += m - r.hits;
    }
  }
  return s;
}

Status PathsBench::RunRep(uint32_t rep, Store& store, const KvLayout& l, BufferKind kind,
                          uint64_t n, Row* rows) {
  const uint64_t volume = n * l.block_bytes();
  store.Clear();
  for (int mi = 0; mi < 2; ++mi) {
    const MediaType medium = mi == 0 ? MediaType::kDram : MediaType::kSsd;
    const int put = mi == 0 ? kDramPut : kSsdPut;
    const int get = put + 1;
    if (!want_path_[put] && !want_path_[get]) continue;
    // Each pass: the store's and the limit's, in an order that alternates between repetitions.
    auto measure = [&](int path, const std::function<Result<double>()>& by_store,
                       const std::function<Result<double>()>& by_limit) -> Status {
      double t[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const int which = (rep % 2) ^ k;  // 0: store, 1: limit
        if (path == kDramGet || path == kSsdGet) std::memset(dst_.data(), 0, volume);
        FC_ASSIGN_OR_RETURN(t[which], which == 0 ? by_store() : by_limit());
        if (which == 0 && (path == kDramGet || path == kSsdGet)) {
          mismatches_ += std::memcmp(dst_.data(), src_.data(), volume) != 0;
          verified_ += volume;
        }
      }
      if (!want_path_[path]) return Status::OK();
      Row& r = rows[path];
      r.store_gbps.push_back(volume / t[0] / 1e9);
      r.limit_gbps.push_back(volume / t[1] / 1e9);
      r.ratio.push_back(t[1] / t[0]);
      return Status::OK();
    };
    // The limits: memcpy between the caller's memory and the arena-like buffer, or raw I/O
    // between it and the raw file.
    auto limit = [&](bool put_side) -> Result<double> {
      if (medium == MediaType::kSsd) {
        return put_side ? RawPass(true, src_.data(), volume, info_.ssd_write_io_bytes,
                                  info_.ssd_write_io_bytes * info_.ssd_writes_in_flight)
                        : RawPass(false, dst_.data(), volume, opened_.max_io_bytes,
                                  opened_.read_window_bytes);
      }
      const Clock::time_point t0 = Clock::now();
      if (put_side) {
        std::memcpy(arena_like_.data(), src_.data(), volume);
      } else {
        std::memcpy(dst_.data(), arena_like_.data(), volume);
      }
      return SecondsSince(t0);
    };
    if (medium == MediaType::kSsd) FC_RETURN_IF_ERROR(OpenRawFile(volume));
    FC_RETURN_IF_ERROR(measure(
        put, [&] { return StorePass(store, l, kind, n, true, medium); },
        [&] { return limit(true); }));
    if (!want_path_[get]) continue;
    FC_RETURN_IF_ERROR(measure(
        get, [&] { return StorePass(store, l, kind, n, false, medium); },
        [&] { return limit(false); }));
  }
  return Status::OK();
}

Status PathsBench::RunSlice(uint64_t slice, std::vector<Row>* rows) {
  const KvLayout l = RowLayout(a_, slice);
  FC_RETURN_IF_ERROR(ValidateKvLayout(l));
  const uint64_t block = l.block_bytes();
  const uint64_t n = std::max<uint64_t>(1, a_.bytes / block);
  batch_ = std::clamp<uint64_t>(a_.batch_bytes / block, 1, n);
  const uint64_t batches = (n + batch_ - 1) / batch_;
  const uint64_t seg = SegmentLayout(l, batch_).Bytes();  // one batch's segment, padding included
  const bool dram = want_path_[kDramPut] || want_path_[kDramGet];
  const bool ssd = want_path_[kSsdPut] || want_path_[kSsdGet];
  StoreOptions o;
  o.dram_bytes = dram ? batches * seg + 64 * kMiB : 0;
  if (ssd) {
    o.ssd_dirs = {dir_};
    o.ssd_file_bytes = std::max<uint64_t>(256 * kMiB, seg);
    const uint64_t per_file = o.ssd_file_bytes / seg;
    o.ssd_bytes = ((batches + per_file - 1) / per_file + 1) * o.ssd_file_bytes;
  }
  o.io_engine = a_.io_engine;
  o.io_workers = a_.io_workers;
  o.io_queue_depth = a_.queue_depth;
  o.verify_checksums = !a_.no_verify;
  o.high_watermark = 1.0;  // this bench measures paths, not reclamation
  o.low_watermark = 1.0;
  FC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(o));
  info_ = store->GetInfo();
  opened_ = store->options();
  for (int m = 0; m < 2; ++m) keys_[m] = MakeKeys(2 * slice + m, 0, n);
  // Deterministic, distinct bytes: a misplaced slice cannot compare equal.
  for (uint64_t i = 0; i + 8 <= n * block; i += 8) {
    const uint64_t x = (i + slice) * 0x9E3779B97F4A7C15ull;
    std::memcpy(src_.data() + i, &x, 8);
  }
  for (BufferKind kind : kinds_) {
    src_ptrs_ = KindPointers(kind, l, n, src_.data());
    dst_ptrs_ = KindPointers(kind, l, n, dst_.data());
    Row per_path[kPaths];
    for (uint32_t rep = 0; rep < a_.reps; ++rep) {
      FC_RETURN_IF_ERROR(RunRep(rep, *store, l, kind, n, per_path));
    }
    for (int p = 0; p < kPaths; ++p) {
      if (!want_path_[p]) continue;
      per_path[p].path = p;
      per_path[p].layout = l;
      per_path[p].kind = kind;
      rows->push_back(std::move(per_path[p]));
    }
  }
  return Status::OK();
}

std::string SizeText(uint64_t b) {
  char buf[32];
  if (b >= kMiB && b % kMiB == 0) {
    std::snprintf(buf, sizeof buf, "%lu MiB", static_cast<unsigned long>(b / kMiB));
  } else if (b >= kKiB && b % kKiB == 0) {
    std::snprintf(buf, sizeof buf, "%lu KiB", static_cast<unsigned long>(b / kKiB));
  } else {
    std::snprintf(buf, sizeof buf, "%lu B", static_cast<unsigned long>(b));
  }
  return buf;
}

int PathsBench::Main() {
  for (const std::string& p : a_.paths) {
    want_path_[std::find(std::begin(kPathNames), std::end(kPathNames), p) - kPathNames] = true;
  }
  for (const std::string& k : a_.kinds) kinds_.push_back(*ParseBufferKind(k));
  // The largest row: its source, destination and memcpy buffer, and the arena (DRAM paths).
  uint64_t most = 0;
  for (uint64_t s : a_.slices) {
    const uint64_t block = RowLayout(a_, s).block_bytes();
    most = std::max(most, std::max<uint64_t>(1, a_.bytes / block) * block);
  }
  const bool dram = want_path_[kDramPut] || want_path_[kDramGet];
  if (Status st = CheckHostMemory(most * (dram ? 4 : 3), "bench paths (--bytes)",
                                  "the caller's source and destination, the memcpy buffer and "
                                  "the store's DRAM arena");
      !st.ok()) {
    return ReportArgError("bench paths", st);
  }
  dir_ = a_.dir;
  if (dir_.empty()) {
    tmp_ = std::make_unique<TempDir>("flatcake-paths");
    dir_ = tmp_->path();
  }
  Result<AlignedBuffer> src = AllocateHostMemory(most, huge_);
  Result<AlignedBuffer> dst = AllocateHostMemory(most, huge_);
  // Backed like the DRAM arena (transparent huge pages, faulted in).
  Result<AlignedBuffer> arena_like = AllocateHostMemory(dram ? most : 1, true);
  if (!src.ok() || !dst.ok() || !arena_like.ok()) {
    return ReportStatus("bench paths", Status::NoSpace("host memory"));
  }
  src_ = std::move(src).value();
  dst_ = std::move(dst).value();
  arena_like_ = std::move(arena_like).value();
  std::vector<Row> rows;
  for (uint64_t s : a_.slices) {
    if (Status st = RunSlice(s, &rows); !st.ok()) {
      return st.IsInvalidArgument() ? ReportArgError("bench paths", st)
                                    : ReportStatus("bench paths", st);
    }
  }

  std::printf(
      "bench paths: %s per row, %u repetitions (medians), engine %s, checksums %s, "
      "caller memory %s\n",
      SizeText(a_.bytes).c_str(), a_.reps, info_.io_engine.c_str(),
      a_.no_verify ? "not verified" : "verified", a_.dest_pages.c_str());
  if (raw_fd_ >= 0) {
    std::printf("SSD: pool %s, raw file %s%s; store writes of %s, %u in flight\n",
                info_.ssd_direct_io ? "O_DIRECT" : "buffered",
                raw_direct_ ? "O_DIRECT" : "buffered",
                raw_registered_ ? " from registered buffers" : "",
                SizeText(info_.ssd_write_io_bytes).c_str(), info_.ssd_writes_in_flight);
  }
  std::printf("%-9s %8s %-17s %8s %7s %11s %11s %7s  %s\n", "path", "slice", "buffer kind", "block",
              "layers", "store GB/s", "limit GB/s", "ratio", "limit");
  nlohmann::json jrows = nlohmann::json::array();
  for (const Row& r : rows) {
    const double store_gbps = Median(r.store_gbps), limit_gbps = Median(r.limit_gbps),
                 ratio = Median(r.ratio);
    std::printf("%-9s %8s %-17s %8s %7u %11.2f %11.2f %7.3f  %s\n", kPathNames[r.path],
                SizeText(r.layout.slice_bytes).c_str(), std::string(BufferKindName(r.kind)).c_str(),
                SizeText(r.layout.block_bytes()).c_str(), r.layout.num_layers, store_gbps,
                limit_gbps, ratio, kLimitNames[r.path]);
    jrows.push_back({{"path", kPathNames[r.path]},
                     {"slice_bytes", r.layout.slice_bytes},
                     {"buffer_kind", BufferKindName(r.kind)},
                     {"store_gbps", store_gbps},
                     {"limit_gbps", limit_gbps},
                     {"ratio", ratio},
                     {"limit", kLimitNames[r.path]},
                     {"block_bytes", r.layout.block_bytes()},
                     {"layers", r.layout.num_layers},
                     {"planes", r.layout.num_planes}});
  }
  std::printf("bytes verified %lu, mismatches %lu, misses %lu\n",
              static_cast<unsigned long>(verified_), static_cast<unsigned long>(mismatches_),
              static_cast<unsigned long>(misses_));
  if (a_.json) {
    const nlohmann::json j = {{"bench", "paths"},
                              {"bytes", a_.bytes},
                              {"reps", a_.reps},
                              {"io_engine", info_.io_engine},
                              {"verify_checksums", !a_.no_verify},
                              {"ssd_write_io_bytes", info_.ssd_write_io_bytes},
                              {"ssd_writes_in_flight", info_.ssd_writes_in_flight},
                              {"bytes_verified", verified_},
                              {"mismatches", mismatches_},
                              {"misses", misses_},
                              {"rows", jrows}};
    std::printf("%s\n", j.dump().c_str());
  }
  return mismatches_ == 0 && misses_ == 0 ? 0 : 1;
}

}  // namespace

void RegisterPathsBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<PathsArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "paths",
      "Each data path (DRAM put/get, SSD put/get) per slice size and buffer kind: the store's "
      "GB/s beside the medium's limit on the same bytes (memcpy; raw O_DIRECT I/O); exits 1 on "
      "any mismatch or miss, 2 on bad flags");
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--bytes", a->bytes, "Bytes per row (rounded down to whole blocks, at least one)")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--slices", a->slices, "Slice sizes, comma-separated (one row group each)")
      ->delimiter(',')
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--layers", a->layers,
                  "Layers per block (fewer where a block would exceed "
                  "--max-block-bytes)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--max-block-bytes", a->max_block, "Largest block: caps the layers")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--batch-bytes", a->batch_bytes,
                  "Bytes of blocks per put and get call (at least one block)")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--kinds", a->kinds, "Caller buffer kinds, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"block_contiguous", "plane_pointers", "slice_pointers"}))
      ->capture_default_str();
  cmd->add_option("--paths", a->paths, "Paths, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"dram_put", "dram_get", "ssd_put", "ssd_get"}))
      ->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (medians reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--dir", a->dir,
                  "SSD directory (default: a temporary directory, removed "
                  "afterwards)");
  AddBenchIoFlags(cmd, &a->io_engine, &a->io_workers, &a->queue_depth);
  cmd->add_flag("--no-verify", a->no_verify,
                "Turn the store's checksums off (the bench still compares every byte)");
  AddDestPagesFlag(cmd, &a->dest_pages, "the caller's memory");
  cmd->add_flag("--json", a->json,
                "Print one JSON object on the last line (its rows: one per "
                "path, slice size and buffer kind)");
  cmd->callback([a, exit_code] {
    if (Status st = CheckSizes(*a); !st.ok()) {
      *exit_code = ReportArgError("bench paths", st);
      return;
    }
    *exit_code = PathsBench(*a).Main();
  });
}

}  // namespace flatcake::cli
