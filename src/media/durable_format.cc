#include "media/durable_format.h"

#include <xxhash.h>

#include <cstring>

namespace flatcake::durable {
namespace {

// Appends fixed-width little-endian fields (the project targets little-endian hosts).
class Writer {
 public:
  template <typename T>
  void Put(T v) {
    uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  void PutBytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Reads them back; every read is bounds-checked and `ok()` turns false on the first overrun.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T Get() {
    T v{};
    if (pos_ + sizeof(T) > in_.size()) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> GetBytes(size_t n) {
    if (pos_ + n > in_.size()) {
      ok_ = false;
      return {};
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Header: magic u32 | type u16 | version u16 | payload_bytes u32 | reserved u32 | seq u64 |
// checksum u64 (XXH3-64 of the header with this field zero, then the padded payload).
std::vector<uint8_t> Frame(RecordType type, uint64_t seq, std::vector<uint8_t> payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  if (const size_t tail = payload.size() % kRecordAlign; tail != 0) {
    payload.insert(payload.end(), kRecordAlign - tail, 0);
  }
  Writer w;
  w.Put<uint32_t>(kRecordMagic);
  w.Put<uint16_t>(static_cast<uint16_t>(type));
  w.Put<uint16_t>(static_cast<uint16_t>(kFormatVersion));
  w.Put<uint32_t>(n);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(seq);
  w.Put<uint64_t>(0);
  std::vector<uint8_t>& rec = w.bytes();
  rec.insert(rec.end(), payload.begin(), payload.end());
  const uint64_t sum = XXH3_64bits(rec.data(), rec.size());
  std::memcpy(rec.data() + 24, &sum, sizeof(sum));
  return rec;
}

// Whether a record starts at `off`: magic, a sane length, and a checksum that holds.
bool RecordAt(std::span<const uint8_t> j, uint64_t off, RecordView* out, uint64_t* total) {
  const std::optional<RecordHeader> h = PeekRecordHeader(j, off);
  if (!h || h->payload_bytes > kMaxRecordPayload) return false;
  const uint64_t len = FramedBytes(h->payload_bytes);
  if (off + len > j.size()) return false;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, j.data() + off, 24);
  const uint64_t zero = 0;
  XXH3_64bits_update(st, &zero, 8);
  XXH3_64bits_update(st, j.data() + off + kRecordHeaderBytes, len - kRecordHeaderBytes);
  const uint64_t want = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (want != h->checksum) return false;
  out->type = h->type;
  out->seq = h->seq;
  out->offset = off;
  out->payload = j.subspan(off + kRecordHeaderBytes, h->payload_bytes);
  *total = len;
  return true;
}

}  // namespace

std::optional<RecordHeader> PeekRecordHeader(std::span<const uint8_t> j, uint64_t off) {
  if (off + kRecordHeaderBytes > j.size()) return std::nullopt;
  uint32_t magic;
  std::memcpy(&magic, j.data() + off, 4);
  if (magic != kRecordMagic) return std::nullopt;
  uint16_t type;
  RecordHeader h;
  std::memcpy(&type, j.data() + off + 4, 2);
  h.type = static_cast<RecordType>(type);
  std::memcpy(&h.version, j.data() + off + 6, 2);
  std::memcpy(&h.payload_bytes, j.data() + off + 8, 4);
  std::memcpy(&h.seq, j.data() + off + 16, 8);
  std::memcpy(&h.checksum, j.data() + off + 24, 8);
  return h;
}

std::string_view RecordTypeName(RecordType type) {
  switch (type) {
    case RecordType::kHeader: return "header";
    case RecordType::kSegment: return "segment";
    case RecordType::kFreeScope: return "free-scope";
    case RecordType::kClear: return "clear";
  }
  return "unknown";
}

std::vector<uint8_t> EncodeSuperblock(const Superblock& sb) {
  Writer w;
  w.Put<uint64_t>(kSuperMagic);
  w.Put<uint32_t>(sb.version);
  w.Put<uint32_t>(sb.file_index);
  w.Put<uint64_t>(sb.store_id);
  w.Put<uint32_t>(sb.num_files);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(sb.file_bytes);
  std::vector<uint8_t>& out = w.bytes();
  out.resize(kSuperblockBytes, 0);
  const uint64_t sum = XXH3_64bits(out.data(), kSuperblockBytes - 8);
  std::memcpy(out.data() + kSuperblockBytes - 8, &sum, 8);
  return out;
}

Result<Superblock> DecodeSuperblock(std::span<const uint8_t> bytes) {
  if (bytes.size() < kSuperblockBytes) return Status::Corruption("superblock truncated");
  Reader r(bytes);
  if (r.Get<uint64_t>() != kSuperMagic) {
    return Status::Corruption(
        "no FlatCake superblock (not a durable pool file, or written by a "
        "FlatCake before format 1)");
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + kSuperblockBytes - 8, 8);
  if (XXH3_64bits(bytes.data(), kSuperblockBytes - 8) != sum) {
    return Status::Corruption("superblock checksum mismatch");
  }
  Superblock sb;
  sb.version = r.Get<uint32_t>();
  sb.file_index = r.Get<uint32_t>();
  sb.store_id = r.Get<uint64_t>();
  sb.num_files = r.Get<uint32_t>();
  r.Get<uint32_t>();
  sb.file_bytes = r.Get<uint64_t>();
  return sb;
}

std::vector<uint8_t> EncodeHeader(uint64_t seq, const HeaderRecord& h) {
  Writer w;
  w.Put<uint64_t>(h.store_id);
  w.Put<uint32_t>(h.num_files);
  w.Put<uint32_t>(0);
  w.Put<uint64_t>(h.file_bytes);
  return Frame(RecordType::kHeader, seq, std::move(w.bytes()));
}

Result<HeaderRecord> DecodeHeader(std::span<const uint8_t> payload) {
  Reader r(payload);
  HeaderRecord h;
  h.store_id = r.Get<uint64_t>();
  h.num_files = r.Get<uint32_t>();
  r.Get<uint32_t>();
  h.file_bytes = r.Get<uint64_t>();
  if (!r.ok()) return Status::Corruption("journal header record truncated");
  return h;
}

std::vector<uint8_t> EncodeSegment(uint64_t seq, const SegmentRecord& s) {
  Writer w;
  w.Put<uint64_t>(s.scope_uid);
  w.Put<uint32_t>(s.segment_no);
  w.Put<uint32_t>(s.num_blocks);
  w.Put<uint32_t>(s.layout.num_layers);
  w.Put<uint32_t>(s.layout.num_planes);
  w.Put<uint64_t>(s.layout.slice_bytes);
  w.Put<uint64_t>(s.base);
  w.Put<uint64_t>(s.run_stride);
  w.Put<uint64_t>(s.bytes);
  w.Put<uint32_t>(s.turns);
  w.Put<uint32_t>(static_cast<uint32_t>(s.session.size()));
  w.Put<uint64_t>(s.context_tokens);
  w.PutBytes(s.session.data(), s.session.size());
  for (const Key& k : s.keys) {
    w.Put<uint64_t>(k.hi);
    w.Put<uint64_t>(k.lo);
  }
  for (uint64_t c : s.checksums) w.Put<uint64_t>(c);
  return Frame(RecordType::kSegment, seq, std::move(w.bytes()));
}

Result<SegmentRecord> DecodeSegment(std::span<const uint8_t> payload) {
  Reader r(payload);
  SegmentRecord s;
  s.scope_uid = r.Get<uint64_t>();
  s.segment_no = r.Get<uint32_t>();
  s.num_blocks = r.Get<uint32_t>();
  s.layout.num_layers = r.Get<uint32_t>();
  s.layout.num_planes = r.Get<uint32_t>();
  s.layout.slice_bytes = r.Get<uint64_t>();
  s.base = r.Get<uint64_t>();
  s.run_stride = r.Get<uint64_t>();
  s.bytes = r.Get<uint64_t>();
  s.turns = r.Get<uint32_t>();
  const uint32_t session_len = r.Get<uint32_t>();
  s.context_tokens = r.Get<uint64_t>();
  if (!r.ok() || session_len > r.remaining() ||
      uint64_t{s.num_blocks} * 24 != r.remaining() - session_len) {
    return Status::Corruption("segment record has inconsistent lengths");
  }
  auto name = r.GetBytes(session_len);
  s.session.assign(reinterpret_cast<const char*>(name.data()), name.size());
  s.keys.resize(s.num_blocks);
  s.checksums.resize(s.num_blocks);
  for (Key& k : s.keys) {
    k.hi = r.Get<uint64_t>();
    k.lo = r.Get<uint64_t>();
  }
  for (uint64_t& c : s.checksums) c = r.Get<uint64_t>();
  FC_RETURN_IF_ERROR(ValidateKvLayout(s.layout).WithContext("segment record"));
  if (s.num_blocks == 0 || s.bytes == 0) return Status::Corruption("segment record is empty");
  return s;
}

std::vector<uint8_t> EncodeFreeScope(uint64_t seq, uint64_t scope_uid) {
  Writer w;
  w.Put<uint64_t>(scope_uid);
  return Frame(RecordType::kFreeScope, seq, std::move(w.bytes()));
}

Result<uint64_t> DecodeFreeScope(std::span<const uint8_t> payload) {
  Reader r(payload);
  const uint64_t uid = r.Get<uint64_t>();
  if (!r.ok()) return Status::Corruption("free-scope record truncated");
  return uid;
}

std::vector<uint8_t> EncodeClear(uint64_t seq) { return Frame(RecordType::kClear, seq, {}); }

ScanResult ScanRecords(std::span<const uint8_t> journal) {
  ScanResult out;
  uint64_t off = 0;
  uint64_t bad_from = UINT64_MAX;
  while (off + kRecordHeaderBytes <= journal.size()) {
    RecordView v;
    uint64_t len = 0;
    if (RecordAt(journal, off, &v, &len)) {
      if (bad_from != UINT64_MAX) {
        out.skipped++;
        out.skipped_bytes += off - bad_from;
        out.damaged.push_back({bad_from, off - bad_from});
        bad_from = UINT64_MAX;
      }
      out.records.push_back(v);
      off += len;
      out.end = off;
      continue;
    }
    if (bad_from == UINT64_MAX) bad_from = off;
    off += kRecordAlign;
  }
  if (bad_from != UINT64_MAX || out.end < journal.size()) {
    const uint64_t from = bad_from != UINT64_MAX ? bad_from : out.end;
    if (journal.size() > from) {
      out.skipped++;
      out.skipped_bytes += journal.size() - from;
      out.damaged.push_back({from, journal.size() - from});
    }
  }
  return out;
}

}  // namespace flatcake::durable
