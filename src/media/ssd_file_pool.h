// SsdFilePool: the SSD medium. A fixed set of pre-allocated (fallocate) files spread round-robin
// over one or more directories (one per drive), opened O_DIRECT. The pool's address space is the
// concatenation of its files: pool offset = file index * file_bytes + offset in file (the GVA
// offset on SSD). Space is handed out as 4 KiB-aligned extents (a scope's segments) that never
// span two files, so many small sessions share a file and a large one spreads over several.
//
// Each directory is locked (flock on <dir>/flatcake.lock) so two stores never share pool files.
// A durable pool (Options::durable) starts each file with a 4 KiB superblock
// (media/durable_format.h) and keeps the files at close; at open it reads the superblocks and
// reports whether they describe this very geometry (recovered()): a pool of another format or
// geometry is refused, naming what differs, unless `wipe` asks for a fresh pool. A scratch pool
// (the tiered baseline) has no superblocks and deletes its files at close.
//
// Thread safety: Allocate/Free/used/largest_free are internally synchronised; the rest is
// immutable after Create.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/options.h"
#include "flatcake/status.h"
#include "media/extent_allocator.h"

namespace flatcake {

// Where an SSD pool's bytes lie, for a process that opens the pool files itself (the node
// daemon's clients) as well as for the pool: pool offset `o` is byte FileOffset(o) of file
// FileOf(o). A plain value; the pool's is fixed once it is created.
struct SsdPoolGeometry {
  std::vector<std::string> paths;  // file i of the pool at index i
  uint64_t file_bytes = 0;         // pool bytes per file
  uint64_t data_offset = 0;        // where a file's pool bytes start (past a superblock)
  bool direct = false;             // the files are read and written with O_DIRECT

  uint32_t num_files() const { return static_cast<uint32_t>(paths.size()); }
  uint64_t capacity() const { return file_bytes * paths.size(); }
  uint32_t FileOf(uint64_t offset) const { return static_cast<uint32_t>(offset / file_bytes); }
  uint64_t FileOffset(uint64_t offset) const { return data_offset + offset % file_bytes; }
};

// The pool files opened by a process other than the pool's owner (SsdFilePool::OpenFiles), in
// pool order, for an IoEngine's RegisterFiles. Closes them when destroyed. Movable.
class SsdPoolFiles {
 public:
  SsdPoolFiles() = default;
  SsdPoolFiles(SsdPoolFiles&& other) noexcept : fds_(std::move(other.fds_)) { other.fds_.clear(); }
  SsdPoolFiles& operator=(SsdPoolFiles&& other) noexcept;
  SsdPoolFiles(const SsdPoolFiles&) = delete;
  SsdPoolFiles& operator=(const SsdPoolFiles&) = delete;
  ~SsdPoolFiles();

  const std::vector<int>& fds() const { return fds_; }

 private:
  friend class SsdFilePool;
  std::vector<int> fds_;
};

class SsdFilePool {
 public:
  static constexpr uint64_t kAlignment = 4096;

  struct Options {
    std::vector<std::string> dirs;
    uint64_t total_bytes = 0;
    uint64_t file_bytes = 0;
    DirectIoMode direct_io = DirectIoMode::kAuto;
    bool durable = false;
    // Durable pools only: start fresh even when the files hold a pool (of any format).
    bool wipe = false;
    // The pool files' mode (util/file_mode.h): 0600, or 0660 when processes of other users in
    // the group open them (the node daemon's clients). Existing files are tightened to it.
    mode_t file_mode = 0600;
    // Durable pools: the caller knows nothing was ever published in this pool (its journal is
    // absent or empty). Files without a valid superblock are then a creation cut short (a power
    // cut while the pool was made), created anew with a note, instead of refused.
    bool nothing_published = false;
    // How pool files are opened; ::open when empty. Tests substitute one that refuses O_DIRECT
    // the way tmpfs-like filesystems do.
    std::function<int(const char* path, int flags, mode_t mode)> open_file;
  };

  // Validates every directory (exists, writable, enough free space) before creating anything,
  // then creates/opens the files and pre-allocates them.
  static Result<std::unique_ptr<SsdFilePool>> Create(const Options& options);

