// The store's two halves apart (store/data_plan.h): leases of the metadata half (ReserveWrite,
// PublishWrite, AbortWrite, PinRead, Unpin, ReleaseOwner) served to a data half that reaches the
// media the way another process does, through its own mapping of the shared arena, its own
// descriptors of the pool files and its own I/O engine (testing/media_client.h); the embedded
// Put and Restore seeing exactly what those leases leave; and FC-MAS admitting such a client's
// reads (AdmitRead, FinishRead) into the same read window as the store's own restores.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "store/flat_store.h"
#include "store/pinned_read.h"
#include "store/segment_writer.h"
#include "testing/media_client.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"
#include "util/temp_dir.h"
#include "util/thread_annotations.h"

namespace flatcake {
namespace {

constexpr KvLayout kLayout{4, 2, 8 * 1024};  // 64 KiB blocks

using testing::AllOf;

WriteHints On(MediaType m) {
  WriteHints h;
  h.force_medium = m;
  return h;
}

void PutEmbedded(FlatStore& s, const std::vector<Key>& keys, MediaType m) {
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  auto r = s.Put(keys, kLayout, src.buffers(), On(m));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->medium, m);
}

// A store opened shared over a test directory, and a client of it.
class StoreSplitTest : public ::testing::Test {
 protected:
  StoreSplitTest() { Reopen(testing::SmallStoreOptions(dir_.path())); }

