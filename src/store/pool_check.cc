#include "store/pool_check.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "media/durable_format.h"
#include "media/journal.h"
#include "media/ssd_file_pool.h"
#include "store/segment_layout.h"
#include "util/checksum.h"

namespace flatcake {
namespace {

using durable::RecordType;

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

std::string Num(uint64_t v) { return std::to_string(v); }

// Reads exactly n bytes at `offset`; IOError naming a short read.
Status ReadAt(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "read");
    if (r == 0) return Status::IOError("short read (past the end of the file)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::OK();
}

// A pool file as found: where it is, its size and (once opened) a read-only descriptor.
struct PoolFile {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  bool intact = false;  // its superblock checks out and agrees with the reference one
};

// A live segment record, as replay found it.
struct LiveSegment {
  durable::SegmentRecord rec;
  uint64_t record_offset = 0;  // in the journal
  bool claimed = false;        // recovery would take its extent
};

class PoolChecker {
 public:
  PoolChecker(const PoolCheckOptions& o, PoolCheckReport* r) : o_(o), r_(*r) {}
  ~PoolChecker() {
    for (PoolFile& f : files_) {
      if (f.fd >= 0) close(f.fd);
    }
    for (int fd : locks_) close(fd);
  }
  PoolChecker(const PoolChecker&) = delete;
  PoolChecker& operator=(const PoolChecker&) = delete;

  Status Run() {
    FC_RETURN_IF_ERROR(FindAndLock());
    if (!CheckSuperblocks()) return Status::OK();  // the geometry is unknown: nothing to replay
    FC_RETURN_IF_ERROR(ReadJournal());
    Replay();
    Claim();
    Summarise();
    if (o_.deep) CheckBlocks();
    if (o_.repair) return Repair();
    return Status::OK();
  }

 private:
  void Damage(std::string what, std::string file, uint64_t offset, std::string detail,
              bool repairable, std::optional<Key> key = std::nullopt) {
    r_.damaged.push_back(
        PoolDamage{std::move(what), std::move(file), offset, std::move(detail), key, repairable});
  }
  // A record the repair leaves out, and why (a line that names the record or its offset).
  void Drop(uint64_t record_offset, const std::string& why) { drop_.emplace(record_offset, why); }
  static std::string At(uint64_t journal_offset) {
    return "journal offset " + Num(journal_offset) + ": ";
  }
  std::string Describe(const LiveSegment& s) const {
    return "segment record at journal offset " + Num(s.record_offset) + " (session '" +
           s.rec.session + "', scope " + Num(s.rec.scope_uid) + " segment " +
           Num(s.rec.segment_no) + ", " + Num(s.rec.num_blocks) + " blocks)";
  }
  // Where pool offset `o` lies.
  const PoolFile& FileAt(uint64_t o) const { return files_[o / r_.file_bytes]; }
  uint64_t FileOffset(uint64_t o) const { return durable::kSuperblockBytes + o % r_.file_bytes; }

  Status FindAndLock();
  bool CheckSuperblocks();
  // Decodes every found file's superblock: the intact ones (with their paths) and why the others
  // are not, by file index.
  using IntactSuperblocks = std::map<uint32_t, std::pair<std::string, durable::Superblock>>;
  void ReadSuperblocks(IntactSuperblocks* intact, std::map<uint32_t, std::string>* errors);
  Status ReadJournal();
  void Replay();
  void Claim();
  void Summarise();
  void CheckBlocks();
  Status Repair();

