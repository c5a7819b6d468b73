#include "store/pool_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "flatcake/store.h"
#include "media/durable_format.h"
#include "media/ssd_file_pool.h"
#include "store/segment_layout.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake {
namespace {

constexpr KvLayout kLayout{4, 2, 8 * 1024};  // 64 KiB blocks, 32 KiB runs
constexpr int kSessions = 3;
constexpr int kBlocks = 4;

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void Overwrite(const std::string& path, uint64_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
  close(fd);
}

// A pool of kSessions sessions of kBlocks SSD blocks each (one segment per session), written
// through the store and closed; the tests damage it by hand and check it offline.
class PoolCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    dirs_ = {dir_.path()};
    WritePool();
  }

  StoreOptions Options() const {
    StoreOptions o;
    o.dram_bytes = 16 * kMiB;
    o.ssd_dirs = dirs_;
    o.ssd_bytes = 16 * kMiB;
    o.ssd_file_bytes = 4 * kMiB;
    o.max_scopes = 64;
    o.io_engine = IoEngineKind::kPosix;
    o.sync = SyncMode::kNone;
    return o;
  }

  void WritePool() {
    auto store = Store::Open(Options());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int s = 0; s < kSessions; ++s) {
      keys_.push_back(MakeKeys(s + 1, 0, kBlocks));
      HostBlocks src(kLayout, kBlocks);
      src.Fill(keys_[s]);
      WriteHints h;
      h.session = "s" + std::to_string(s);
      h.force_medium = MediaType::kSsd;
      auto r = (*store)->Put(keys_[s], kLayout, src.buffers(), h);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->written, static_cast<uint32_t>(kBlocks));
      ASSERT_EQ(r->segments, 1u);
    }
  }

  PoolCheckReport Check(bool deep, bool repair = false) {
    auto r = CheckPool(PoolCheckOptions{dirs_, deep, repair});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : PoolCheckReport{};
  }

  std::string JournalPath() const { return dirs_.front() + "/" + durable::kJournalName; }

  // Session `session`'s commit record and its offset in the journal, read independently of the
  // checker.
  std::pair<durable::SegmentRecord, uint64_t> RecordOf(const std::string& session) {
    const std::vector<uint8_t> j = ReadFile(JournalPath());
    for (const durable::RecordView& v : durable::ScanRecords(j).records) {
      if (v.type != durable::RecordType::kSegment) continue;
      auto seg = durable::DecodeSegment(v.payload);
      if (seg.ok() && seg->session == session) return {*seg, v.offset};
    }
    ADD_FAILURE() << "no record of " << session;
    return {};
  }

  // Reopens the store and counts, per session, the blocks it serves; every served block must be
  // byte-exact.
  std::vector<uint32_t> ServedPerSession(uint64_t* skipped_records = nullptr) {
    auto store = Store::Open(Options());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    std::vector<uint32_t> hits;
    if (!store.ok()) return hits;
    if (skipped_records) *skipped_records = (*store)->GetInfo().skipped_records;
    std::vector<uint8_t> want(kLayout.block_bytes());
    for (int s = 0; s < kSessions; ++s) {
      HostBlocks dst(kLayout, kBlocks);
      auto r = (*store)->Get(keys_[s], kLayout, dst.buffers());
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) return hits;
      for (int b = 0; b < kBlocks; ++b) {
        if (!r->found[b]) continue;
        FillBlock(keys_[s][b], want.data(), want.size());
        EXPECT_EQ(0, std::memcmp(want.data(), dst.block(b), want.size())) << s << "/" << b;
      }
      hits.push_back(r->hits);
    }
    return hits;
  }

  TempDir dir_{"flatcake-fsck-test"};
  std::vector<std::string> dirs_;
  std::vector<std::vector<Key>> keys_;
};

TEST_F(PoolCheckTest, PoolWrittenByTheStoreIsCleanDownToEveryBlock) {
  const PoolCheckReport r = Check(/*deep=*/true);
  EXPECT_TRUE(r.clean()) << (r.damaged.empty() ? "" : r.damaged[0].detail);
  EXPECT_EQ(r.files, 4u);
  EXPECT_EQ(r.intact_superblocks, 4u);
  EXPECT_EQ(r.records, 1u + kSessions);  // the header, one commit record per session
  EXPECT_EQ(r.skipped_records, 0u);
  EXPECT_EQ(r.live_scopes, static_cast<uint64_t>(kSessions));
  EXPECT_EQ(r.live_segments, static_cast<uint64_t>(kSessions));
  EXPECT_EQ(r.live_blocks, static_cast<uint64_t>(kSessions * kBlocks));
  EXPECT_EQ(r.live_bytes, kSessions * kBlocks * kLayout.block_bytes());
  EXPECT_EQ(r.blocks_checked, r.live_blocks);
  EXPECT_EQ(r.bad_blocks, 0u);
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_TRUE(r.notes.empty()) << r.notes[0];
}

