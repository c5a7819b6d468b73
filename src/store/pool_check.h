// CheckPool: the offline check of a durable SSD pool that `flatcake fsck` runs, and its repair.
//
// It reads what a store reads at open (the superblocks, then the journal) and replays the
// journal by the rules of recovery (FlatStore::Recover; docs/format.md states them), so that what
// it calls live is what a restart would serve; it opens no store. Damage is anything recovery
// would refuse or skip (a damaged superblock, a torn or undecodable record, an extent outside the
// data area or claimed twice, ...) and, with `deep`, every live block whose bytes no longer match
// the checksum in its commit record.
//
// Repair only drops: it rewrites the journal (atomically, Journal::Rewrite) with a header built
// from the superblocks and the intact records it keeps, without the damaged ones and, with
// `deep`, without the commit records of segments holding bad blocks. A repaired pool therefore
// serves a subset of what it served before, never anything it did not. Damage outside the
// journal (superblocks, missing files, a journal of another pool) is not repairable: only wipe,
// which discards the pool, opens such a pool again.
//
// Every directory is locked (SsdFilePool::LockDirectory) for the whole check, so a pool a store
// holds is refused and no store opens the pool meanwhile.
//
// Thread safety: a function of its arguments and the files; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/status.h"

namespace flatcake {

struct PoolCheckOptions {
  std::vector<std::string> dirs;  // the pool's ssd_dirs, in their order
  bool deep = false;              // read every live block and verify its checksum
  bool repair = false;            // rewrite the journal without the damaged records
};

struct PoolDamage {
  // What is damaged: "file" (missing or misplaced), "superblock", "journal", "record", "extent",
  // "overlap", "layout" or "block".
  std::string what;
  std::string file;     // the pool file or journal that holds it
  uint64_t offset = 0;  // byte offset in that file
  std::string detail;
  std::optional<Key> key;   // "block": the block's key
  bool repairable = false;  // repair drops it
};

struct PoolCheckReport {
  // From the superblocks (0 when none is intact).
  uint64_t store_id = 0;
  uint32_t files = 0;  // pool files the superblocks describe
  uint32_t intact_superblocks = 0;
  uint64_t file_bytes = 0;  // data bytes per file
  std::vector<std::string> dirs;

  std::string journal_path;
  uint64_t journal_bytes = 0;
  uint64_t records = 0;          // intact records
  uint64_t skipped_records = 0;  // what recovery would skip (its `skipped_records`)

  // What a restart would serve.
  uint64_t live_scopes = 0;
  uint64_t live_segments = 0;
  uint64_t live_blocks = 0;     // blocks of the live segments
  uint64_t live_bytes = 0;      // their payload bytes
  uint64_t extent_bytes = 0;    // the live segments' extents, run padding included
  uint64_t duplicate_keys = 0;  // keys in two live segments (a restart serves one copy)
  uint64_t overlaps = 0;        // extents two live segment records claim

  bool deep = false;
  uint64_t blocks_checked = 0;
  uint64_t bad_blocks = 0;

  std::vector<PoolDamage> damaged;
  std::vector<std::string> notes;  // observations that are not damage (a stray file, ...)

  bool repaired = false;             // the journal was rewritten
  std::vector<std::string> dropped;  // what the rewrite left out, one line each
  std::string not_repaired;          // why repair left the pool as it was, when it did

  bool clean() const { return damaged.empty(); }
};

// Checks (and with options.repair, repairs) the pool in options.dirs. Damage is reported in the
// result, not as an error. Errors: InvalidArgument (no directory given, a path that is not a
// directory, a directory holding no pool file), Busy (a store or another fsck holds a directory),
// or the I/O error that stopped the check or the rewrite.
Result<PoolCheckReport> CheckPool(const PoolCheckOptions& options);

}  // namespace flatcake