  const PoolCheckOptions& o_;
  PoolCheckReport& r_;
  std::vector<int> locks_;
  std::map<uint32_t, std::vector<std::string>> found_;  // file index -> where it was found
  std::vector<PoolFile> files_;                         // by index; r_.files of them
  bool repairable_ = true;                              // no damage outside the journal
  std::vector<uint8_t> journal_;
  bool journal_present_ = false;
  durable::ScanResult scan_;
  std::map<uint64_t, std::vector<LiveSegment>> live_;  // by scope uid, as recovery keeps it
  std::map<uint64_t, std::string> drop_;               // journal offset -> why it is dropped
  uint64_t max_seq_ = 0;
};

Status PoolChecker::FindAndLock() {
  if (o_.dirs.empty()) return Status::InvalidArgument("no pool directory given");
  for (const std::string& dir : o_.dirs) {
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("'" + dir + "' is not a directory");
    }
  }
  for (const std::string& dir : o_.dirs) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return Status::FromErrno(errno, "list '" + dir + "'");
    while (const dirent* e = readdir(d)) {
      if (auto index = SsdFilePool::ParseFileName(e->d_name)) found_[*index].push_back(dir);
    }
    closedir(d);
  }
  if (found_.empty()) {
    std::string names;
    for (const std::string& dir : o_.dirs) names += (names.empty() ? "'" : ", '") + dir + "'";
    return Status::InvalidArgument("no pool file (" + SsdFilePool::FileName(0) + ", ...) in " +
                                   names + ": not a FlatCake SSD pool");
  }
  // Locked only once it is a pool: fsck leaves no lock file in a directory that holds none.
  for (const std::string& dir : o_.dirs) {
    auto lock = SsdFilePool::LockDirectory(dir);
    if (!lock.ok()) {
      if (lock.status().code() != StatusCode::kBusy) return lock.status();
      return Status::Busy(std::string(lock.status().message()) +
                          "; fsck checks a pool no store holds: close the store (or let the "
                          "other fsck finish) and run it again");
    }
    locks_.push_back(*lock);
  }
  r_.dirs = o_.dirs;
  return Status::OK();
}

// How superblock `s` of file `i` disagrees with the reference `ref` (empty when it does not).
std::string SuperblockDiffers(const durable::Superblock& s, const durable::Superblock& ref,
                              uint32_t i) {
  if (s.version != ref.version) {
    return "format version " + Num(s.version) + " (file 0: " + Num(ref.version) + ")";
  }
  if (s.store_id != ref.store_id) {
    return "store id " + Hex(s.store_id) + ", another pool's (this pool's: " + Hex(ref.store_id) +
           ")";
  }
  if (s.file_index != i) return "file index " + Num(s.file_index) + " in file " + Num(i);
  if (s.num_files != ref.num_files || s.file_bytes != ref.file_bytes) {
    return "geometry " + Num(s.num_files) + " files of " + Num(s.file_bytes) +
           " bytes, the others " + Num(ref.num_files) + " of " + Num(ref.file_bytes);
  }
  return "";
}

// Reads every superblock; the reference is file 0's, or the lowest-numbered intact one. Returns
// whether the geometry is known.
void PoolChecker::ReadSuperblocks(IntactSuperblocks* intact,
                                  std::map<uint32_t, std::string>* errors) {
  for (const auto& [index, dirs] : found_) {
    const std::string path = dirs.front() + "/" + SsdFilePool::FileName(index);
    std::vector<uint8_t> buf(durable::kSuperblockBytes, 0);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    Status st = fd < 0 ? Status::FromErrno(errno, "open") : ReadAt(fd, buf.data(), buf.size(), 0);
    if (fd >= 0) close(fd);
    if (!st.ok()) {
      (*errors)[index] = "superblock unreadable: " + std::string(st.message());
      continue;
    }
    auto sb = durable::DecodeSuperblock(buf);
    if (sb.ok()) {
      intact->emplace(index, std::make_pair(path, *sb));
    } else {
      (*errors)[index] = std::string(sb.status().message());
    }
  }
}

