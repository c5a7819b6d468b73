#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "eval/replay.h"
#include "io/coalesce.h"
#include "sim/profile.h"
#include "sim/sim_flat.h"
#include "sim/sim_internal.h"
#include "sim/workloads.h"
#include "store/segment_layout.h"
#include "testing/sanitizers.h"
#include "trace/workload_gen.h"
#include "util/temp_dir.h"

namespace flatcake::sim {
namespace {

// The coarse descriptors (one per segment run, layer and plane) plan exactly the reads the
// store's per-slice descriptors (one per block, layer and plane, at SegmentLayout's offsets) do,
// whatever the gap bridged, as long as no merged read is cut at max_io. Where max_io cuts, the
// per-slice plan cuts between slices and the coarse one between runs: the same bytes, with the
// cuts elsewhere (at most one more or fewer command per coarse descriptor).
TEST(SimFlat, CoarseDescriptorsPlanTheSameReadsAsPerSliceOnes) {
  const KvLayout kv{8, 2, 4096};
  const uint64_t file_bytes = 8 << 20;
  struct Seg {
    uint64_t base;
    uint32_t blocks;
  };
  // Three segments: two back to back in file 0, one in file 1 after a hole.
  const std::vector<Seg> segs = {
      {4096, 20}, {4096 + SegmentLayout(kv, 20).Bytes(), 7}, {file_bytes + 65536, 33}};
  // Runs read: a partial run (blocks 3..17), a whole segment, a run with a skipped block.
  struct Run {
    int seg;
    uint32_t first, count;
  };
  const std::vector<Run> runs = {{0, 3, 15}, {1, 0, 7}, {2, 0, 10}, {2, 11, 22}};
  for (auto [gap, max_io] : {std::pair<uint64_t, uint64_t>{0, 64 << 20},
                             {4096, 64 << 20},
                             {65536, 64 << 20},
                             {65536, 1 << 20}}) {
    std::vector<SliceRead> fine, coarse;
    for (const Run& r : runs) {
      const SegmentLayout sl(kv, segs[r.seg].blocks);
      for (uint32_t b = r.first; b < r.first + r.count; ++b) {
        for (uint32_t l = 0; l < kv.num_layers; ++l) {
          for (uint32_t p = 0; p < kv.num_planes; ++p) {
            const uint64_t off = segs[r.seg].base + sl.SliceOffset(l, p, b);
            fine.push_back(SliceRead{static_cast<uint32_t>(off / file_bytes), off % file_bytes,
                                     kv.slice_bytes, nullptr, l, 0});
          }
        }
      }
      internal::AppendSsdRunReads(kv, file_bytes, segs[r.seg].base, sl.PlaneStride(), r.first,
                                  r.count, &coarse);
    }
    ASSERT_GT(fine.size(), coarse.size() * 5);
    CoalesceOptions co;
    co.max_gap = gap;
    co.max_io = max_io;
    auto a = PlanReads(fine, co);
    auto b = PlanReads(coarse, co);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->bytes_requested, b->bytes_requested);
    if (max_io < (64 << 20)) {
      EXPECT_LE(
          std::max(a->reads.size(), b->reads.size()) - std::min(a->reads.size(), b->reads.size()),
          coarse.size());
      continue;
    }
    ASSERT_EQ(a->reads.size(), b->reads.size()) << "gap " << gap;
    EXPECT_EQ(a->bytes_gap, b->bytes_gap);
    for (size_t i = 0; i < a->reads.size(); ++i) {
      EXPECT_EQ(a->reads[i].file, b->reads[i].file);
      EXPECT_EQ(a->reads[i].offset, b->reads[i].offset);
      EXPECT_EQ(a->reads[i].len, b->reads[i].len);
    }
    EXPECT_EQ(a->bytes_read, b->bytes_read);
    EXPECT_EQ(a->bytes_requested, b->bytes_requested);
  }
}

// Fragmented reads cost more than coalesced ones through their command count alone.
TEST(SimDevice, CommandsCostThroughIopsCpuAndQueueDepth) {
  SsdProfile p;
  p.read_gbps = 2;
  p.write_gbps = 1;
  p.cmd_latency_s = 100e-6;
  p.max_iops = 100000;
  p.cmd_cpu_s = 4e-6;
  p.workers = 2;
  p.queue_depth = 32;
  p.gds_gbps_per_worker = 1;
  internal::SsdDevice dev(p);
  const uint64_t bytes = 1 << 30;
  const double seq = dev.ServiceSeconds(256, bytes, 2);      // 4 MiB reads
  const double frag = dev.ServiceSeconds(131072, bytes, 2);  // 8 KiB reads
  EXPECT_NEAR(seq, bytes / 2e9 + 100e-6, 1e-9);
  EXPECT_NEAR(frag, 131072 / 1e5 + 100e-6, 1e-9);  // IOPS-bound
  // FIFO: a job issued while the device is busy starts when it is free.
  const double t1 = dev.Submit(0, 256, bytes, false);
  const double t2 = dev.Submit(0, 1, 4096, false);
  EXPECT_DOUBLE_EQ(t1, seq);
  EXPECT_GT(t2, t1);
  EXPECT_EQ(dev.bytes_read(), bytes + 4096);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SimProfile, ShippedProfilesParseWithASourceForEveryNumber) {
  for (const char* name : {"b200-dsv4flash", "a100-llama70b", "local"}) {
    auto path = FindProfilePath(name);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    auto p = ParseProfile(ReadFile(*path), *path, /*require_sources=*/true);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(p->name, name);
  }
  auto b200 = LoadProfile("b200-dsv4flash");
  ASSERT_TRUE(b200.ok());
  EXPECT_EQ(b200->layers, 43u);
  EXPECT_EQ(b200->kv_bytes_per_token, 7680u);
  EXPECT_EQ(b200->page_tokens, 256u);
  EXPECT_EQ(b200->dram_bytes * 8, uint64_t{1} << 40);
  EXPECT_EQ(b200->ssd_bytes * 8, uint64_t{4} << 40);
}

TEST(SimProfile, MalformedProfilesAreRefusedNamingTheField) {
  auto path = FindProfilePath("local");
  ASSERT_TRUE(path.ok());
  std::string text = ReadFile(*path);
  // A number without a source, where sources are required.
  std::string bad = text;
  const std::string from = "\"layers\": {\"value\": 8, \"source\"";
  const size_t at = bad.find(from);
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, from.size(), "\"layers\": 8, \"x\": {\"value\": 8, \"source\"");
  auto r = ParseProfile(bad, "t.json", true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("layers"), std::string::npos) << r.status().ToString();
  // Not JSON; a negative number.
  EXPECT_FALSE(ParseProfile("{", "t.json", false).ok());
  std::string neg = text;
  neg.replace(neg.find("\"value\": 8,"), 11, "\"value\": -8,");
  auto n = ParseProfile(neg, "t.json", false);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().ToString().find(">= 0"), std::string::npos);
  EXPECT_TRUE(ParseProfile(text, "t.json", true).ok());
  EXPECT_FALSE(LoadProfile("no-such-profile").ok());
}

