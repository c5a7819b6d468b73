// Block checksums. A block's checksum is the sum (mod 2^64) over its slices of XXH3-64 of the
// slice, seeded with the slice's position l * planes + p. The same function runs on write (over
// the caller's source bytes, as the gather copies them) and on read (over the bytes delivered to
// the destination, as they are copied there or once they landed), so a block verifies whatever
// either side's buffer layout. CopySliceWithChecksum computes it during the copy itself, so
// neither side makes a second pass over the bytes.
//
// Why a sum of per-slice hashes rather than one hash over the block: the terms commute, so a
// restore hashes each slice the moment it lands, on whichever I/O worker landed it and in
// whatever order reads complete, while the slice is still in that core's cache. The seed makes a
// slice delivered to the wrong position a mismatch, as a changed byte is.
#pragma once

#include <cstdint>

#include "flatcake/layout.h"

namespace flatcake {

// XXH3-64 of one slice at position `position` (= layer * planes + plane) of its block.
uint64_t SliceChecksum(const void* data, uint64_t len, uint32_t position);

uint64_t BlockChecksum(const BlockBuffers& buffers, const KvLayout& layout, uint64_t block);

// How a copy writes its destination.
enum class CopyStores : uint8_t {
  // Ordinary stores: the destination ends up in this core's cache. For small copies, and data
  // read again soon.
  kCached,
  // Non-temporal stores straight to memory, without first reading each destination line into the
  // cache: about 1.7x the bandwidth of cached stores for copies larger than the caches (glibc's
  // memcpy switches to them above x86_non_temporal_threshold). Taken where the destination is
  // 32-byte aligned and the CPU has AVX2 (64-byte aligned for AVX-512's); otherwise the copy uses
  // cached stores. Streamed bytes
  // are weakly ordered: they are guaranteed visible to other threads and devices only after this
  // thread calls FenceStreamingStores(), so call it once after a run of copies and before anything
  // announces them (a release store, a lock, an I/O submission). One fence per run rather than
  // one per copy: a fence waits for the streamed lines to reach memory, a few hundred ns, which
  // cost 15-20% of the rate on 8 KiB slices.
  kStreaming,
};

// Orders every streaming store this thread made before it ahead of its later stores (SFENCE).
void FenceStreamingStores();

// Copies `len` bytes from src to dst and returns SliceChecksum of those bytes, reading each byte
// once: the hash is computed from the registers that are stored, so it is the checksum of what
// now lies at dst (as long as nothing else writes there meanwhile). `next_src`, when given, is
// where the caller's next copy (of about `len` bytes) reads: it is prefetched into the cache as
// this copy proceeds, so that a gather of many slices from scattered places streams as a single
// long copy does (the hardware prefetchers start afresh at every slice otherwise: 7.5 against
// 9.4 GB/s for 8 KiB slices on the development VM). Prefetches never fault; any address will do.
// REQUIRES: [src, src + len) and [dst, dst + len) do not overlap.
uint64_t CopySliceWithChecksum(void* dst, const void* src, uint64_t len, uint32_t position,
                               CopyStores stores, const void* next_src = nullptr);
// The same copy without a checksum (with cached stores, plain memcpy).
void CopySlice(void* dst, const void* src, uint64_t len, CopyStores stores,
               const void* next_src = nullptr);

// The instruction sets the fused copy runs on; the functions above take the widest this CPU has.
enum class CopyIsa : uint8_t { kPortable, kAvx2, kAvx512 };
// Test hooks: whether this CPU and build have `isa`, and the copy (with `hash`, and its checksum)
// on that one. REQUIRES: TEST_CopyIsaAvailable(isa).
bool TEST_CopyIsaAvailable(CopyIsa isa);
uint64_t TEST_CopySliceOn(CopyIsa isa, bool hash, void* dst, const void* src, uint64_t len,
                          uint32_t position, CopyStores stores);

}  // namespace flatcake
