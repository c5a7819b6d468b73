// The on-disk format of a durable pool (docs/format.md has the byte layout and the rules).
//
// Each SSD pool file starts with a 4 KiB superblock (magic, format version, store id, file index,
// geometry); its data area follows, so pool offset o lives at file o / file_bytes, byte
// kSuperblockBytes + o % file_bytes. The pool's journal (flatcake-journal.log in the first SSD
// directory) is an append-only sequence of records, each a 32-byte header plus a payload padded
// to 8 bytes, checksummed over both:
//   kHeader    first record: the store id and geometry it belongs to
//   kSegment   a segment's commit record, appended only after the segment's data is written
//   kFreeScope every segment of a scope is freed (reclamation), appended before its extents are
//              reused
//   kClear     every segment committed before it is freed (Store::Clear)
// After a restart a segment is visible only if its commit record is intact and no later kFree
// or kClear covers it. All integers are little-endian.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/layout.h"
#include "flatcake/status.h"

namespace flatcake::durable {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kSuperblockBytes = 4096;
inline constexpr uint64_t kSuperMagic = 0x00314C4F4F504346ULL;  // "FCPOOL1\0" little-endian
inline constexpr uint32_t kRecordMagic = 0x4a434643;            // the bytes "CFCJ"
inline constexpr uint64_t kRecordHeaderBytes = 32;
inline constexpr uint64_t kRecordAlign = 8;
inline constexpr uint32_t kMaxRecordPayload = 64u << 20;
inline constexpr const char* kJournalName = "flatcake-journal.log";

struct Superblock {
  uint32_t version = kFormatVersion;
  uint64_t store_id = 0;
  uint32_t file_index = 0;
  uint32_t num_files = 0;
  uint64_t file_bytes = 0;  // data bytes per file (the pool's ssd_file_bytes)
};

// kSuperblockBytes bytes: the fields, then zeros; the last 8 bytes are XXH3-64 of the rest.
std::vector<uint8_t> EncodeSuperblock(const Superblock& sb);
// Corruption (naming what is wrong) unless the magic and checksum hold; the version is returned
// as found, for the caller to compare.
Result<Superblock> DecodeSuperblock(std::span<const uint8_t> bytes);

enum class RecordType : uint16_t { kHeader = 1, kSegment = 2, kFreeScope = 3, kClear = 4 };
std::string_view RecordTypeName(RecordType type);

struct HeaderRecord {
  uint64_t store_id = 0;
  uint32_t num_files = 0;
  uint64_t file_bytes = 0;
};

struct SegmentRecord {
  uint64_t scope_uid = 0;  // unique per scope over the pool's life
  uint32_t segment_no = 0;
  std::string session;
  uint32_t turns = 0;
  uint64_t context_tokens = 0;
  KvLayout layout;
  uint64_t base = 0;  // pool offset of the segment's extent
  uint32_t num_blocks = 0;
  uint64_t run_stride = 0;
  uint64_t bytes = 0;
  std::vector<Key> keys;            // num_blocks
  std::vector<uint64_t> checksums;  // num_blocks: BlockChecksum of each block
  uint64_t seq = 0;  // not encoded: the record's sequence number, set by whoever read it
};

// One record, ready to append: header + payload + padding.
std::vector<uint8_t> EncodeHeader(uint64_t seq, const HeaderRecord& r);
std::vector<uint8_t> EncodeSegment(uint64_t seq, const SegmentRecord& r);
std::vector<uint8_t> EncodeFreeScope(uint64_t seq, uint64_t scope_uid);
std::vector<uint8_t> EncodeClear(uint64_t seq);

Result<HeaderRecord> DecodeHeader(std::span<const uint8_t> payload);
Result<SegmentRecord> DecodeSegment(std::span<const uint8_t> payload);
Result<uint64_t> DecodeFreeScope(std::span<const uint8_t> payload);

// The bytes a record with a payload of `payload_bytes` takes in the journal: header, payload,
// padding.
inline constexpr uint64_t FramedBytes(uint64_t payload_bytes) {
  return kRecordHeaderBytes + (payload_bytes + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

// A record header's fields, read without verifying the record's checksum: what names a damaged
// record.
struct RecordHeader {
  RecordType type;
  uint16_t version;
  uint32_t payload_bytes;
  uint64_t seq;
  uint64_t checksum;
};
// The header at `offset` of a journal image when the record magic is there; nullopt otherwise
// (or when fewer than kRecordHeaderBytes remain).
std::optional<RecordHeader> PeekRecordHeader(std::span<const uint8_t> journal, uint64_t offset);

// A record found by ScanRecords: its type, sequence number and payload (a view into the buffer).
struct RecordView {
  RecordType type;
  uint64_t seq;
  uint64_t offset;  // in the journal
  std::span<const uint8_t> payload;

  // Its extent in the journal: [offset, offset + framed_bytes()).
  uint64_t framed_bytes() const { return FramedBytes(payload.size()); }
};
// A run of journal bytes that holds no intact record (a damaged or torn record, or several).
struct DamagedRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
struct ScanResult {
  std::vector<RecordView> records;
  uint64_t skipped = 0;  // damaged or torn records passed over: damaged.size()
  uint64_t skipped_bytes = 0;
  std::vector<DamagedRange> damaged;  // where they lie, in journal order
  uint64_t end = 0;                   // bytes up to the end of the last intact record
};
// Every intact record of a journal image, in order. A damaged record is skipped by resyncing on
// the next magic at an 8-byte boundary whose record checks out; a torn tail is counted skipped.
ScanResult ScanRecords(std::span<const uint8_t> journal);

}  // namespace flatcake::durable