std::vector<trace::TraceRequest> SmallWorkload(uint64_t requests) {
  trace::WorkloadOptions wo = eval::DefaultReplayWorkload();
  wo.requests = requests;
  auto reqs = trace::GenerateWorkload(trace::WorkloadKind::kAgentic, wo);
  EXPECT_TRUE(reqs.ok());
  return *reqs;
}

// Invariants the policies' own code implies, on the replay's default workload.
TEST(Simulator, FlatNeverMigratesAndEveryPolicyAccountsItsTokens) {
  auto prof = LoadProfile("local");
  ASSERT_TRUE(prof.ok());
  const auto reqs = SmallWorkload(200);
  for (SimPolicy pol : AllSimPolicies()) {
    SimOptions so;
    so.policy = pol;
    so.qps = 9;
    auto r = RunSimulation(reqs, *prof, so);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->requests, reqs.size());
    EXPECT_EQ(r->hit_tokens_hbm + r->hit_tokens_dram + r->hit_tokens_ssd + r->recomputed_tokens,
              r->input_tokens)
        << r->policy;
    EXPECT_GT(r->ttft_p99_s, 0);
    EXPECT_LE(r->ttft_p50_s, r->ttft_p99_s);
    if (pol == SimPolicy::kRecompute) EXPECT_EQ(r->recomputed_tokens, r->input_tokens);
    if (pol == SimPolicy::kFlat || pol == SimPolicy::kFlatFcfs) {
      EXPECT_DOUBLE_EQ(r->write_amp, 1.0);  // bytes written == bytes admitted
      EXPECT_GT(r->hit_tokens_ssd, 0u);
    }
    if (pol == SimPolicy::kTiered) {
      EXPECT_GT(r->write_amp, 1.0);  // offloads and promotions write again
      EXPECT_GT(r->promotions, 0u);
    }
    if (pol == SimPolicy::kDramOnly) EXPECT_EQ(r->hit_tokens_ssd, 0u);
  }
}

