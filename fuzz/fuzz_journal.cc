// Fuzz target: the durable pool's on-disk records (media/durable_format.h, docs/format.md): the
// journal scan that resyncs past damaged and torn records, the record decoders, the superblock
// decoder, and the checks recovery makes of a decoded segment before it trusts its extent.
//
// Records and superblocks carry XXH3 checksums that random bytes never match, so the first byte
// of the input picks how the rest is used: as a raw journal image; as a journal image whose
// records are "resealed" (wherever a record header with a length that fits lies at an 8-byte
// boundary, its checksum is recomputed, the way a writer would have), so that the decoders see
// payloads of the fuzzer's choosing; or as a superblock, resealed or not.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "media/durable_format.h"
#include "store/segment_layout.h"

namespace {

using namespace flatcake;
using namespace flatcake::durable;

// Recomputes the checksum of every record header found walking the image from the start.
void Reseal(std::vector<uint8_t>& j) {
  uint64_t off = 0;
  while (off + kRecordHeaderBytes <= j.size()) {
    const auto h = PeekRecordHeader(j, off);
    const uint64_t len = h ? FramedBytes(h->payload_bytes) : 0;
    if (!h || h->payload_bytes > kMaxRecordPayload || off + len > j.size()) {
      off += kRecordAlign;
      continue;
    }
    std::memset(j.data() + off + 24, 0, 8);
    const uint64_t sum = XXH3_64bits(j.data() + off, len);
    std::memcpy(j.data() + off + 24, &sum, 8);
    off += len;
  }
}

// What recovery checks of a segment record before it claims the extent (store/
// flat_store_durable.cc), over a pool of 1 GiB files.
void CheckSegment(const SegmentRecord& seg) {
  constexpr uint64_t kFileBytes = uint64_t{1} << 30;
  const SegmentLayout sl(seg.layout, seg.num_blocks);
  const bool sane = sl.Bytes() == seg.bytes && sl.PlaneStride() == seg.run_stride &&
                    seg.keys.size() == seg.num_blocks && seg.checksums.size() == seg.num_blocks &&
                    seg.base / kFileBytes == (seg.base + seg.bytes - 1) / kFileBytes;
  // A record that decoded names as many keys as blocks, whatever else is wrong with it.
  if (seg.keys.size() != seg.num_blocks) std::abort();
  (void)sane;
}

void ScanJournal(std::span<const uint8_t> image) {
  const ScanResult scan = ScanRecords(image);
  uint64_t covered = scan.skipped_bytes;
  for (const RecordView& r : scan.records) {
    covered += r.framed_bytes();
    if (r.offset + r.framed_bytes() > image.size()) std::abort();
    switch (r.type) {
      case RecordType::kHeader: (void)DecodeHeader(r.payload); break;
      case RecordType::kSegment: {
        auto seg = DecodeSegment(r.payload);
        if (seg.ok()) CheckSegment(*seg);
        break;
      }
      case RecordType::kFreeScope: (void)DecodeFreeScope(r.payload); break;
      default: (void)RecordTypeName(r.type); break;
    }
  }
  // Intact records and skipped ranges never overlap and never reach past the image.
  if (covered > image.size() || scan.end > image.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> rest(data + 1, data + size);
  switch (data[0] % 4) {
    case 0: ScanJournal(rest); break;
    case 1:
      Reseal(rest);
      ScanJournal(rest);
      break;
    case 2: (void)DecodeSuperblock(rest); break;
    default:
      if (rest.size() >= kSuperblockBytes) {
        const uint64_t sum = XXH3_64bits(rest.data(), kSuperblockBytes - 8);
        std::memcpy(rest.data() + kSuperblockBytes - 8, &sum, 8);
      }
      (void)DecodeSuperblock(rest);
      break;
  }
  return 0;
}