bool PoolChecker::CheckSuperblocks() {
  IntactSuperblocks intact;
  std::map<uint32_t, std::string> errors;
  ReadSuperblocks(&intact, &errors);
  if (intact.empty()) {
    for (const auto& [index, why] : errors) {
      Damage("superblock", found_[index].front() + "/" + SsdFilePool::FileName(index), 0, why,
             false);
    }
    r_.notes.push_back(
        "no intact superblock: the pool's geometry is unknown, nothing more "
        "is checked");
    repairable_ = false;
    return false;
  }
  const durable::Superblock ref = intact.begin()->second.second;
  if (ref.version != durable::kFormatVersion) {
    Damage("superblock", intact.begin()->second.first, 0,
           "format version " + Num(ref.version) + "; this fsck reads format " +
               Num(durable::kFormatVersion),
           false);
    repairable_ = false;
    return false;
  }
  r_.store_id = ref.store_id;
  r_.files = ref.num_files;
  r_.file_bytes = ref.file_bytes;
  files_.resize(ref.num_files);
  for (uint32_t i = 0; i < ref.num_files; ++i) {
    PoolFile& f = files_[i];
    f.path = SsdFilePool::FilePath(o_.dirs, i);
    auto where = found_.find(i);
    if (where == found_.end()) {
      Damage("file", f.path, 0,
             "missing: the superblocks describe " + Num(ref.num_files) + " pool files", false);
      continue;
    }
    if (where->second.front() + "/" + SsdFilePool::FileName(i) != f.path) {
      Damage("file", f.path, 0,
             "missing here, found in '" + where->second.front() +
                 "' (give the directories in the pool's ssd_dirs order)",
             false);
      continue;
    }
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (f.fd >= 0 && fstat(f.fd, &st) == 0) f.size = static_cast<uint64_t>(st.st_size);
    auto sb = intact.find(i);
    if (sb == intact.end()) {
      Damage("superblock", f.path, 0, errors[i], false);
      continue;
    }
    const std::string differs = SuperblockDiffers(sb->second.second, ref, i);
    if (!differs.empty()) {
      Damage("superblock", f.path, 0, differs, false);
      continue;
    }
    f.intact = true;
    r_.intact_superblocks++;
    if (f.size < durable::kSuperblockBytes + ref.file_bytes) {
      r_.notes.push_back("'" + f.path + "' is " + Num(f.size) + " bytes, short of its " +
                         Num(durable::kSuperblockBytes + ref.file_bytes) +
                         " (a store extends it at open; segments past its end are damaged)");
    }
  }
  for (const auto& [index, dirs] : found_) {
    if (index >= ref.num_files) {
      r_.notes.push_back("'" + dirs.front() + "/" + SsdFilePool::FileName(index) +
                         "' is not one of the pool's " + Num(ref.num_files) +
                         " files (a store ignores it)");
    }
  }
  if (r_.intact_superblocks != r_.files) repairable_ = false;
  return true;
}

Status PoolChecker::ReadJournal() {
  r_.journal_path = o_.dirs.front() + "/" + durable::kJournalName;
  const int fd = ::open(r_.journal_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    Damage("journal", r_.journal_path, 0,
           "missing: a restart would find no segment (a store writes it when it creates the "
           "pool)",
           true);
    return Status::OK();
  }
  if (fd < 0) return Status::FromErrno(errno, "open journal '" + r_.journal_path + "'");
  journal_present_ = true;
  struct stat st {};
  Status s = fstat(fd, &st) == 0 ? Status::OK() : Status::FromErrno(errno, "stat");
  if (s.ok()) {
    journal_.resize(static_cast<size_t>(st.st_size));
    s = ReadAt(fd, journal_.data(), journal_.size(), 0);
  }
  close(fd);
  if (!s.ok()) return s.WithContext("journal '" + r_.journal_path + "'");
  r_.journal_bytes = journal_.size();
  struct stat tmp {};
  if (stat((r_.journal_path + ".tmp").c_str(), &tmp) == 0) {
    r_.notes.push_back("'" + r_.journal_path +
                       ".tmp' is left from an interrupted journal rewrite (recovery ignores it)");
  }
  return Status::OK();
}