TEST(Simulator, DeterministicAndRefusesBadInput) {
  auto prof = LoadProfile("local");
  ASSERT_TRUE(prof.ok());
  const auto reqs = SmallWorkload(80);
  SimOptions so;
  so.qps = 9;
  auto a = RunSimulation(reqs, *prof, so);
  auto b = RunSimulation(reqs, *prof, so);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ttft_mean_s, b->ttft_mean_s);
  EXPECT_EQ(a->ssd_bytes_read, b->ssd_bytes_read);
  EXPECT_FALSE(RunSimulation({}, *prof, so).ok());
  so.qps = -1;
  EXPECT_FALSE(RunSimulation(reqs, *prof, so).ok());
  so.qps = 1;
  so.block_tokens = 128;  // the workload's blocks are 64 tokens
  EXPECT_FALSE(RunSimulation(reqs, *prof, so).ok());
  EXPECT_FALSE(ParseSimPolicy("lru").ok());
}

// A request that continues another is sent only once that one's reply is complete, so it finds
// the prefix its parent computed in HBM instead of overtaking it. Pages no running request holds
// stay cached unless the idle cache is capped at 0.
TEST(Simulator, ChildrenWaitForTheirParentAndHbmKeepsWhatRunningRequestsHold) {
  auto loaded = LoadProfile("local");
  ASSERT_TRUE(loaded.ok());
  SimProfile prof = *loaded;
  prof.hbm_kv_bytes = uint64_t{1} << 30;
  const uint32_t bt = 64;
  auto make = [&](int64_t parent, uint32_t blocks, double t) {
    trace::TraceRequest r;
    r.time_s = t;
    r.input_tokens = uint64_t{blocks} * bt;
    r.output_tokens = 16;
    r.session_id = 0;
    r.parent = parent;
    r.block_tokens = bt;
    for (uint32_t b = 0; b < blocks; ++b) r.block_ids.push_back(b);
    return r;
  };
  // Both arrive at once: without the dependency the child would start while its parent is
  // still prefilling and miss everything.
  std::vector<trace::TraceRequest> reqs = {make(-1, 40, 0), make(0, 60, 0)};
  SimOptions so;
  so.policy = SimPolicy::kRecompute;
  auto r = RunSimulation(reqs, prof, so);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hit_tokens_hbm, 40u * bt);
  EXPECT_EQ(r->recomputed_tokens, (40u + 20u) * bt);
  // A third request of the same prefix, long after both are done, finds the child's 60 blocks.
  reqs.push_back(make(-1, 60, 1000));
  r = RunSimulation(reqs, prof, so);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens_hbm, (40u + 60u) * bt);
  // HBM keeps only what running requests hold: nobody runs when the second and third are sent.
  so.hbm_cache_bytes = 0;
  r = RunSimulation(reqs, prof, so);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens_hbm, 0u);
  // A request sent while another of its prefix is still decoding a long reply shares its pages.
  std::vector<trace::TraceRequest> pair = {make(-1, 40, 0), make(-1, 40, 1.0)};
  prof.decode_tokens_per_s = 1000;
  pair[0].output_tokens = 10000;  // 10 s of decode
  r = RunSimulation(pair, prof, so);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens_hbm, 40u * bt);
}

