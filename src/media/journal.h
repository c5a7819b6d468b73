// Journal: the append-only record file of a durable pool (media/durable_format.h has the
// records). Appends are whole records in one write(2), so a process kill leaves at most one torn
// record at the tail, which the next scan skips; Sync makes every record appended so far durable
// (fdatasync). Rewrite replaces the contents atomically (a new file, synced, renamed over).
//
// Thread safety: every method is internally synchronised.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flatcake/status.h"
#include "util/thread_annotations.h"

namespace flatcake {

class Journal {
 public:
  // Opens `path`, creating it when absent, and reads its contents (image()).
  static Result<std::unique_ptr<Journal>> Open(const std::string& path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The contents read at Open; the caller scans it once, then drops it with ReleaseImage.
  std::span<const uint8_t> image() const { return image_; }
  void ReleaseImage() { std::vector<uint8_t>().swap(image_); }

  // Appends the record `encode(seq)` builds for the next sequence number. On a failed or short
  // write the file is cut back to where it was, so no partial record stays behind.
  Status Append(const std::function<std::vector<uint8_t>(uint64_t seq)>& encode) EXCLUDES(mu_);
  Status Sync() EXCLUDES(mu_);
  // Replaces the contents with `records(seq)` (sequence numbers continue), durably.
  Status Rewrite(const std::function<std::vector<uint8_t>(uint64_t* seq)>& records) EXCLUDES(mu_);
  // Sequence numbers: the next one handed out; recovery sets it past the last one read.
  void SetNextSeq(uint64_t seq) EXCLUDES(mu_);
  uint64_t bytes() const EXCLUDES(mu_);
  // The length of the journal as of the last Sync (or Rewrite), which a power loss keeps.
  uint64_t synced_bytes() const EXCLUDES(mu_);
  const std::string& path() const { return path_; }

 private:
  Journal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  mutable Mutex mu_;
  int fd_ GUARDED_BY(mu_);
  uint64_t size_ GUARDED_BY(mu_) = 0;
  uint64_t synced_ GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  std::vector<uint8_t> image_;
};

}  // namespace flatcake
