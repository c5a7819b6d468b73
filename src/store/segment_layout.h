// Where each slice of a segment lies: the one home of the `[layer][plane][block]` arithmetic that
// the write path, both read paths (DRAM and SSD) and the benchmarks share.
//
// A segment is one write batch of a scope, laid out layer-major. Its (layer, plane) runs follow
// each other in [layer][plane] order; a run holds the segment's blocks' slices of that layer and
// plane back to back and is padded with zeros to a multiple of kRunAlign (4 KiB, the O_DIRECT
// unit), so that every run starts aligned on SSD. With s = slice bytes:
//
//   PlaneStride() = AlignUp(blocks * s, kRunAlign)       (one run)
//   LayerStride() = planes * PlaneStride()               (one layer's runs)
//   Bytes()       = layers * LayerStride()               (the whole segment, its extent's size)
//   SliceOffset(l, p, b) = l * LayerStride() + p * PlaneStride() + b * s
//
// A block's index entry stores the address of its (0, 0) slice (BlockOffset(b) from the segment's
// base) and LayerStride(); FromLayerStride rebuilds the strides from that, so a reader finds
// slice (l, p) at the entry's address + RunOffset(l, p) without knowing the segment's size.
//
// A pure value type: no I/O, no locks, constexpr throughout; safe to copy and share.
#pragma once

#include <cstdint>

#include "flatcake/layout.h"
#include "util/align.h"

namespace flatcake {

class SegmentLayout {
 public:
  static constexpr uint64_t kRunAlign = 4096;

  // The layout of a segment of `num_blocks` blocks shaped by `kv`.
  // REQUIRES: kv validated (ValidateKvLayout).
  constexpr SegmentLayout(const KvLayout& kv, uint64_t num_blocks)
      : kv_(kv),
        num_blocks_(num_blocks),
        plane_stride_(AlignUp(num_blocks * kv.slice_bytes, kRunAlign)) {}

  // The strides of the segment a block's index entry points into, from the entry's layer
  // stride. The segment's block count is not recorded there: num_blocks() is 0 and RunPayload()
  // is unknown; the strides and offsets are exact.
  // REQUIRES: layer_stride is one this type produced for `kv` (a multiple of kv.num_planes).
  static constexpr SegmentLayout FromLayerStride(const KvLayout& kv, uint64_t layer_stride) {
    return SegmentLayout(kv, 0, layer_stride / kv.num_planes);
  }

  // Largest number of blocks whose segment fits in `bytes` (0 when not even one does).
  static constexpr uint64_t BlocksFitting(const KvLayout& kv, uint64_t bytes) {
    const uint64_t runs = uint64_t{kv.num_layers} * kv.num_planes;
    return AlignDown(bytes / runs, kRunAlign) / kv.slice_bytes;
  }

  constexpr const KvLayout& kv() const { return kv_; }
  constexpr uint64_t num_blocks() const { return num_blocks_; }
  // Number of (layer, plane) runs.
  constexpr uint64_t Runs() const { return uint64_t{kv_.num_layers} * kv_.num_planes; }
  // Bytes from a slice to the same block's slice of the next plane: one padded run.
  constexpr uint64_t PlaneStride() const { return plane_stride_; }
  // Bytes from a slice to the same block's slice (same plane) of the next layer.
  constexpr uint64_t LayerStride() const { return uint64_t{kv_.num_planes} * plane_stride_; }
  // The segment's size, padding included: what its extent allocates and its write moves.
  constexpr uint64_t Bytes() const { return uint64_t{kv_.num_layers} * LayerStride(); }
  // Slice bytes of one run before its padding. REQUIRES: built with a block count.
  constexpr uint64_t RunPayload() const { return num_blocks_ * kv_.slice_bytes; }

  // Offset of run (l, p) from the segment's base; equally, of any block's slice (l, p) from that
  // block's slice (0, 0).
  constexpr uint64_t RunOffset(uint32_t layer, uint32_t plane) const {
    return layer * LayerStride() + plane * plane_stride_;
  }
  // Offset of block b's slice (0, 0) from the segment's base: where its GVA points.
  constexpr uint64_t BlockOffset(uint64_t block) const { return block * kv_.slice_bytes; }
  // Offset of block b's slice (l, p) from the segment's base.
  constexpr uint64_t SliceOffset(uint32_t layer, uint32_t plane, uint64_t block) const {
    return RunOffset(layer, plane) + BlockOffset(block);
  }

  friend constexpr bool operator==(const SegmentLayout&, const SegmentLayout&) = default;

 private:
  constexpr SegmentLayout(const KvLayout& kv, uint64_t num_blocks, uint64_t plane_stride)
      : kv_(kv), num_blocks_(num_blocks), plane_stride_(plane_stride) {}

  KvLayout kv_;
  uint64_t num_blocks_;
  uint64_t plane_stride_;
};

}  // namespace flatcake