// The replay of FlatStore::Recover: records in journal order; free-scope and clear records end
// the segments committed before them.
void PoolChecker::Replay() {
  scan_ = durable::ScanRecords(journal_);
  r_.records = scan_.records.size();
  r_.skipped_records = scan_.skipped;
  for (const durable::DamagedRange& d : scan_.damaged) {
    std::string what = Num(d.bytes) + " bytes that hold no intact record";
    if (auto h = durable::PeekRecordHeader(journal_, d.offset)) {
      what = "a " + std::string(durable::RecordTypeName(h->type)) + " record (seq " + Num(h->seq) +
             ", " + Num(h->payload_bytes) + " payload bytes) that is torn or " + "overwritten (" +
             Num(d.bytes) + " bytes up to the next intact record)";
    }
    const bool tail = d.offset + d.bytes == journal_.size();
    Damage("record", r_.journal_path, d.offset,
           what + (tail ? ", at the journal's end" : "") + ": recovery skips it", true);
    Drop(d.offset, At(d.offset) + what);
  }
  bool header_seen = false;
  for (const durable::RecordView& v : scan_.records) {
    max_seq_ = std::max(max_seq_, v.seq);
    auto skip = [&](const std::string& why) {
      Damage("record", r_.journal_path, v.offset, why + ": recovery skips it", true);
      Drop(v.offset, At(v.offset) + why);
      r_.skipped_records++;
    };
    switch (v.type) {
      case RecordType::kHeader: {
        auto h = durable::DecodeHeader(v.payload);
        if (!h.ok() || h->store_id != r_.store_id) {
          Damage("journal", r_.journal_path, v.offset,
                 h.ok() ? "its header record names store " + Hex(h->store_id) +
                              ", the superblocks " + Hex(r_.store_id) +
                              ": the journal belongs to another pool (a store refuses to open "
                              "it; wipe discards the pool)"
                        : std::string(h.status().message()) + " (a store refuses to open it)",
                 false);
          repairable_ = false;
          live_.clear();  // nothing of it is this pool's
          return;
        }
        if (h->num_files != r_.files || h->file_bytes != r_.file_bytes) {
          Damage("record", r_.journal_path, v.offset,
                 "header record describes " + Num(h->num_files) + " files of " +
                     Num(h->file_bytes) + " bytes, the superblocks " + Num(r_.files) + " of " +
                     Num(r_.file_bytes) + " (repair writes a header from the superblocks)",
                 true);
          Drop(v.offset, At(v.offset) + "the header record, replaced by one from the superblocks");
        }
        header_seen = true;
        break;
      }
      case RecordType::kSegment: {
        auto seg = durable::DecodeSegment(v.payload);
        if (!seg.ok()) {
          skip("segment record: " + std::string(seg.status().message()));
        } else {
          live_[seg->scope_uid].push_back(LiveSegment{std::move(*seg), v.offset});
        }
        break;
      }
      case RecordType::kFreeScope: {
        auto uid = durable::DecodeFreeScope(v.payload);
        if (!uid.ok()) {
          skip(std::string(uid.status().message()));
        } else {
          live_.erase(*uid);
        }
        break;
      }
      case RecordType::kClear: live_.clear(); break;
      default: skip("record of unknown type " + Num(static_cast<uint16_t>(v.type)));
    }
  }
  if (!header_seen && journal_present_) {
    Damage("journal", r_.journal_path, 0,
           "no header record (a store writes one when it creates or rewrites the journal)", true);
  }
}

