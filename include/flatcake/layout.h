// How KV blocks are shaped and where the caller's copies live.
//
// A block holds `num_layers` x `num_planes` slices of `slice_bytes` each (planes: K and V for
// MHA/GQA, a single latent plane for MLA). The store keeps blocks layer-major per segment; the
// caller's memory may be arranged in any of the BufferKind shapes below, which cover SGLang's host
// pools (page_first, page_first_direct: one pointer per block and plane with the layers
// contiguous; layer_first: one pointer per slice) and plain page-contiguous buffers.
//
// Buffers: pointers must be non-null (InvalidArgument otherwise). Any alignment is accepted:
// data bound for or coming from SSD is bounced through the store's aligned staging window, so
// alignment never changes correctness, only whether a copy can be skipped.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "flatcake/status.h"

namespace flatcake {

struct KvLayout {
  uint32_t num_layers = 0;
  uint32_t num_planes = 0;
  uint64_t slice_bytes = 0;

  uint64_t block_bytes() const { return uint64_t{num_layers} * num_planes * slice_bytes; }
  friend bool operator==(const KvLayout&, const KvLayout&) = default;
  // "32 layers x 2 planes x 16384 B".
  std::string ToString() const;
};

// The largest layout ValidateKvLayout accepts.
inline constexpr uint32_t kMaxKvLayers = 4096;
inline constexpr uint32_t kMaxKvPlanes = 16;
inline constexpr uint64_t kMaxSliceBytes = uint64_t{1} << 30;  // 1 GiB

// Non-zero dimensions, at most kMaxKvLayers layers, kMaxKvPlanes planes and slices of at most
// kMaxSliceBytes.
Status ValidateKvLayout(const KvLayout& layout);

enum class BufferKind : uint8_t {
  // One pointer per block; its slices are contiguous in [layer][plane] order.
  kBlockContiguous,
  // One pointer per block; its slices are contiguous in [plane][layer] order.
  kBlockPlaneMajor,
  // One pointer per (block, plane); that plane's layers are contiguous: ptrs[b * planes + p].
  kPlanePointers,
  // One pointer per slice: ptrs[(b * layers + l) * planes + p].
  kSlicePointers,
};

// The caller's memory for a batch of blocks. `ptrs` must hold exactly
// PointersPerBlock(kind, layout) * number-of-keys pointers. The store reads through these
// pointers in Put and writes through them in Get; it never keeps them after the call returns.
struct BlockBuffers {
  BufferKind kind = BufferKind::kBlockContiguous;
  std::span<void* const> ptrs;
};

uint64_t PointersPerBlock(BufferKind kind, const KvLayout& layout);
// Address of the slice (block b, layer l, plane p). REQUIRES: buffers validated.
uint8_t* SliceAddress(const BlockBuffers& buffers, const KvLayout& layout, uint64_t b, uint32_t l,
                      uint32_t p);
// Copies block b's slices from `buffers` to `dst` ([layer][plane] order, block_bytes() long),
// and from such a contiguous block `src` into `buffers`. REQUIRES: buffers validated.
void GatherBlock(const BlockBuffers& buffers, const KvLayout& layout, uint64_t b, uint8_t* dst);
void ScatterBlock(const uint8_t* src, const KvLayout& layout, const BlockBuffers& buffers,
                  uint64_t b);
// Checks the pointer count and that no pointer is null.
Status ValidateBuffers(const BlockBuffers& buffers, const KvLayout& layout, uint64_t num_blocks);

std::string_view BufferKindName(BufferKind kind);
Result<BufferKind> ParseBufferKind(std::string_view name);

}  // namespace flatcake
