#include "store/segment_writer.h"

#include <algorithm>
#include <optional>
#include <string>

#include "io/io_engine.h"
#include "store/segment_layout.h"

namespace flatcake {

std::vector<SsdSegmentWrite> PlanSsdWrites(const ReservedSegment& seg,
                                           const SsdPoolGeometry& geometry, uint64_t chunk_bytes) {
  std::vector<SsdSegmentWrite> out;
  out.reserve((seg.bytes + chunk_bytes - 1) / chunk_bytes);
  const uint32_t file = geometry.FileOf(seg.base);
  const uint64_t file_off = geometry.FileOffset(seg.base);
  for (uint64_t pos = 0; pos < seg.bytes; pos += chunk_bytes) {
    out.push_back(
        SsdSegmentWrite{pos, std::min(chunk_bytes, seg.bytes - pos), file, file_off + pos});
  }
  return out;
}

Status CheckSegment(const ReservedSegment& seg, const KvLayout& layout, const MediaAccess& media) {
  const SegmentLayout sl(layout, seg.num_blocks);
  if (seg.num_blocks == 0 || seg.plane_stride != sl.PlaneStride() ||
      seg.layer_stride != sl.LayerStride() || seg.bytes != sl.Bytes()) {
    return Status::InvalidArgument("segment of " + std::to_string(seg.num_blocks) +
                                   " blocks has a geometry other than " + layout.ToString() +
                                   " gives");
  }
  const auto where = [&] { return " segment at " + std::to_string(seg.base); };
  if (seg.medium == MediaType::kDram) {
    if (media.dram == nullptr || seg.base > media.dram_bytes ||
        seg.bytes > media.dram_bytes - seg.base) {
      return Status::InvalidArgument("DRAM" + where() + " lies outside the arena");
    }
    return Status::OK();
  }
  if (media.ssd == nullptr || media.engine == nullptr) {
    return Status::InvalidArgument("SSD" + where() + " but no SSD pool is reachable");
  }
  const SsdPoolGeometry& geo = *media.ssd;
  if (seg.base >= geo.capacity() || geo.FileOf(seg.base) != geo.FileOf(seg.base + seg.bytes - 1) ||
      seg.base % SegmentLayout::kRunAlign != 0) {
    return Status::InvalidArgument("SSD" + where() + " is not an aligned extent of one pool file");
  }
  return Status::OK();
}

Status SegmentWriter::Write(const ReservedSegment& seg, const KvLayout& layout,
                            const BlockBuffers& src, std::span<const uint32_t> blocks,
                            std::vector<uint64_t>* checksums) const {
  FC_RETURN_IF_ERROR(CheckSegment(seg, layout, media_));
  if (blocks.size() != seg.num_blocks) {
    return Status::InvalidArgument(std::to_string(blocks.size()) + " blocks for a segment of " +
                                   std::to_string(seg.num_blocks));
  }
  const uint64_t batch = src.ptrs.size() / PointersPerBlock(src.kind, layout);
  for (uint32_t b : blocks) {
    if (b >= batch) {
      return Status::InvalidArgument("block " + std::to_string(b) + " of a batch of " +
                                     std::to_string(batch));
    }
  }
  SegmentGather gather(layout, seg.num_blocks, src, blocks);
  if (seg.medium == MediaType::kDram) {
    // Streaming stores: the arena's bytes are read only by later restores, and bypassing the
    // cache spares reading every destination line first.
    gather.Fill(0, seg.bytes, media_.dram + seg.base, CopyStores::kStreaming);
  } else {
    FC_RETURN_IF_ERROR(WriteSsd(seg, gather));
  }
  checksums->assign(gather.checksums().begin(), gather.checksums().end());
  return Status::OK();
}

Status SegmentWriter::WriteSsd(const ReservedSegment& seg, SegmentGather& gather) const {
  if (staging_ == nullptr) return Status::InvalidArgument("SSD segment without staging buffers");
  const std::vector<SsdSegmentWrite> writes =
      PlanSsdWrites(seg, *media_.ssd, staging_->buffer_bytes());
  const StagingPool::Loan loan = staging_->Borrow(
      static_cast<uint32_t>(std::min<size_t>(writes.size(), StagingPool::kMaxBuffers)));
  IoWaiter waiter;
  // in_flight[i]: tag of the write that still reads loan[i], if any. Workers may complete writes
  // out of order, so wait for that very write, not for "all but one".
  std::optional<uint64_t> in_flight[StagingPool::kMaxBuffers];
  Status st;
  for (size_t n = 0; n < writes.size(); ++n) {
    const SsdSegmentWrite& w = writes[n];
    const auto i = static_cast<uint32_t>(n % loan.size());
    std::optional<uint64_t>& busy = in_flight[i];
    if (busy) {
      st = waiter.WaitFor(*busy);
      if (!st.ok()) break;
    }
    uint8_t* data = loan[i];
    // Streaming: the device reads the staging buffer from memory, not from this core's cache.
    gather.Fill(w.pos, w.len, data, CopyStores::kStreaming);
    IoOp op;
    op.opcode = IoOpcode::kWrite;
    op.file = w.file;
    op.offset = w.file_offset;
    op.buf = data;
    op.len = w.len;
    busy = waiter.Submit(*media_.engine, op);
  }
  Status all = waiter.WaitAll();
  if (st.ok()) st = all;
  if (!st.ok()) return st.WithContext("SSD segment write");
  return Status::OK();
}

Status SegmentWriter::WriteAll(const WriteReservation& r, const BlockBuffers& src,
                               std::vector<uint64_t>* checksums) const {
  checksums->clear();
  checksums->reserve(r.blocks.size());
  std::vector<uint64_t> sums;
  for (const ReservedSegment& seg : r.segments) {
    if (seg.first_block > r.blocks.size() || seg.num_blocks > r.blocks.size() - seg.first_block) {
      return Status::InvalidArgument("segment blocks outside the reservation's");
    }
    const auto blocks =
        std::span<const uint32_t>(r.blocks).subspan(seg.first_block, seg.num_blocks);
    FC_RETURN_IF_ERROR(Write(seg, r.layout, src, blocks, &sums));
    checksums->insert(checksums->end(), sums.begin(), sums.end());
  }
  return Status::OK();
}

}  // namespace flatcake
