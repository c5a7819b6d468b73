// Faults in the durable pool's metadata I/O, for tests: journal record writes, journal syncs and
// rewrites, superblock writes. These go to their files with pwrite/fdatasync beside the I/O
// engine (media/journal.cc, media/ssd_file_pool.cc), so the engine's fault injector cannot reach
// them; each consults this hook first and fails with the errno it returns.
//
// Thread safety: SetMetadataFaultHook and MetadataFault from any thread; the hook runs on the
// thread doing the I/O and must be thread-safe itself.
#pragma once

#include <cstdint>
#include <functional>

namespace flatcake {

enum class MetadataOp : uint8_t {
  kJournalWrite,     // a record appended, or a rewrite's new file written
  kJournalSync,      // the journal's fdatasync (Sync, and a rewrite's before its rename)
  kSuperblockWrite,  // a pool file's superblock written (and synced) at creation
};

// Process-wide; an empty hook (the default) injects nothing. Returns an errno to fail the op
// with, 0 to let it run.
using MetadataFaultHook = std::function<int(MetadataOp op)>;
void SetMetadataFaultHook(MetadataFaultHook hook);

// The hook's answer for `op` (0 without a hook).
int MetadataFault(MetadataOp op);

}  // namespace flatcake
