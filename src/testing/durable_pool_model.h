// What a crash or power-loss test expects of a durable pool once it is reopened: each key the test
// wrote carries an expectation (served byte-exact, may be served, never served), and
// VerifyAndSettle reads every key back, counts how the store measured up and settles what was
// uncertain. The pool geometry and block layouts the durability tests share live here too.
// Test-only; not thread-safe (one model per test).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "flatcake/store.h"
#include "util/block_content.h"

namespace flatcake::testing {

// Small blocks of a few layers x planes x 4-16 KiB, so a few-MiB pool holds a few hundred.
inline constexpr std::array<KvLayout, 4> kDurableLayouts = {
    {{2, 2, 4096}, {4, 2, 4096}, {2, 1, 16384}, {3, 2, 8192}}};
inline constexpr uint64_t kLargestDurableBlock = 48 * kKiB;

// A durable store of a 4 MiB SSD pool in four 1 MiB files and a 2 MiB DRAM arena, with buffers
// sized for it (the defaults would map hundreds of MiB per open).
inline StoreOptions SmallDurablePool(const std::string& dir) {
  StoreOptions o;
  o.dram_bytes = 2 * kMiB;
  o.huge_pages = HugePageMode::kNone;
  o.ssd_dirs = {dir};
  o.ssd_bytes = 4 * kMiB;
  o.ssd_file_bytes = 1 * kMiB;
  o.max_scopes = 256;
  o.index_capacity = 4096;
  o.read_window_bytes = 1 * kMiB;
  o.max_io_bytes = 256 * kKiB;
  // Segments are written in 32 KiB pieces, so a kill or a power loss can land inside one.
  o.write_staging_bytes = 64 * kKiB;
  o.io_engine = IoEngineKind::kPosix;
  return o;
}

enum class Expect : uint8_t {
  kServed,     // published on SSD, durably: must be served, byte-exact
  kMaybe,      // in flight, or an operation that may have freed it was: if served, byte-exact
  kNotServed,  // freed, cleared, only ever in DRAM, or lost once: must never be served
};

struct KeyModel {
  struct Entry {
    Expect expect;
    uint8_t layout;  // index into kDurableLayouts
  };

  uint64_t ns = 0;
  std::map<uint64_t, Entry> keys;  // by id; a key id is written at most once

  Key KeyOf(uint64_t id) const { return KeyFromId(id, ns); }
  void Set(uint64_t first, uint64_t n, Expect expect, uint8_t layout) {
    for (uint64_t id = first; id < first + n; ++id) keys[id] = Entry{expect, layout};
  }
  // Every key expected as `from` now expects `to`.
  void Change(Expect from, Expect to) {
    for (auto& [id, e] : keys) {
      if (e.expect == from) e.expect = to;
    }
  }
  uint64_t Count(Expect expect) const {
    return static_cast<uint64_t>(std::count_if(
        keys.begin(), keys.end(), [&](const auto& kv) { return kv.second.expect == expect; }));
  }
};

struct VerifyCounts {
  uint64_t verified = 0;     // blocks served and compared byte for byte
  uint64_t wrong_bytes = 0;  // bytes of served blocks that differ from their content
  uint64_t missing = 0;      // kServed keys not served
  uint64_t resurrected = 0;  // kNotServed keys served
  uint64_t maybe_served = 0, maybe_missing = 0;
  uint64_t present = 0;  // keys the index holds (Lookup), whatever their bytes
  uint64_t errors = 0;   // Get calls that failed
  std::string first_failure;
};

// Reads every key of `model` back from `store` and compares what is served with the key's
// content. Then settles each kMaybe: served -> kServed, not served -> kNotServed (write-once
// keys whose block was not served after a restart can never be served correctly again).
inline VerifyCounts VerifyAndSettle(Store& store, KeyModel& model) {
  VerifyCounts c;
  auto note = [&](const std::string& what) {
    if (c.first_failure.empty()) c.first_failure = what;
  };
  constexpr size_t kChunk = 32;
  std::vector<uint8_t> want(kLargestDurableBlock);
  // By layout: every key that may be served, and every other one the index holds (a Lookup miss
  // cannot be served, which keeps the check of the many freed keys cheap).
  std::array<std::vector<uint64_t>, kDurableLayouts.size()> to_read;
  for (const auto& [id, e] : model.keys) {
    const Key k = model.KeyOf(id);
    const bool present = store.Exists(std::span<const Key>(&k, 1)) == 1;
    c.present += present;
    if (present || e.expect != Expect::kNotServed) to_read[e.layout].push_back(id);
  }
  for (uint8_t li = 0; li < kDurableLayouts.size(); ++li) {
    const KvLayout& layout = kDurableLayouts[li];
    const std::vector<uint64_t>& ids = to_read[li];
    HostBlocks dst(layout, kChunk);
    for (size_t at = 0; at < ids.size(); at += kChunk) {
      const size_t n = std::min(kChunk, ids.size() - at);
      std::vector<Key> keys;
      for (size_t i = 0; i < n; ++i) keys.push_back(model.KeyOf(ids[at + i]));
      std::memset(dst.bytes.data(), 0, dst.bytes.size());
      BlockBuffers buffers = dst.buffers();
      buffers.ptrs = buffers.ptrs.subspan(0, n);
      auto got = store.Get(keys, layout, buffers);
      if (!got.ok()) {
        c.errors++;
        note("get failed: " + got.status().ToString());
        continue;
      }
      for (size_t i = 0; i < n; ++i) {
        KeyModel::Entry& e = model.keys[ids[at + i]];
        const bool served = got->found[i] != 0;
        if (served) {
          FillBlock(keys[i], want.data(), layout.block_bytes());
          uint64_t bad = 0;
          for (uint64_t b = 0; b < layout.block_bytes(); ++b) bad += want[b] != dst.block(i)[b];
          c.verified++;
          c.wrong_bytes += bad;
          if (bad) note("key " + std::to_string(ids[at + i]) + ": wrong bytes served");
        }
        switch (e.expect) {
          case Expect::kServed:
            if (!served) {
              c.missing++;
              note("key " + std::to_string(ids[at + i]) + " was published but is not served");
            }
            break;
          case Expect::kNotServed:
            if (served) {
              c.resurrected++;
              note("key " + std::to_string(ids[at + i]) + " was freed but is served");
            }
            break;
          case Expect::kMaybe:
            (served ? c.maybe_served : c.maybe_missing)++;
            e.expect = served ? Expect::kServed : Expect::kNotServed;
            break;
        }
      }
    }
  }
  return c;
}

}  // namespace flatcake::testing
