// StoreOptions: every tunable of a FlatCake store, with the defaults a single node starts with.
// The option table (src/store/option_table.h) has one row per field: its CLI flag, kind, range
// and help. The CLI flags, the Python option names and checks, ValidateStoreOptions and the
// options tables in README.md and docs/ all come from that table; a field added here needs a row
// there (option_table_test fails otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flatcake/status.h"

namespace flatcake {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

enum class HugePageMode : uint8_t {
  kAuto,     // MAP_HUGETLB if enough reserved huge pages, else THP via madvise, else plain pages
  kHugeTlb,  // MAP_HUGETLB or fail
  kTransparent,  // madvise(MADV_HUGEPAGE)
  kNone,         // plain pages
};

enum class DirectIoMode : uint8_t {
  kAuto,  // O_DIRECT; buffered I/O (with a warning) where the filesystem refuses it (tmpfs)
  kOn,    // O_DIRECT or fail at open
  kOff,   // buffered I/O
};

enum class IoEngineKind : uint8_t {
  kAuto,    // io_uring, else the preadv thread pool (the fallback is reported in StoreInfo)
  kUring,   // io_uring or fail
  kPreadv,  // a thread pool issuing preadv/pwritev
  kPosix,   // pread/pwrite on the calling thread
};

enum class RestoreScheduler : uint8_t { kMas = 0, kFcfs = 1 };

// When a durable pool makes its writes durable against power loss (a process kill loses nothing
// published whatever the mode: commit records are written before a block is published).
enum class SyncMode : uint8_t {
  kNone,      // never: the operating system writes back in its own time
  kInterval,  // every sync_interval_ms: pool data, then the journal
  kEvery,     // each segment: its data, then its commit record
};

struct StoreOptions {
  uint32_t node_id = 0;  // this node's id in the GVA NodeID field (0..4095)

  // --- DRAM medium ---
  uint64_t dram_bytes = 1 * kGiB;  // arena capacity; 0 disables the DRAM medium
  // A file (in /dev/shm or hugetlbfs) backing the arena, so DRAM blocks outlive the process;
  // empty: anonymous memory, lost at exit.
  std::string dram_path;
  HugePageMode huge_pages = HugePageMode::kAuto;

  // --- SSD medium ---
  std::vector<std::string> ssd_dirs;     // one per drive; empty disables the SSD medium
  uint64_t ssd_bytes = 4 * kGiB;         // total over all directories
  uint64_t ssd_file_bytes = 256 * kMiB;  // size of each pre-allocated pool file (4 KiB multiple)
  DirectIoMode direct_io = DirectIoMode::kAuto;

  // --- placement (paper Table 2) ---
  uint64_t tau_tokens = 512;        // a prior reply shorter than this keeps a chat turn in DRAM
  uint64_t l_agent_tokens = 32768;  // a context at least this long goes to SSD
  uint32_t tokens_per_block = 256;  // tokens in one block (page); converts blocks to tokens

  // --- reclamation: fractions of each medium's capacity ---
  double high_watermark = 0.95;  // reclaim when usage reaches this
  double low_watermark = 0.85;   // ... down to this

  // --- metadata ---
  uint64_t index_capacity = 0;  // Level-1 index slots; 0 = sized from capacities (see Open)
  uint32_t max_scopes = 1 << 16;

  // --- I/O ---
  IoEngineKind io_engine = IoEngineKind::kAuto;
  uint32_t io_workers = 2;  // reader threads (one io_uring ring each)
  uint32_t io_queue_depth = 64;
  uint64_t read_window_bytes = 128 * kMiB;   // bounded staging for SSD restores
  uint64_t read_inflight_bytes = 32 * kMiB;  // SSD restore reads in flight at most; 0: the window
  uint64_t write_staging_bytes = 32 * kMiB;  // gather buffer for SSD segment writes
  uint64_t max_gap_bytes = 64 * kKiB;        // Δgap: bridge holes up to this size when coalescing
  uint64_t max_io_bytes = 4 * kMiB;          // split merged reads at this size
  // clang-format off
  RestoreScheduler scheduler = RestoreScheduler::kMas;  // restore scheduling: FC-MAS, or one FCFS queue (for comparison)
  // clang-format on

  bool verify_checksums = true;  // verify every block's XXH3 checksum on read
  // --- durability of the SSD pool (docs/format.md) ---
  bool recover = true;  // rebuild the store from the pool's journal at open; false: start empty
  bool wipe = false;    // discard a pool that cannot be recovered (other format or geometry)
  SyncMode sync = SyncMode::kInterval;
  uint64_t sync_interval_ms = 1000;
  // Files the store creates (pool files, journal, lock files, a DRAM arena file) are the owner's
  // only (0600); true: pool files are also the group's (0660), for a node daemon whose clients
  // of other users (in its group) open them. Looser modes of an existing pool are tightened.
  bool group_access = false;
};

// Checks every field against its row of the option table (range, multiple, enum value), then
// the relations between fields (low <= high watermark, one pool file fits the SSD budget, ...).
Status ValidateStoreOptions(const StoreOptions& options);

// The names of the enum options' values, as the CLI, Python and the docs spell them; Parse*
// returns InvalidArgument naming the valid ones.
std::string_view HugePageModeName(HugePageMode mode);
Result<HugePageMode> ParseHugePageMode(std::string_view text);
std::string_view DirectIoModeName(DirectIoMode mode);
Result<DirectIoMode> ParseDirectIoMode(std::string_view text);
std::string_view IoEngineKindName(IoEngineKind kind);
Result<IoEngineKind> ParseIoEngineKind(std::string_view text);
std::string_view RestoreSchedulerName(RestoreScheduler scheduler);
Result<RestoreScheduler> ParseRestoreScheduler(std::string_view text);
std::string_view SyncModeName(SyncMode mode);
Result<SyncMode> ParseSyncMode(std::string_view text);

}  // namespace flatcake