  // Closes the store (and the client) and opens it again with `o`.
  void Reopen(const StoreOptions& o) {
    client_.reset();
    store_.reset();
    auto r = FlatStore::OpenShared(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    store_ = std::move(*r);
    client_ = std::make_unique<testing::MediaClient>(store_->shared_media());
  }
  std::vector<uint8_t> Served(const std::vector<Key>& keys) {
    return testing::ServedBlocks(*store_, keys, kLayout);
  }
  // A reservation of `keys` on `m` for `owner`, which must succeed.
  WriteReservation Reserve(uint64_t owner, const std::vector<Key>& keys, MediaType m) {
    auto r = store_->ReserveWrite(owner, keys, kLayout, On(m));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : WriteReservation{};
  }

  TempDir dir_;
  std::unique_ptr<FlatStore> store_;
  std::unique_ptr<testing::MediaClient> client_;
};

TEST_F(StoreSplitTest, SharedMediaNameTheArenaAndThePool) {
  const SharedMedia m = store_->shared_media();
  EXPECT_GE(m.dram_fd, 0);
  EXPECT_EQ(m.dram_bytes, 8 * kMiB);
  EXPECT_EQ(m.ssd.num_files(), 8u);
  EXPECT_EQ(m.ssd.file_bytes, 4 * kMiB);
  EXPECT_EQ(store_->GetInfo().dram_backing, "memfd (shared)");
  // The embedded store keeps its anonymous arena, which no other process can map.
  TempDir other;
  auto embedded = FlatStore::OpenWithEngine(testing::SmallStoreOptions(other.path()), nullptr);
  ASSERT_TRUE(embedded.ok());
  EXPECT_EQ((*embedded)->shared_media().dram_fd, -1);
  EXPECT_EQ((*embedded)->GetInfo().dram_backing, "anonymous");
}

TEST_F(StoreSplitTest, AClientsWritesArePublishedAndTheEmbeddedRestoreReadsThem) {
  // 80 blocks of 64 KiB on SSD outgrow one 4 MiB pool file: more than one segment.
  const std::vector<std::pair<MediaType, uint64_t>> cases = {{MediaType::kDram, 20},
                                                             {MediaType::kSsd, 80}};
  for (auto [medium, n] : cases) {
    SCOPED_TRACE(medium == MediaType::kSsd ? "SSD" : "DRAM");
    const auto keys = MakeKeys(1 + static_cast<int>(medium), 0, n);
    const WriteReservation r = Reserve(/*owner=*/7, keys, medium);
    EXPECT_NE(r.id, 0u);
    EXPECT_EQ(r.medium, medium);
    EXPECT_EQ(r.already_present, 0u);
    EXPECT_EQ(r.present, AllOf(n, 0));
    ASSERT_EQ(r.blocks.size(), n);
    if (medium == MediaType::kSsd) EXPECT_GT(r.segments.size(), 1u);
    uint32_t held = 0;
    for (const ReservedSegment& seg : r.segments) {
      EXPECT_EQ(seg.medium, medium);
      EXPECT_EQ(seg.first_block, held);
      held += seg.num_blocks;
    }
    EXPECT_EQ(held, n);
    // Reserved is not visible, even once written.
    const std::vector<uint64_t> sums = client_->Write(r, keys);
    EXPECT_EQ(store_->Exists(keys), 0u);
    EXPECT_EQ(Served(keys), AllOf(n, 0));
    ASSERT_TRUE(store_->PublishWrite(7, r.id, sums).ok());
    EXPECT_EQ(store_->Exists(keys), n);
    EXPECT_EQ(Served(keys), AllOf(n, 1));
    // A lease ends once.
    EXPECT_TRUE(store_->PublishWrite(7, r.id, sums).IsNotFound());
  }
  const StoreStats st = store_->GetStats();
  EXPECT_EQ(st.blocks_written, 100u);
  EXPECT_EQ(st.dram.written_bytes, st.dram.admitted_bytes);
  EXPECT_EQ(st.ssd.written_bytes, st.ssd.admitted_bytes);
}

TEST_F(StoreSplitTest, AnAbortedOrReleasedReservationLeavesNothingAndItsSpaceIsReused) {
  const auto keys = MakeKeys(3, 0, 10);
  for (MediaType medium : {MediaType::kDram, MediaType::kSsd}) {
    SCOPED_TRACE(medium == MediaType::kSsd ? "SSD" : "DRAM");
    auto used = [&] {
      const StoreStats st = store_->GetStats();
      return medium == MediaType::kDram ? st.dram.used_bytes : st.ssd.used_bytes;
    };
    const uint64_t before = used();
    const WriteReservation r = Reserve(1, keys, medium);
    EXPECT_GT(used(), before);
    const std::vector<uint64_t> sums = client_->Write(r, keys);
    // Another owner cannot end it.
    EXPECT_TRUE(store_->PublishWrite(2, r.id, sums).IsNotFound());
    EXPECT_TRUE(store_->AbortWrite(2, r.id).IsNotFound());
    ASSERT_TRUE(store_->AbortWrite(1, r.id).ok());
    EXPECT_EQ(used(), before);
    EXPECT_EQ(store_->Exists(keys), 0u);
    EXPECT_EQ(Served(keys), AllOf(keys.size(), 0));
    EXPECT_TRUE(store_->PublishWrite(1, r.id, sums).IsNotFound()) << "aborted stays aborted";

    // The keys are free again and the extent is taken again, for a write that dies with its
    // owner.
    const WriteReservation again = Reserve(1, keys, medium);
    EXPECT_EQ(again.already_present, 0u);
    EXPECT_EQ(again.segments.front().base, r.segments.front().base);
    client_->Write(again, keys);
    const FlatStore::ReleasedLeases released = store_->ReleaseOwner(1);
    EXPECT_EQ(released.writes, 1u);
    EXPECT_EQ(released.pins, 0u);
    EXPECT_EQ(used(), before);
    EXPECT_EQ(Served(keys), AllOf(keys.size(), 0));
    EXPECT_TRUE(store_->PublishWrite(1, again.id, sums).IsNotFound());
  }
  // The embedded store writes the same keys as if nothing had happened.
  PutEmbedded(*store_, keys, MediaType::kSsd);
  EXPECT_EQ(Served(keys), AllOf(keys.size(), 1));
}

TEST_F(StoreSplitTest, WritersOfTheSameKeysSeeThemAsAlreadyPresent) {
  const auto keys = MakeKeys(4, 0, 8);
  const WriteReservation first = Reserve(1, keys, MediaType::kSsd);
  // Being written: a second lease and the embedded Put skip every key.
  const WriteReservation second = Reserve(2, keys, MediaType::kSsd);
  EXPECT_EQ(second.id, 0u);
  EXPECT_EQ(second.already_present, 8u);
  EXPECT_EQ(second.present, AllOf(8, 1));
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  auto put = store_->Put(keys, kLayout, src.buffers(), On(MediaType::kDram));
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->already_present, 8u);
  EXPECT_EQ(put->written, 0u);
  // A batch that overlaps writes only its new keys.
  std::vector<Key> wider = keys;
  const auto more = MakeKeys(4, 100, 3);
  wider.insert(wider.begin() + 2, more.begin(), more.end());
  const WriteReservation third = Reserve(3, wider, MediaType::kDram);
  EXPECT_EQ(third.already_present, 8u);
  EXPECT_EQ(third.blocks, (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(third.present, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  ASSERT_TRUE(store_->PublishWrite(3, third.id, client_->Write(third, wider)).ok());
  ASSERT_TRUE(store_->PublishWrite(1, first.id, client_->Write(first, keys)).ok());
  EXPECT_EQ(Served(wider), AllOf(wider.size(), 1));

  // Many writers at once: each key is written by exactly one of them.
  const auto contested = MakeKeys(5, 0, 32);
  std::vector<WriteReservation> got(4);
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = Reserve(10 + t, contested, MediaType::kDram); });
  }
  for (auto& t : threads) t.join();
  std::multiset<uint32_t> writers;
  for (const WriteReservation& r : got) writers.insert(r.blocks.begin(), r.blocks.end());
  EXPECT_EQ(writers.size(), contested.size());
  EXPECT_EQ(std::set<uint32_t>(writers.begin(), writers.end()).size(), contested.size());
  for (const WriteReservation& r : got) {
    ASSERT_TRUE(store_->PublishWrite(r.owner, r.id, client_->Write(r, contested)).ok());
  }
  EXPECT_EQ(Served(contested), AllOf(contested.size(), 1));
}

TEST_F(StoreSplitTest, AClientReadsPinnedHitsWithItsOwnEngineAndVerifiesThem) {
  const auto dram = MakeKeys(6, 0, 10), ssd = MakeKeys(7, 0, 30);
  PutEmbedded(*store_, dram, MediaType::kDram);
  PutEmbedded(*store_, ssd, MediaType::kSsd);
  std::vector<Key> keys = {dram[1], ssd[4], KeyFromId(99, 99), dram[0], ssd[29], ssd[0]};

  auto pin = store_->PinRead(5, keys, kLayout);
  ASSERT_TRUE(pin.ok()) << pin.status().ToString();
  EXPECT_NE(pin->id, 0u);
  ASSERT_EQ(pin->hits.size(), 5u);
  EXPECT_TRUE(GvaIsSsd(pin->slowest_gva));
  EXPECT_EQ(pin->ssd_bytes, 3 * kLayout.block_bytes());
  EXPECT_EQ(pin->hits[1].key, 1u);
  EXPECT_EQ(pin->hits[1].medium, MediaType::kSsd);
  EXPECT_EQ(pin->hits[2].key, 3u);
  EXPECT_EQ(pin->hits[2].medium, MediaType::kDram);
  GetResult r = client_->Read(*pin, keys);
  EXPECT_EQ(r.found, (std::vector<uint8_t>{1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(r.leading_hits, 2u);
  EXPECT_EQ(r.bytes_from_ssd, 3 * kLayout.block_bytes());
  EXPECT_EQ(r.bytes_from_dram, 2 * kLayout.block_bytes());
  EXPECT_GT(r.ssd_reads, 0u);
  EXPECT_TRUE(store_->Unpin(7, pin->id).IsNotFound()) << "another owner's pin";
  ASSERT_TRUE(store_->Unpin(5, pin->id).ok());
  EXPECT_TRUE(store_->Unpin(5, pin->id).IsNotFound());

  // A block whose bytes changed in the arena is a miss for the client, counted corrupt.
  auto one = store_->PinRead(5, std::vector<Key>{dram[2]}, kLayout);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->hits.size(), 1u);
  client_->arena()[one->hits[0].offset + 100] ^= 0xFF;
  r = client_->Read(*one, {dram[2]});
  EXPECT_EQ(r.found, AllOf(1, 0));
  EXPECT_EQ(r.corrupt, 1u);
  ASSERT_TRUE(store_->Unpin(5, one->id).ok());

  // A pin of nothing holds nothing; a layout other than the stored one pins nothing.
  auto none = store_->PinRead(5, MakeKeys(98, 0, 3), kLayout);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->id, 0u);
  EXPECT_TRUE(store_->Unpin(5, 0).ok());
  EXPECT_TRUE(store_->PinRead(5, dram, KvLayout{4, 2, 4096}).status().IsInvalidArgument());
  EXPECT_EQ(store_->ReleaseOwner(5).pins, 0u);
}

TEST_F(StoreSplitTest, ReleasingAnOwnerDropsItsPinsSoReclamationCanTakeTheScope) {
  const auto keys = MakeKeys(8, 0, 12);
  PutEmbedded(*store_, keys, MediaType::kDram);
  auto pin = store_->PinRead(9, keys, kLayout);
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(store_->PinRead(9, std::vector<Key>{keys[0]}, kLayout).ok());
  EXPECT_EQ(store_->Reclaim(MediaType::kDram, 0.0), 0u) << "pinned";
  EXPECT_EQ(store_->Exists(keys), keys.size());
  const FlatStore::ReleasedLeases released = store_->ReleaseOwner(9);
  EXPECT_EQ(released.pins, 2u);
  EXPECT_GT(store_->Reclaim(MediaType::kDram, 0.0), 0u);
  EXPECT_EQ(store_->Exists(keys), 0u);
  EXPECT_TRUE(store_->Unpin(9, pin->id).IsNotFound());
}

TEST_F(StoreSplitTest, OnlyPublishedReservationsSurviveAReopen) {
  const auto published = MakeKeys(10, 0, 16), unpublished = MakeKeys(11, 0, 16);
  const WriteReservation a = Reserve(1, unpublished, MediaType::kSsd);
  client_->Write(a, unpublished);  // written, never published: the writer dies
  const WriteReservation b = Reserve(2, published, MediaType::kSsd);
  ASSERT_TRUE(store_->PublishWrite(2, b.id, client_->Write(b, published)).ok());
  Reopen(testing::SmallStoreOptions(dir_.path()));
  ASSERT_TRUE(store_->GetInfo().recovered);
  EXPECT_EQ(Served(published), AllOf(16, 1));
  EXPECT_EQ(Served(unpublished), AllOf(16, 0));
  EXPECT_EQ(store_->GetStats().ssd.used_bytes, 16 * kLayout.block_bytes());
  // Its extent is free space after the restart.
  EXPECT_EQ(Reserve(1, unpublished, MediaType::kSsd).segments.front().base,
            a.segments.front().base);
}

TEST_F(StoreSplitTest, AReservationInForceOutlivesAnIndexCompaction) {
  StoreOptions o = testing::SmallStoreOptions(dir_.path());
  o.index_capacity = 256;
  Reopen(o);
  const auto keys = MakeKeys(12, 0, 8);
  const WriteReservation r = Reserve(1, keys, MediaType::kSsd);
  // Churn: blocks written and reclaimed leave tombstones until the index is compacted.
  for (uint64_t round = 0; store_->GetStats().index_compactions == 0; ++round) {
    ASSERT_LT(round, 100u) << "no compaction";
    PutEmbedded(*store_, MakeKeys(13, round * 16, 16), MediaType::kDram);
    store_->Reclaim(MediaType::kDram, 0.0);
  }
  // Still being written: others skip its keys; then it publishes as if nothing happened.
  EXPECT_EQ(Reserve(2, keys, MediaType::kDram).already_present, keys.size());
  EXPECT_EQ(store_->Exists(keys), 0u);
  ASSERT_TRUE(store_->PublishWrite(1, r.id, client_->Write(r, keys)).ok());
  EXPECT_EQ(Served(keys), AllOf(keys.size(), 1));
}

TEST_F(StoreSplitTest, TheDataHalvesRefuseAddressesOutsideTheirMedia) {
  const auto keys = MakeKeys(14, 0, 4);
  const WriteReservation r = Reserve(1, keys, MediaType::kDram);
  WriteReservation bad = r;
  bad.segments[0].base = 8 * kMiB - 4096;  // runs past the arena's end
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  SegmentWriter writer(client_->access(), nullptr);
  std::vector<uint64_t> sums;
  EXPECT_TRUE(writer.WriteAll(bad, src.buffers(), &sums).IsInvalidArgument());
  bad = r;
  bad.segments[0].plane_stride += 4096;  // not this layout's geometry
  EXPECT_TRUE(writer.WriteAll(bad, src.buffers(), &sums).IsInvalidArgument());
  bad = r;
  bad.blocks[0] = 99;  // not a block of the batch
  EXPECT_TRUE(writer.WriteAll(bad, src.buffers(), &sums).IsInvalidArgument());
  ASSERT_TRUE(store_->PublishWrite(1, r.id, client_->Write(r, keys)).ok());
  // Too few checksums publish nothing and end the reservation.
  const auto later = MakeKeys(14, 10, 2);
  const WriteReservation r2 = Reserve(1, later, MediaType::kDram);
  EXPECT_TRUE(store_->PublishWrite(1, r2.id, std::vector<uint64_t>(1)).IsInvalidArgument());
  EXPECT_EQ(store_->Exists(later), 0u);
  EXPECT_TRUE(store_->AbortWrite(1, r2.id).IsNotFound());

  auto pin = store_->PinRead(1, keys, kLayout);
  ASSERT_TRUE(pin.ok());
  ReadPin forged = *pin;
  forged.hits[0].offset = 8 * kMiB;
  HostBlocks dst(kLayout, keys.size());
  PinnedRead read(forged.layout, dst.buffers(), forged.hits, true);
  EXPECT_TRUE(read.Check(client_->access()).IsInvalidArgument());
  EXPECT_TRUE(read.Run(client_->access(), nullptr, keys.size()).status().IsInvalidArgument());
  EXPECT_EQ(store_->ReleaseOwner(1).pins, 1u);
}

// What AdmitRead tells an owner: each admission once, in the order they came.
class Admissions {
 public:
  std::function<void(Status)> For(int pin) {
    return [this, pin](Status st) {
      MutexLock lock(mu_);
      told_.emplace_back(pin, st);
      cv_.NotifyAll();
    };
  }
  // The statuses told to `pin` so far.
  std::vector<Status> Of(int pin) {
    MutexLock lock(mu_);
    std::vector<Status> out;
    for (const auto& [p, st] : told_) {
      if (p == pin) out.push_back(st);
    }
    return out;
  }
  // Waits (at most 10 s) until `pin` was told something.
  bool Await(int pin) {
    MutexLock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      for (const auto& [p, st] : told_) {
        if (p == pin) return true;
      }
      if (!cv_.WaitUntil(mu_, deadline)) return false;
    }
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<std::pair<int, Status>> told_ GUARDED_BY(mu_);
};

// FC-MAS for pins whose bytes their owner reads: the read window holds one session's SSD bytes,
// so a second SSD pin waits until the first one's reads are done.
class RemoteAdmissionTest : public StoreSplitTest {
 protected:
  static constexpr uint64_t kBlocks = 16;

  RemoteAdmissionTest() {
    StoreOptions o = testing::SmallStoreOptions(dir_.path());
    o.read_window_bytes = kBlocks * kLayout.block_bytes();
    Reopen(o);
    for (uint64_t ns = 20; ns < 23; ++ns) {
      sessions_.push_back(MakeKeys(ns, 0, kBlocks));
      PutEmbedded(*store_, sessions_.back(), MediaType::kSsd);
    }
    dram_ = MakeKeys(23, 0, 4);
    PutEmbedded(*store_, dram_, MediaType::kDram);
  }
  ReadPin Pin(uint64_t owner, const std::vector<Key>& keys) {
    auto pin = store_->PinRead(owner, keys, kLayout);
    EXPECT_TRUE(pin.ok()) << pin.status().ToString();
    return pin.ok() ? *pin : ReadPin{};
  }

  std::vector<std::vector<Key>> sessions_;  // on SSD
  std::vector<Key> dram_;
  Admissions told_;
};

TEST_F(RemoteAdmissionTest, SsdPinsWaitForTheWindowAndDramPinsDoNot) {
  const ReadPin a = Pin(1, sessions_[0]), b = Pin(1, sessions_[1]), d = Pin(1, dram_);
  ASSERT_TRUE(store_->AdmitRead(1, a.id, kArrivalNow, told_.For(0)).ok());
  ASSERT_EQ(told_.Of(0).size(), 1u) << "the window was empty: admitted before AdmitRead returned";
  EXPECT_TRUE(told_.Of(0)[0].ok());
  ASSERT_TRUE(store_->AdmitRead(1, b.id, kArrivalNow, told_.For(1)).ok());
  EXPECT_TRUE(store_->AdmitRead(1, b.id, kArrivalNow, told_.For(1)).IsInvalidArgument());
  EXPECT_TRUE(store_->FinishRead(1, b.id).IsInvalidArgument()) << "not admitted yet";
  // DRAM-ready: served at once, whatever waits for the window.
  ASSERT_TRUE(store_->AdmitRead(1, d.id, kArrivalNow, told_.For(2)).ok());
  ASSERT_EQ(told_.Of(2).size(), 1u);
  EXPECT_TRUE(told_.Of(2)[0].ok());
  EXPECT_EQ(client_->Read(d, dram_).hits, dram_.size());
  EXPECT_TRUE(store_->FinishRead(1, d.id).ok());
  EXPECT_TRUE(told_.Of(1).empty()) << "the window is full";
  EXPECT_EQ(store_->restore_queue_depth().waiting, 1u);   // b
  EXPECT_EQ(store_->restore_queue_depth().admitted, 1u);  // a

  // The first pin's reads are done: the second is admitted.
  EXPECT_EQ(client_->Read(a, sessions_[0]).hits, kBlocks);
  ASSERT_TRUE(store_->FinishRead(1, a.id).ok());
  ASSERT_TRUE(told_.Await(1));
  EXPECT_TRUE(told_.Of(1)[0].ok());
  EXPECT_EQ(client_->Read(b, sessions_[1]).hits, kBlocks);
  ASSERT_TRUE(store_->FinishRead(1, b.id).ok());
  for (const ReadPin* p : {&a, &b, &d}) EXPECT_TRUE(store_->Unpin(1, p->id).ok());
  EXPECT_EQ(told_.Of(0).size() + told_.Of(1).size() + told_.Of(2).size(), 3u) << "told once";
  EXPECT_EQ(store_->GetStats().restore_window_peak_bytes, kBlocks * kLayout.block_bytes());
}

TEST_F(RemoteAdmissionTest, AGivenUpPinLeavesTheQueueOrGivesItsWindowBack) {
  const ReadPin a = Pin(1, sessions_[0]), b = Pin(2, sessions_[1]), c = Pin(2, sessions_[2]);
  ASSERT_TRUE(store_->AdmitRead(1, a.id, kArrivalNow, told_.For(0)).ok());
  ASSERT_TRUE(store_->AdmitRead(2, b.id, kArrivalNow, told_.For(1)).ok());
  ASSERT_TRUE(store_->AdmitRead(2, c.id, kArrivalNow, told_.For(2)).ok());
  // Queued and unpinned: told Aborted, never admitted.
  ASSERT_TRUE(store_->Unpin(2, b.id).ok());
  ASSERT_EQ(told_.Of(1).size(), 1u);
  EXPECT_EQ(told_.Of(1)[0].code(), StatusCode::kAborted);
  // Admitted, and its owner dies before its reads are done: the window goes to the next one.
  EXPECT_EQ(store_->ReleaseOwner(1).pins, 1u);
  ASSERT_TRUE(told_.Await(2));
  EXPECT_TRUE(told_.Of(2)[0].ok());
  EXPECT_EQ(client_->Read(c, sessions_[2]).hits, kBlocks);
  ASSERT_TRUE(store_->FinishRead(2, c.id).ok());
  EXPECT_TRUE(store_->FinishRead(2, c.id).IsInvalidArgument()) << "finished already";
  EXPECT_EQ(store_->ReleaseOwner(2).pins, 1u);
  EXPECT_EQ(told_.Of(0).size(), 1u);
  EXPECT_EQ(told_.Of(1).size(), 1u);
}

TEST_F(RemoteAdmissionTest, AClosingStoreEndsRemoteReadsInsteadOfWaitingForThem) {
  const ReadPin a = Pin(1, sessions_[0]), b = Pin(1, sessions_[1]);
  ASSERT_TRUE(store_->AdmitRead(1, a.id, kArrivalNow, told_.For(0)).ok());
  ASSERT_TRUE(store_->AdmitRead(1, b.id, kArrivalNow, told_.For(1)).ok());
  client_.reset();
  store_.reset();  // a's reads never finish
  ASSERT_EQ(told_.Of(1).size(), 1u);
  EXPECT_EQ(told_.Of(1)[0].code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace flatcake
