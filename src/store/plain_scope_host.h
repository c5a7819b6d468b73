// PlainScopeHost: a ScopeHost (store/scope_placer.h) over plain structs and ExtentAllocators, with
// no data, no index, no journal and no locks. The discrete-event simulator (src/sim/) keeps its
// scopes in one, and the placer's unit test runs against one; FlatStore is the other host.
//
// Scope slots are reused last-freed first, as FlatStore's are. A slot's generation grows by one
// when it is retired. Subclasses add what their release needs (ReleaseScope, RecycleScope) and
// call this class's RecycleScope from theirs.
//
// Thread safety: none; one thread, or the caller's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "media/extent_allocator.h"
#include "store/scope_placer.h"

namespace flatcake {

class PlainScopeHost : public ScopeHost {
 public:
  struct Scope {
    bool live = false;
    uint32_t gen = 0;
    MediaType medium = MediaType::kDram;
    KvLayout layout;
    std::string session;
    std::vector<Segment> segments;
    uint64_t used = 0;
    uint64_t blocks = 0;
    uint32_t readers = 0;
    uint64_t last_use = 0;
  };

  // `dram_bytes` / `ssd_bytes` 0: that medium is disabled. The SSD space is files of
  // `ssd_file_bytes` back to back (no extent spans two); the first `ssd_reserved_per_file` bytes
  // of each (a durable pool's superblock) are taken at construction and count neither as capacity
  // nor as used. Extents are `alignment`-aligned.
  PlainScopeHost(uint64_t dram_bytes, uint64_t ssd_bytes, uint64_t ssd_file_bytes, uint32_t slots,
                 uint64_t alignment, uint64_t ssd_reserved_per_file = 0);

  ExtentAllocator& alloc(MediaType m) { return *media_[static_cast<int>(m)]; }

  bool MediumEnabled(MediaType m) const override { return media_[static_cast<int>(m)] != nullptr; }
  uint64_t Capacity(MediaType m) const override;
  uint64_t Used(MediaType m) const override;
  uint64_t SsdFileBytes() const override { return ssd_file_bytes_; }
  Result<uint64_t> AllocateExtent(MediaType m, uint64_t bytes, uint64_t hint) override {
    return alloc(m).Allocate(bytes, hint);
  }
  void FreeExtent(MediaType m, uint64_t offset, uint64_t bytes) override {
    alloc(m).Free(offset, bytes);
  }
  uint32_t NumScopeSlots() const override { return static_cast<uint32_t>(scopes.size()); }
  Result<uint32_t> NewScope(MediaType medium, const KvLayout& layout, const std::string& session,
                            uint64_t now_ns) override;
  bool ScopeLive(uint32_t id) const override { return scopes[id].live; }
  uint32_t ScopeGeneration(uint32_t id) const override { return scopes[id].gen; }
  MediaType ScopeMedium(uint32_t id) const override { return scopes[id].medium; }
  const KvLayout& ScopeLayout(uint32_t id) const override { return scopes[id].layout; }
  const std::string& ScopeSession(uint32_t id) const override { return scopes[id].session; }
  const std::vector<Segment>& ScopeSegments(uint32_t id) const override {
    return scopes[id].segments;
  }
  uint64_t ScopeUsedBytes(uint32_t id) const override { return scopes[id].used; }
  uint32_t AppendScopeSegment(uint32_t id, const Segment& seg) override;
  void PopScopeSegment(uint32_t id) override;
  void AbandonScopeSegment(uint32_t id, uint32_t segment_no) override {
    AbandonSegment(&scopes[id].segments, segment_no, &scopes[id].used);
  }
  uint64_t ScopeBlocks(uint32_t id) const override { return scopes[id].blocks; }
  uint32_t ScopeReaders(uint32_t id) const override { return scopes[id].readers; }
  uint64_t ScopeLastUse(uint32_t id) const override { return scopes[id].last_use; }
  void TouchScope(uint32_t id, uint64_t now_ns) override { scopes[id].last_use = now_ns; }
  bool TryPinScope(uint32_t id, uint32_t gen) override;
  bool TryRetireScope(uint32_t id, uint32_t gen) override;
  void ReleaseScope(uint32_t, uint32_t) override {}
  void RecycleScope(uint32_t id) override;
  void OnReclaimed(MediaType, uint64_t bytes, uint32_t n) override {
    reclaimed_bytes += bytes;
    reclaimed_scopes += n;
  }

  // A reader's (or writer's) pin taken with TryPinScope is dropped.
  void Unpin(uint32_t id) { scopes[id].readers--; }

  std::vector<Scope> scopes;
  uint64_t reclaimed_bytes = 0;
  uint64_t reclaimed_scopes = 0;

 private:
  const uint64_t ssd_file_bytes_;
  uint64_t ssd_reserved_ = 0;
  std::unique_ptr<ExtentAllocator> media_[2];
  std::vector<uint32_t> free_;  // free slot ids; the last one is reused first
};

}  // namespace flatcake