// Recovery's claims: newest segment first (the last committed, in journal order), each takes
// its extent unless it is malformed or overlaps one taken already; then a scope keeps only the
// segments of its first claimed segment's layout.
void PoolChecker::Claim() {
  std::vector<LiveSegment*> newest_first;
  for (auto& [uid, segs] : live_) {
    std::sort(segs.begin(), segs.end(),
              [](const auto& a, const auto& b) { return a.rec.segment_no < b.rec.segment_no; });
    for (LiveSegment& s : segs) newest_first.push_back(&s);
  }
  // Journal order is commit order: the record written last wins an extent (as in recovery).
  std::sort(newest_first.begin(), newest_first.end(),
            [](const LiveSegment* a, const LiveSegment* b) {
              return a->record_offset > b->record_offset;
            });
  const uint64_t fb = r_.file_bytes;
  const uint64_t capacity = uint64_t{r_.files} * fb;
  std::map<uint64_t, const LiveSegment*> taken;  // extent base -> its segment
  for (LiveSegment* s : newest_first) {
    const durable::SegmentRecord& rec = s->rec;
    const SegmentLayout sl(rec.layout, rec.num_blocks);
    std::string bad;
    if (sl.Bytes() != rec.bytes || sl.PlaneStride() != rec.run_stride) {
      bad = "extent of " + Num(rec.bytes) + " bytes (run stride " + Num(rec.run_stride) +
            ") where its layout " + rec.layout.ToString() + " of " + Num(rec.num_blocks) +
            " blocks takes " + Num(sl.Bytes()) + " (run stride " + Num(sl.PlaneStride()) + ")";
    } else if (rec.base % SsdFilePool::kAlignment != 0) {
      bad = "extent at pool offset " + Num(rec.base) + ", not 4 KiB-aligned";
    } else if (rec.base >= capacity || rec.bytes > capacity - rec.base) {
      bad = "extent [" + Num(rec.base) + ", +" + Num(rec.bytes) + ") outside the data area (" +
            Num(capacity) + " bytes)";
    } else if (rec.base / fb != (rec.base + rec.bytes - 1) / fb) {
      bad = "extent [" + Num(rec.base) + ", +" + Num(rec.bytes) + ") spans two pool files";
    }
    if (!bad.empty()) {
      Damage("extent", r_.journal_path, s->record_offset, Describe(*s) + ": " + bad, true);
      Drop(s->record_offset, Describe(*s) + ": " + bad);
      r_.skipped_records++;
      continue;
    }
    const uint64_t end = rec.base + rec.bytes;
    auto next = taken.lower_bound(rec.base);
    const LiveSegment* other = nullptr;
    if (next != taken.end() && next->first < end) other = next->second;
    if (other == nullptr && next != taken.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second->rec.bytes > rec.base) other = prev->second;
    }
    if (other != nullptr) {
      const std::string why = Describe(*s) + " claims [" + Num(rec.base) + ", +" + Num(rec.bytes) +
                              "), which overlaps the newer " + Describe(*other) +
                              ": recovery keeps the newer";
      Damage("overlap", FileAt(rec.base).path, FileOffset(rec.base), why, true);
      Drop(s->record_offset, why);
      r_.overlaps++;
      r_.skipped_records++;
      continue;
    }
    taken.emplace(rec.base, s);
    s->claimed = true;
  }
  for (auto& [uid, segs] : live_) {
    const LiveSegment* first = nullptr;
    for (LiveSegment& s : segs) {
      if (!s.claimed) continue;
      if (first == nullptr) {
        first = &s;
      } else if (!(s.rec.layout == first->rec.layout)) {
        const std::string why = Describe(s) + ": layout " + s.rec.layout.ToString() +
                                " where its scope's first segment has " +
                                first->rec.layout.ToString();
        Damage("layout", r_.journal_path, s.record_offset, why + ": recovery skips it", true);
        Drop(s.record_offset, why);
        s.claimed = false;
        r_.skipped_records++;
      }
    }
  }
}

void PoolChecker::Summarise() {
  std::unordered_map<Key, uint32_t, KeyHash> seen;
  for (const auto& [uid, segs] : live_) {
    bool any = false;
    for (const LiveSegment& s : segs) {
      if (!s.claimed) continue;
      any = true;
      r_.live_segments++;
      r_.live_blocks += s.rec.num_blocks;
      r_.live_bytes += s.rec.num_blocks * s.rec.layout.block_bytes();
      r_.extent_bytes += s.rec.bytes;
      for (const Key& k : s.rec.keys) {
        if (seen[k]++ == 1) r_.duplicate_keys++;
      }
      const PoolFile& f = FileAt(s.rec.base);
      if (f.fd >= 0 && FileOffset(s.rec.base) + s.rec.bytes > f.size) {
        r_.notes.push_back(Describe(s) + " lies past the end of '" + f.path + "'");
      }
    }
    if (any) r_.live_scopes++;
  }
  if (r_.duplicate_keys > 0) {
    r_.notes.push_back(Num(r_.duplicate_keys) +
                       " keys are in two live segments; a restart serves one copy of each");
  }
}