TEST_F(PoolCheckTest, OverwrittenBlockIsNamedAndRepairDropsItsSegment) {
  const auto [rec, record_offset] = RecordOf("s1");
  const SegmentLayout sl(rec.layout, rec.num_blocks);
  // Block 2's slice (layer 1, plane 1), in the middle.
  const uint64_t at = rec.base + sl.SliceOffset(1, 1, 2);
  const std::string file = SsdFilePool::FilePath(dirs_, static_cast<uint32_t>(at / (4 * kMiB)));
  Overwrite(file, durable::kSuperblockBytes + at % (4 * kMiB) + 100, "overwritten by hand");

  EXPECT_TRUE(Check(/*deep=*/false).clean()) << "the journal and extents are intact";
  PoolCheckReport r = Check(/*deep=*/true);
  ASSERT_EQ(r.damaged.size(), 1u);
  const PoolDamage& d = r.damaged[0];
  EXPECT_EQ(d.what, "block");
  EXPECT_EQ(d.file, file);
  EXPECT_EQ(d.offset, durable::kSuperblockBytes + (rec.base + sl.BlockOffset(2)) % (4 * kMiB));
  ASSERT_TRUE(d.key.has_value());
  EXPECT_EQ(*d.key, keys_[1][2]);
  EXPECT_NE(d.detail.find(KeyToHex(keys_[1][2])), std::string::npos) << d.detail;
  EXPECT_EQ(r.bad_blocks, 1u);

  r = Check(/*deep=*/true, /*repair=*/true);
  EXPECT_TRUE(r.repaired);
  ASSERT_EQ(r.dropped.size(), 1u);
  EXPECT_NE(r.dropped[0].find("journal offset " + std::to_string(record_offset)), std::string::npos)
      << r.dropped[0];
  r = Check(/*deep=*/true);
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.live_segments, static_cast<uint64_t>(kSessions - 1));
  uint64_t skipped = 1;
  EXPECT_EQ(ServedPerSession(&skipped), (std::vector<uint32_t>{kBlocks, 0, kBlocks}));
  EXPECT_EQ(skipped, 0u);
}

TEST_F(PoolCheckTest, DamagedJournalRecordIsNamedAndRepairDropsIt) {
  const auto [rec, record_offset] = RecordOf("s2");
  Overwrite(JournalPath(), record_offset + durable::kRecordHeaderBytes + 20, "\x5a\x5a");
  PoolCheckReport r = Check(/*deep=*/false);
  ASSERT_EQ(r.damaged.size(), 1u);
  EXPECT_EQ(r.damaged[0].what, "record");
  EXPECT_EQ(r.damaged[0].file, JournalPath());
  EXPECT_EQ(r.damaged[0].offset, record_offset);
  EXPECT_NE(r.damaged[0].detail.find("segment record"), std::string::npos) << r.damaged[0].detail;
  EXPECT_EQ(r.skipped_records, 1u);
  uint64_t skipped = 0;
  EXPECT_EQ(ServedPerSession(&skipped), (std::vector<uint32_t>{kBlocks, kBlocks, 0}))
      << "recovery skips it too";
  EXPECT_EQ(skipped, 1u);
}

TEST_F(PoolCheckTest, RepairOfADamagedRecordLeavesTheRestServed) {
  const auto [rec, record_offset] = RecordOf("s0");
  Overwrite(JournalPath(), record_offset + durable::kRecordHeaderBytes + 20, "\x5a\x5a");
  PoolCheckReport r = Check(/*deep=*/true, /*repair=*/true);
  EXPECT_TRUE(r.repaired);
  EXPECT_TRUE(r.not_repaired.empty());
  EXPECT_EQ(r.dropped.size(), 1u);
  r = Check(/*deep=*/true);
  EXPECT_TRUE(r.clean()) << (r.damaged.empty() ? "" : r.damaged[0].detail);
  EXPECT_EQ(r.records, static_cast<uint64_t>(kSessions));  // the header and two records
  uint64_t skipped = 1;
  EXPECT_EQ(ServedPerSession(&skipped), (std::vector<uint32_t>{0, kBlocks, kBlocks}));
  EXPECT_EQ(skipped, 0u);
}

