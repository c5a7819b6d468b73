#include "flatcake/layout.h"

#include <cstring>
#include <string>

namespace flatcake {

std::string KvLayout::ToString() const {
  return std::to_string(num_layers) + " layers x " + std::to_string(num_planes) + " planes x " +
         std::to_string(slice_bytes) + " B";
}

Status ValidateKvLayout(const KvLayout& layout) {
  if (layout.num_layers == 0 || layout.num_planes == 0 || layout.slice_bytes == 0) {
    return Status::InvalidArgument("layout has a zero dimension: " + layout.ToString());
  }
  if (layout.num_layers > kMaxKvLayers || layout.num_planes > kMaxKvPlanes ||
      layout.slice_bytes > kMaxSliceBytes) {
    return Status::InvalidArgument(
        "layout out of range (max 4096 layers, 16 planes, 1 GiB "
        "slices): " +
        layout.ToString());
  }
  return Status::OK();
}

uint64_t PointersPerBlock(BufferKind kind, const KvLayout& layout) {
  switch (kind) {
    case BufferKind::kBlockContiguous:
    case BufferKind::kBlockPlaneMajor: return 1;
    case BufferKind::kPlanePointers: return layout.num_planes;
    case BufferKind::kSlicePointers: return uint64_t{layout.num_layers} * layout.num_planes;
  }
  return 0;
}

uint8_t* SliceAddress(const BlockBuffers& buffers, const KvLayout& layout, uint64_t b, uint32_t l,
                      uint32_t p) {
  const uint64_t s = layout.slice_bytes;
  switch (buffers.kind) {
    case BufferKind::kBlockContiguous:
      return static_cast<uint8_t*>(buffers.ptrs[b]) + (uint64_t{l} * layout.num_planes + p) * s;
    case BufferKind::kBlockPlaneMajor:
      return static_cast<uint8_t*>(buffers.ptrs[b]) + (uint64_t{p} * layout.num_layers + l) * s;
    case BufferKind::kPlanePointers:
      return static_cast<uint8_t*>(buffers.ptrs[b * layout.num_planes + p]) + uint64_t{l} * s;
    case BufferKind::kSlicePointers:
      return static_cast<uint8_t*>(
          buffers.ptrs[(b * layout.num_layers + l) * layout.num_planes + p]);
  }
  return nullptr;
}

void GatherBlock(const BlockBuffers& buffers, const KvLayout& layout, uint64_t b, uint8_t* dst) {
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      std::memcpy(dst, SliceAddress(buffers, layout, b, l, p), layout.slice_bytes);
      dst += layout.slice_bytes;
    }
  }
}

void ScatterBlock(const uint8_t* src, const KvLayout& layout, const BlockBuffers& buffers,
                  uint64_t b) {
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.num_planes; ++p) {
      std::memcpy(SliceAddress(buffers, layout, b, l, p), src, layout.slice_bytes);
      src += layout.slice_bytes;
    }
  }
}

Status ValidateBuffers(const BlockBuffers& buffers, const KvLayout& layout, uint64_t num_blocks) {
  FC_RETURN_IF_ERROR(ValidateKvLayout(layout));
  const uint64_t want = PointersPerBlock(buffers.kind, layout) * num_blocks;
  if (buffers.ptrs.size() != want) {
    return Status::InvalidArgument("buffer layout " + std::string(BufferKindName(buffers.kind)) +
                                   " needs " + std::to_string(want) + " pointers for " +
                                   std::to_string(num_blocks) + " blocks of " + layout.ToString() +
                                   ", got " + std::to_string(buffers.ptrs.size()));
  }
  for (size_t i = 0; i < buffers.ptrs.size(); ++i) {
    if (buffers.ptrs[i] == nullptr) {
      return Status::InvalidArgument("buffer pointer " + std::to_string(i) + " is null");
    }
  }
  return Status::OK();
}

std::string_view BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kBlockContiguous: return "block_contiguous";
    case BufferKind::kBlockPlaneMajor: return "block_plane_major";
    case BufferKind::kPlanePointers: return "plane_pointers";
    case BufferKind::kSlicePointers: return "slice_pointers";
  }
  return "unknown";
}

Result<BufferKind> ParseBufferKind(std::string_view name) {
  for (BufferKind k : {BufferKind::kBlockContiguous, BufferKind::kBlockPlaneMajor,
                       BufferKind::kPlanePointers, BufferKind::kSlicePointers}) {
    if (BufferKindName(k) == name) return k;
  }
  return Status::InvalidArgument("unknown buffer layout '" + std::string(name) +
                                 "' (block_contiguous, block_plane_major, plane_pointers, "
                                 "slice_pointers)");
}

}  // namespace flatcake