  // Where file `index` of a pool over `dirs` lives: <dirs[index % dirs.size()]>/FileName(index).
  static std::string FilePath(const std::vector<std::string>& dirs, uint32_t index);
  // "flatcake-pool-<index>.dat"; ParseFileName is its inverse (nullopt for any other name).
  static std::string FileName(uint32_t index);
  static std::optional<uint32_t> ParseFileName(std::string_view name);
  // Takes the exclusive flock on <dir>/flatcake.lock (creating it), without waiting: the open
  // lock file's descriptor (closing it releases the lock), or Busy when a store (or fsck) holds
  // the directory.
  static Result<int> LockDirectory(const std::string& dir);
  // Opens the existing files of the pool `geometry` describes, read-write, with O_DIRECT when the
  // pool uses it (geometry.direct), without creating, sizing or locking anything: the owner's
  // pool keeps doing that. NotFound for a missing file.
  static Result<SsdPoolFiles> OpenFiles(const SsdPoolGeometry& geometry);
  ~SsdFilePool();
  SsdFilePool(const SsdFilePool&) = delete;
  SsdFilePool& operator=(const SsdFilePool&) = delete;

  uint32_t num_files() const { return static_cast<uint32_t>(fds_.size()); }
  uint64_t file_bytes() const { return geometry_.file_bytes; }
  uint64_t capacity() const { return geometry_.capacity(); }
  // Where pool offset `offset` lives: file index and byte offset in that file (past the
  // superblock of a durable pool).
  uint32_t FileOf(uint64_t offset) const { return geometry_.FileOf(offset); }
  uint64_t FileOffset(uint64_t offset) const { return geometry_.FileOffset(offset); }
  // The files, sizes and offsets, for processes that open the files themselves (OpenFiles).
  const SsdPoolGeometry& geometry() const { return geometry_; }
  bool durable() const { return durable_; }
  // Durable pools: whether the files held this pool (same format, store id and geometry), so the
  // journal is to be replayed; false for a new (or wiped) pool.
  bool recovered() const { return recovered_; }
  uint64_t store_id() const { return store_id_; }
  // Durable pools: flushes every pool file's data to stable storage (fdatasync).
  Status SyncData() const;
  const std::vector<int>& fds() const { return fds_; }
  const std::vector<std::string>& paths() const { return geometry_.paths; }
  bool direct() const { return geometry_.direct; }
  // Why buffered I/O is in use, when it is.
  const std::string& note() const { return note_; }

  // Returns the pool offset of a free extent of `bytes` (rounded up to 4 KiB) inside one file: at
  // `hint` when that range is free (a scope continuing where its last segment ended), else first
  // fit. NoSpace when no file has such a free range; InvalidArgument above file_bytes().
  Result<uint64_t> Allocate(uint64_t bytes, uint64_t hint = ExtentAllocator::kNoHint);
  // REQUIRES: (offset, bytes) was returned by Allocate with the same `bytes` and not freed since.
  void Free(uint64_t offset, uint64_t bytes) { alloc_->Free(offset, bytes); }
  // Recovery: takes exactly this extent (ExtentAllocator::AllocateAt).
  Status AllocateAt(uint64_t offset, uint64_t bytes) { return alloc_->AllocateAt(offset, bytes); }
  uint64_t used() const { return alloc_->used(); }
  uint64_t largest_free() const { return alloc_->largest_free(); }

 private:
  SsdFilePool() = default;

  // Durable pools: reads the superblocks of existing files; sets recovered_ and store_id_, or
  // explains why the files cannot be this pool.
  Status CheckSuperblocks(const Options& o, uint64_t nfiles);
  Status WriteSuperblocks();
  // Opens (creating) and pre-allocates the pool's files; appends to *created the paths of those
  // that did not exist before.
  Status OpenFiles(const Options& o, uint64_t nfiles, uint64_t physical_bytes,
                   std::vector<std::string>* created);

  SsdPoolGeometry geometry_;
  bool durable_ = false;
  bool recovered_ = false;
  uint64_t store_id_ = 0;
  std::string note_;
  std::vector<int> fds_;
  std::vector<int> lock_fds_;
  std::unique_ptr<ExtentAllocator> alloc_;
};

}  // namespace flatcake