TEST_F(PoolCheckTest, TornTailIsDamageAndRepairCutsIt) {
  std::vector<uint8_t> j = ReadFile(JournalPath());
  const auto [rec, record_offset] = RecordOf("s2");  // the last record
  j.resize(record_offset + 40);
  WriteFile(JournalPath(), j);
  PoolCheckReport r = Check(/*deep=*/false, /*repair=*/true);
  ASSERT_EQ(r.damaged.size(), 1u);
  EXPECT_EQ(r.damaged[0].offset, record_offset);
  EXPECT_NE(r.damaged[0].detail.find("journal's end"), std::string::npos) << r.damaged[0].detail;
  EXPECT_TRUE(r.repaired);
  EXPECT_TRUE(Check(/*deep=*/true).clean());
  EXPECT_EQ(ServedPerSession(), (std::vector<uint32_t>{kBlocks, kBlocks, 0}));
}

TEST_F(PoolCheckTest, OverlappingExtentsGoToTheNewerRecord) {
  // A later scope's commit record for s0's very extent (and keys and checksums): the one a lost
  // free record would leave behind. Recovery keeps the newer.
  auto [rec, record_offset] = RecordOf("s0");
  rec.scope_uid += 100;
  rec.session = "s0-again";
  std::vector<uint8_t> j = ReadFile(JournalPath());
  const std::vector<uint8_t> more = durable::EncodeSegment(1000, rec);
  j.insert(j.end(), more.begin(), more.end());
  WriteFile(JournalPath(), j);

  PoolCheckReport r = Check(/*deep=*/true);
  ASSERT_EQ(r.damaged.size(), 1u);
  EXPECT_EQ(r.damaged[0].what, "overlap");
  EXPECT_NE(r.damaged[0].detail.find("journal offset " + std::to_string(record_offset)),
            std::string::npos)
      << r.damaged[0].detail;
  EXPECT_EQ(r.overlaps, 1u);
  EXPECT_EQ(r.live_segments, static_cast<uint64_t>(kSessions));
  EXPECT_EQ(r.bad_blocks, 0u);
  r = Check(/*deep=*/true, /*repair=*/true);
  EXPECT_TRUE(r.repaired);
  EXPECT_TRUE(Check(/*deep=*/true).clean());
  uint64_t skipped = 1;
  EXPECT_EQ(ServedPerSession(&skipped), (std::vector<uint32_t>{kBlocks, kBlocks, kBlocks}));
  EXPECT_EQ(skipped, 0u);
}

TEST_F(PoolCheckTest, DamagedSuperblockIsNotRepairable) {
  const std::string file = SsdFilePool::FilePath(dirs_, 2);
  Overwrite(file, 40, "garbage");
  const std::vector<uint8_t> journal = ReadFile(JournalPath());
  PoolCheckReport r = Check(/*deep=*/true, /*repair=*/true);
  ASSERT_EQ(r.damaged.size(), 1u);
  EXPECT_EQ(r.damaged[0].what, "superblock");
  EXPECT_EQ(r.damaged[0].file, file);
  EXPECT_NE(r.damaged[0].detail.find("checksum"), std::string::npos) << r.damaged[0].detail;
  EXPECT_FALSE(r.repaired);
  EXPECT_FALSE(r.not_repaired.empty());
  EXPECT_EQ(ReadFile(JournalPath()), journal) << "the journal is left as it was";
  EXPECT_FALSE(Store::Open(Options()).ok()) << "a store refuses the pool too";
}

TEST_F(PoolCheckTest, PoolInUseAndDirectoriesWithoutAPoolAreRefused) {
  {
    auto store = Store::Open(Options());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto r = CheckPool(PoolCheckOptions{dirs_, false, false});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kBusy) << r.status().ToString();
  }
  TempDir empty("flatcake-fsck-empty");
  auto r = CheckPool(PoolCheckOptions{{empty.path()}, false, false});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  EXPECT_NE(access(empty.File("flatcake.lock").c_str(), F_OK), 0) << "no lock file left behind";
}

TEST(PoolCheck, DirectoriesInAnotherOrderAreNamed) {
  TempDir a("flatcake-fsck-a"), b("flatcake-fsck-b");
  StoreOptions o;
  o.dram_bytes = 16 * kMiB;
  o.ssd_dirs = {a.path(), b.path()};
  o.ssd_bytes = 8 * kMiB;
  o.ssd_file_bytes = 4 * kMiB;
  o.io_engine = IoEngineKind::kPosix;
  ASSERT_TRUE(Store::Open(o).ok());
  auto ok = CheckPool(PoolCheckOptions{{a.path(), b.path()}, true, false});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->clean());
  auto r = CheckPool(PoolCheckOptions{{b.path(), a.path()}, false, false});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->clean());
  EXPECT_EQ(r->damaged[0].what, "file");
  EXPECT_NE(r->damaged[0].detail.find("ssd_dirs order"), std::string::npos) << r->damaged[0].detail;
}

}  // namespace
}  // namespace flatcake
