// Fuzz target: recovery of a durable pool from its journal (store/flat_store_durable.cc: replay,
// extent claims, scope rebuild). A small durable pool is made once per process, its blocks
// written and the store closed; each input then replaces the pool's journal, and a store is
// opened on it. The input is a journal image whose record checksums are recomputed (as in
// fuzz_journal's resealed mode) and whose header records carry this pool's store id, so that
// recovery reads the fuzzer's records rather than refusing the journal outright.
//
// What must hold: the open either fails with a Status or yields a store that serves the pool's
// blocks only byte-exact against their records, and that takes a new write and serves it back.
// One execution opens a store (threads, pool files): hundreds per second at most, so this
// target's campaigns run fewer executions than the parsers' (docs/reliability.md).
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "media/durable_format.h"
#include "store/flat_store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace {

using namespace flatcake;

constexpr KvLayout kLayout{2, 2, 4096};  // 16 KiB blocks

StoreOptions PoolOptions(const std::string& dir) {
  StoreOptions o;
  o.dram_bytes = 0;  // every write goes to SSD; a DRAM arena would be pre-faulted at each open
  o.ssd_dirs = {dir};
  o.ssd_bytes = 8 * kMiB;
  o.ssd_file_bytes = 2 * kMiB;
  o.max_scopes = 64;
  o.io_engine = IoEngineKind::kPosix;
  // The store zeroes its read window and write staging at open (128 + 32 MiB by default), and its
  // index: that took 90% of an execution (10 a second). A few segments of each serve this pool.
  o.read_window_bytes = 64 * kKiB;
  o.write_staging_bytes = 64 * kKiB;
  o.max_io_bytes = 64 * kKiB;
  o.index_capacity = 1024;  // a pool of 8 MiB holds 512 blocks
  return o;
}

struct Pool {
  TempDir dir{"flatcake-fuzz-pool", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : ""};
  StoreOptions options = PoolOptions(dir.path());
  std::string journal = dir.path() + "/" + durable::kJournalName;
  uint64_t store_id = 0;
  std::vector<Key> keys = MakeKeys(7, 0, 24);
  HostBlocks dst{kLayout, keys.size()};  // every execution's restore of `keys`: faulted in once
};

std::unique_ptr<FlatStore> OpenStore(const StoreOptions& o) {
  auto s = FlatStore::OpenWithEngine(o, nullptr);
  return s.ok() ? std::move(*s) : nullptr;
}

bool Put(FlatStore& s, const std::vector<Key>& keys, const char* session) {
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  WriteHints h;
  h.force_medium = MediaType::kSsd;
  h.session = session;
  return s.Put(keys, kLayout, src.buffers(), h).ok();
}

// Per key: 1 when served byte-exact, 0 when missing; aborts on a served block with other bytes.
// Only for keys no journal names: a record may name any key with another block's extent and
// checksum (valid checksums are not a proof of origin), so recovered keys are read, not judged.
std::vector<uint8_t> Served(FlatStore& s, const std::vector<Key>& keys) {
  HostBlocks dst(kLayout, keys.size());
  auto r = s.Get(keys, kLayout, dst.buffers());
  if (!r.ok()) return std::vector<uint8_t>(keys.size(), 0);
  std::vector<uint8_t> want(kLayout.block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r->found[i]) continue;
    FillBlock(keys[i], want.data(), want.size());
    if (std::memcmp(want.data(), dst.block(i), want.size()) != 0) std::abort();
  }
  return r->found;
}

// Made once per process. Removed at exit (libFuzzer ends its runs through exit()), with its
// directory in /dev/shm: memory, which a run that left it would keep from every later one. A
// crashing input aborts, leaving the pool for a look.
Pool& ThePool() {
  static Pool* pool = [] {
    auto* p = new Pool;
    std::atexit([] { delete pool; });
    auto s = OpenStore(p->options);
    if (s == nullptr || !Put(*s, {p->keys.begin(), p->keys.begin() + 16}, "a") ||
        !Put(*s, {p->keys.begin() + 16, p->keys.end()}, "b")) {
      std::abort();
    }
    s.reset();
    // The store id, from the journal's header record (the first).
    std::vector<uint8_t> j(durable::kRecordHeaderBytes + 8);
    const int fd = open(p->journal.c_str(), O_RDONLY);
    if (fd < 0 || pread(fd, j.data(), j.size(), 0) != static_cast<ssize_t>(j.size())) std::abort();
    close(fd);
    std::memcpy(&p->store_id, j.data() + durable::kRecordHeaderBytes, 8);
    return p;
  }();
  return *pool;
}

// Header records get the pool's store id, then every record found walking the image gets its
// checksum recomputed.
void Reseal(std::vector<uint8_t>& j, uint64_t store_id) {
  uint64_t off = 0;
  while (off + durable::kRecordHeaderBytes <= j.size()) {
    const auto h = durable::PeekRecordHeader(j, off);
    const uint64_t len = h ? durable::FramedBytes(h->payload_bytes) : 0;
    if (!h || h->payload_bytes > durable::kMaxRecordPayload || off + len > j.size()) {
      off += durable::kRecordAlign;
      continue;
    }
    if (h->type == durable::RecordType::kHeader && h->payload_bytes >= 8) {
      std::memcpy(j.data() + off + durable::kRecordHeaderBytes, &store_id, 8);
    }
    std::memset(j.data() + off + 24, 0, 8);
    const uint64_t sum = XXH3_64bits(j.data() + off, len);
    std::memcpy(j.data() + off + 24, &sum, 8);
    off += len;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Pool& pool = ThePool();
  std::vector<uint8_t> j(data, data + size);
  Reseal(j, pool.store_id);
  const int fd = open(pool.journal.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
  if (fd < 0 || write(fd, j.data(), j.size()) != static_cast<ssize_t>(j.size())) std::abort();
  close(fd);
  auto s = OpenStore(pool.options);
  if (s == nullptr) return 0;
  (void)s->Lookup(pool.keys);
  (void)s->Get(pool.keys, kLayout, pool.dst.buffers());
  // Whatever recovery kept, the store takes a new write and serves it back: keys of this
  // execution's own, which no input can name in advance.
  static uint64_t execution = 0;
  const std::vector<Key> fresh = MakeKeys(9, 2 * execution++, 2);
  if (Put(*s, fresh, "fresh") && Served(*s, fresh) != std::vector<uint8_t>(fresh.size(), 1)) {
    std::abort();
  }
  return 0;
}