// Reads each live segment run by run and sums each block's slice hashes, which is BlockChecksum
// (util/checksum.h) over the segment's layer-major layout: the terms commute.
void PoolChecker::CheckBlocks() {
  r_.deep = true;
  std::vector<uint8_t> run;
  std::vector<uint64_t> sums;
  for (const auto& [uid, segs] : live_) {
    for (const LiveSegment& s : segs) {
      if (!s.claimed) continue;
      const durable::SegmentRecord& rec = s.rec;
      const KvLayout& kv = rec.layout;
      const SegmentLayout sl(kv, rec.num_blocks);
      const PoolFile& f = FileAt(rec.base);
      if (!f.intact) continue;  // reported with its file; a store would not open the pool
      sums.assign(rec.num_blocks, 0);
      run.resize(sl.RunPayload());
      Status st = f.fd >= 0 ? Status::OK() : Status::IOError("the file is not readable");
      for (uint32_t l = 0; l < kv.num_layers && st.ok(); ++l) {
        for (uint32_t p = 0; p < kv.num_planes && st.ok(); ++p) {
          st = ReadAt(f.fd, run.data(), run.size(), FileOffset(rec.base + sl.RunOffset(l, p)));
          for (uint32_t b = 0; b < rec.num_blocks && st.ok(); ++b) {
            sums[b] += SliceChecksum(run.data() + sl.BlockOffset(b), kv.slice_bytes,
                                     l * kv.num_planes + p);
          }
        }
      }
      r_.blocks_checked += rec.num_blocks;
      uint32_t bad = 0;
      for (uint32_t b = 0; b < rec.num_blocks; ++b) {
        if (st.ok() && sums[b] == rec.checksums[b]) continue;
        bad++;
        const uint64_t at = rec.base + sl.BlockOffset(b);
        const std::string why = st.ok()
                                    ? "checksum " + Hex(sums[b]) +
                                          " where its commit record says " + Hex(rec.checksums[b])
                                    : "unreadable: " + std::string(st.message());
        Damage("block", f.path, FileOffset(at),
               "key " + KeyToHex(rec.keys[b]) + ", block " + Num(b) + " of the " + Describe(s) +
                   ": " + why + " (a read serves it as a miss)",
               true, rec.keys[b]);
      }
      if (bad > 0) {
        r_.bad_blocks += bad;
        Drop(s.record_offset,
             Describe(s) + ": " + Num(bad) + (bad == 1 ? " bad block" : " bad blocks"));
      }
    }
  }
}

// Rewrites the journal: a header from the superblocks, then every intact record in journal order
// but the dropped ones (and the old headers, which the new one replaces).
Status PoolChecker::Repair() {
  if (r_.clean()) return Status::OK();
  if (!repairable_) {
    r_.not_repaired =
        "damage outside the journal (superblocks, pool files, or a journal of another pool) "
        "is not repairable; only wipe, which discards the pool, opens it again";
    return Status::OK();
  }
  std::vector<uint8_t> out;
  durable::HeaderRecord h;
  h.store_id = r_.store_id;
  h.num_files = r_.files;
  h.file_bytes = r_.file_bytes;
  const std::vector<uint8_t> header = durable::EncodeHeader(max_seq_ + 1, h);
  out.insert(out.end(), header.begin(), header.end());
  for (const durable::RecordView& v : scan_.records) {
    if (v.type == RecordType::kHeader || drop_.count(v.offset)) continue;
    const auto bytes = std::span<const uint8_t>(journal_).subspan(v.offset, v.framed_bytes());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  FC_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, Journal::Open(r_.journal_path));
  j->ReleaseImage();
  FC_RETURN_IF_ERROR(j->Rewrite([&](uint64_t*) { return out; }));
  r_.repaired = true;
  for (const auto& [offset, why] : drop_) r_.dropped.push_back(why);
  return Status::OK();
}

}  // namespace

Result<PoolCheckReport> CheckPool(const PoolCheckOptions& options) {
  PoolCheckReport report;
  PoolChecker checker(options, &report);
  FC_RETURN_IF_ERROR(checker.Run());
  return report;
}

}  // namespace flatcake
