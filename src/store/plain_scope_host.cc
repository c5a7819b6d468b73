#include "store/plain_scope_host.h"

namespace flatcake {

PlainScopeHost::PlainScopeHost(uint64_t dram_bytes, uint64_t ssd_bytes, uint64_t ssd_file_bytes,
                               uint32_t slots, uint64_t alignment, uint64_t ssd_reserved_per_file)
    : scopes(slots), ssd_file_bytes_(ssd_file_bytes) {
  if (dram_bytes) media_[0] = std::make_unique<ExtentAllocator>(dram_bytes, 0, alignment);
  if (ssd_bytes) {
    media_[1] = std::make_unique<ExtentAllocator>(ssd_bytes, ssd_file_bytes, alignment);
    if (ssd_reserved_per_file) {
      for (uint64_t f = 0; f * ssd_file_bytes < ssd_bytes; ++f) {
        if (media_[1]->AllocateAt(f * ssd_file_bytes, ssd_reserved_per_file).ok()) {
          ssd_reserved_ += ssd_reserved_per_file;
        }
      }
    }
  }
  for (uint32_t i = slots; i-- > 0;) free_.push_back(i);
}

uint64_t PlainScopeHost::Capacity(MediaType m) const {
  if (!MediumEnabled(m)) return 0;
  const uint64_t cap = media_[static_cast<int>(m)]->capacity();
  return m == MediaType::kSsd ? cap - ssd_reserved_ : cap;
}

uint64_t PlainScopeHost::Used(MediaType m) const {
  if (!MediumEnabled(m)) return 0;
  const uint64_t used = media_[static_cast<int>(m)]->used();
  return m == MediaType::kSsd ? used - ssd_reserved_ : used;
}

Result<uint32_t> PlainScopeHost::NewScope(MediaType medium, const KvLayout& layout,
                                          const std::string& session, uint64_t now_ns) {
  if (free_.empty()) return Status::NoSpace("no free scope slot");
  const uint32_t id = free_.back();
  free_.pop_back();
  Scope& s = scopes[id];
  s = Scope{.live = true,
            .gen = s.gen,
            .medium = medium,
            .layout = layout,
            .session = session,
            .segments = {},
            .used = 0,
            .blocks = 0,
            .readers = 0,
            .last_use = now_ns};
  return id;
}

uint32_t PlainScopeHost::AppendScopeSegment(uint32_t id, const Segment& seg) {
  scopes[id].segments.push_back(seg);
  scopes[id].used += seg.bytes;
  return static_cast<uint32_t>(scopes[id].segments.size() - 1);
}

void PlainScopeHost::PopScopeSegment(uint32_t id) {
  scopes[id].used -= scopes[id].segments.back().bytes;
  scopes[id].segments.pop_back();
}

bool PlainScopeHost::TryPinScope(uint32_t id, uint32_t gen) {
  Scope& s = scopes[id];
  if (!s.live || s.gen != gen) return false;
  s.readers++;
  return true;
}

bool PlainScopeHost::TryRetireScope(uint32_t id, uint32_t gen) {
  Scope& s = scopes[id];
  if (!s.live || s.gen != gen || s.readers > 0) return false;
  s.live = false;
  s.gen++;
  return true;
}

void PlainScopeHost::RecycleScope(uint32_t id) {
  Scope& s = scopes[id];
  s.session.clear();
  s.segments.clear();
  s.used = 0;
  s.blocks = 0;
  free_.push_back(id);
}

}  // namespace flatcake