TEST(Workloads, FixedLengthSessionsReuseTheirPrefix) {
  auto reqs = FixedLengthSessions(8192, 256, 3, 2, 512, 100);
  ASSERT_TRUE(reqs.ok());
  ASSERT_EQ(reqs->size(), 6u);
  for (const auto& r : *reqs) {
    EXPECT_EQ(r.input_tokens, 8192u);
    EXPECT_EQ(r.block_ids.size(), 32u);
  }
  // Turn 2 of session 0 shares its first 30 blocks with turn 1, then differs.
  const auto& t1 = (*reqs)[0];
  const auto& t2 = (*reqs)[3];
  EXPECT_EQ(t2.session_id, 0);
  for (int b = 0; b < 30; ++b) EXPECT_EQ(t1.block_ids[b], t2.block_ids[b]);
  EXPECT_NE(t1.block_ids[30], t2.block_ids[30]);
  EXPECT_FALSE(FixedLengthSessions(512, 256, 1, 1, 512, 1).ok());
}

// The local profile against the real replay on this machine, on a small workload: delivered hit
// rate within 3 points and read amplification within 5%, for flat and tiered; restore P50 is
// printed beside the simulated one.
TEST(SimulatorVsReplay, LocalProfileAgreesWithTheRealReplay) {
  auto prof = LoadProfile("local");
  ASSERT_TRUE(prof.ok());
  const auto reqs = SmallWorkload(240);
  for (auto [rp, sp] : {std::pair{eval::ReplayPolicy::kFlat, SimPolicy::kFlat},
                        std::pair{eval::ReplayPolicy::kTiered, SimPolicy::kTiered}}) {
    TempDir dir;
    eval::ReplayOptions ro;
    ro.policy = rp;
    ro.dir = dir.path();
    ro.dram_bytes = prof->dram_bytes;
    ro.ssd_bytes = prof->ssd_bytes;
    ro.qps = eval::kDefaultReplayQps;
    ro.l_agent_tokens = prof->l_agent_tokens;
    auto real = eval::RunReplay(reqs, ro);
    ASSERT_TRUE(real.ok()) << real.status().ToString();
    ASSERT_EQ(real->mismatches, 0u);
    SimOptions so;
    so.policy = sp;
    so.qps = eval::kDefaultReplayQps;
    auto sim = RunSimulation(reqs, *prof, so);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    const std::string what = std::string(SimPolicyName(sp));
    std::printf(
        "%s: hit real %.2f sim %.2f; r_amp real %.3f sim %.3f; restore P50 real %.2f ms "
        "sim %.2f ms (sim/real %.2f); SSD read real %.2f sim %.2f GB/s\n",
        what.c_str(), real->hit_rate_pct(), sim->hit_rate_pct(), real->read_amp, sim->read_amp,
        real->restore_p50_s * 1e3, sim->restore_p50_s * 1e3,
        sim->restore_p50_s / real->restore_p50_s, real->ssd_read_gbps, sim->ssd_read_gbps);
    EXPECT_NEAR(sim->hit_rate_pct(), real->hit_rate_pct(), 3.0) << what;
    EXPECT_NEAR(sim->read_amp, real->read_amp, 0.05 * real->read_amp) << what;
    // Restore latency is reported, not held to the 30% of the profile's calibration day: it is
    // the machine's state of the moment, which a shared VM does not hold still. Measured with the
    // same code and the same dd and memcpy rates: flat 6.5-6.8 ms and tiered 1.5-1.7 ms on
    // 2026-12-01; flat 11.3-15.6 ms and tiered 4.6-7.4 ms on 2026-12-02, with the replay's own
    // SSD rate down from 1.31-1.37 to 0.84-0.99 GB/s. The bound below catches what a model error
    // does (a wrong unit, a lost term: orders of magnitude), not the machine's drift. Under
    // AddressSanitizer: uninstrumented trees only.
    if (!testing::kBuiltWithAsan) {
      EXPECT_LT(sim->restore_p50_s, 10 * real->restore_p50_s) << what;
      EXPECT_GT(sim->restore_p50_s, real->restore_p50_s / 10) << what;
    }
  }
}

}  // namespace
}  // namespace flatcake::sim
