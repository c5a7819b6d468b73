// Read planning for restores (FC-CIO read-time sort-merge coalescing, paper §3.4).
//
// Input: slice reads (file, offset, len, destination, layer) in any order, typically hundreds of
// thousands of page-sized descriptors of a few sessions. Output: few large reads. The planner
//  1. sorts the slices by (file, offset) (LSD radix sort on a packed 64-bit key; stable, so equal
//     keys keep their input order),
//  2. merges a slice into the current read when it is adjacent, overlapping or separated by a gap
//     of at most max_gap bytes (the gap is read and discarded: a bounded price for one command
//     instead of two),
//  3. widens each read to `alignment` (offset down, end up) so O_DIRECT accepts it even when the
//     slices are not aligned, and
//  4. caps each read at max_io bytes, cutting between slices; a single slice longer than max_io
//     is itself cut into max_io pieces.
// A read covers the slices [first_slice, first_slice + slice_count) of the sorted array; only the
// part of each slice that falls inside the read's byte range belongs to that read (a cut slice
// spans several reads). Reads widened to alignment may read past a slice's end: the caller's files
// must be readable up to the next alignment boundary (the store's files are sized in whole
// alignment units).
//
// Thread safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flatcake/status.h"
#include "io/huge_page_allocator.h"

namespace flatcake {

struct SliceRead {
  uint32_t file = 0;    // index in the engine's file table
  uint64_t offset = 0;  // byte offset in the file
  uint64_t len = 0;     // bytes, > 0
  uint8_t* dest = nullptr;
  uint32_t layer = 0;  // model layer the slice belongs to (completion is reported per layer)
  uint32_t tag = 0;    // the caller's; handed back with the slice to RestoreReader's SliceCallback
};

struct CoalesceOptions {
  uint64_t max_gap = 64 << 10;  // Δgap: largest unrequested gap bridged inside one read
  uint64_t max_io = 4 << 20;    // largest read; a multiple of alignment
  uint64_t alignment = 4096;    // power of two; 1 disables widening
};

struct MergedRead {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  uint32_t first_slice = 0;  // into CoalescePlan::slices
  uint32_t slice_count = 0;
};

struct CoalescePlan {
  // Huge-page backed vectors (see huge_page_allocator.h); otherwise plain std::vector.
  HugeVector<SliceRead> slices;  // the input, sorted by (file, offset)
  HugeVector<MergedRead> reads;  // in (file, offset) order
  uint64_t bytes_requested = 0;  // sum of slice lengths
  uint64_t bytes_read = 0;       // sum of read lengths
  uint64_t bytes_gap = 0;        // unrequested bytes bridged between slices (before widening)
};

Status ValidateCoalesceOptions(const CoalesceOptions& options);

// Plans `slices`. Fails on invalid options, an empty or overflowing slice, or more than 2^32
// slices.
Result<CoalescePlan> PlanReads(std::span<const SliceRead> slices, const CoalesceOptions& options);
// The same into `*plan`, reusing its vectors' memory: callers planning repeatedly (a reader, a
// benchmark) avoid faulting in tens of megabytes per call. On error *plan is unspecified.
Status PlanReads(std::span<const SliceRead> slices, const CoalesceOptions& options,
                 CoalescePlan* plan);

// The sort step alone: the permutation ordering `slices` by (file, offset), stably.
HugeVector<uint32_t> SortSliceOrder(std::span<const SliceRead> slices);
void SortSliceOrder(std::span<const SliceRead> slices, HugeVector<uint32_t>* order);

}  // namespace flatcake
