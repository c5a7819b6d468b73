// `flatcake bench roundtrip`: writes a volume of blocks through both media, reads every block
// back and compares every byte, and reports bandwidth and write amplification per medium.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

struct RoundTripArgs {
  uint64_t bytes = 1 * kGiB;
  uint32_t layers = 32;
  uint32_t planes = 2;
  uint64_t slice_bytes = 16 * kKiB;
  uint32_t blocks_per_put = 64;
  std::string dir;
  bool json = false;
};

// Both media sized so the whole volume (`per_medium` bytes on each) stays below the high
// watermark: this bench checks data, not reclamation (the reclamation tests do that).
StoreOptions RoundTripStoreOptions(uint64_t per_medium, const std::string& dir) {
  StoreOptions o;
  const uint64_t room = static_cast<uint64_t>(per_medium / (o.high_watermark - 0.05));
  o.dram_bytes = room + 64 * kMiB;
  o.ssd_dirs = {dir};
  o.recover = false;  // a measurement starts from an empty pool
  o.ssd_file_bytes = 256 * kMiB;
  o.ssd_bytes = (room / o.ssd_file_bytes + 2) * o.ssd_file_bytes;
  return o;
}

// Compares each found block of `got` with its deterministic content; counts the bytes verified,
// the blocks that differ and the keys not found.
void VerifyBatch(const std::vector<Key>& keys, const std::vector<uint8_t>& found, HostBlocks& got,
                 uint64_t* verified, uint64_t* mismatches, uint64_t* misses) {
  const uint64_t block = got.layout.block_bytes();
  std::vector<uint8_t> want(block);
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!found[k]) {
      ++*misses;
      continue;
    }
    FillBlock(keys[k], want.data(), block);
    if (std::memcmp(want.data(), got.block(k), block) != 0) ++*mismatches;
    *verified += block;
  }
}

int RunRoundTrip(const RoundTripArgs& a) {
  const KvLayout layout{a.layers, a.planes, a.slice_bytes};
  if (Status st = ValidateKvLayout(layout); !st.ok()) return ReportStatus("bench roundtrip", st);
  const uint64_t block = layout.block_bytes();
  const uint64_t batches = std::max<uint64_t>(2, a.bytes / (block * a.blocks_per_put));
  const uint64_t per_medium = (batches + 1) / 2 * a.blocks_per_put * block;

  std::unique_ptr<TempDir> tmp;
  std::string dir = a.dir;
  if (dir.empty()) {
    tmp = std::make_unique<TempDir>("flatcake-roundtrip");
    dir = tmp->path();
  }
  auto opened = Store::Open(RoundTripStoreOptions(per_medium, dir));
  if (!opened.ok()) return ReportStatus("bench roundtrip", opened.status());
  Store& store = **opened;

  HostBlocks buf(layout, a.blocks_per_put);
  double put_s[2] = {0, 0}, get_s[2] = {0, 0};
  uint64_t moved[2] = {0, 0}, verified = 0, mismatches = 0, misses = 0;
  for (uint64_t pass = 0; pass < 2; ++pass) {
    for (uint64_t i = 0; i < batches; ++i) {
      const MediaType m = i % 2 ? MediaType::kSsd : MediaType::kDram;
      const int mi = static_cast<int>(m);
      auto keys = MakeKeys(i, 0, a.blocks_per_put);
      if (pass == 0) {
        buf.Fill(keys);
        WriteHints h;
        h.force_medium = m;
        // Four batches (turns) per session, so SSD scopes fill their pool files.
        h.session = "session-" + std::to_string(i / 8) + (mi ? "-ssd" : "-dram");
        auto t0 = std::chrono::steady_clock::now();
        auto r = store.Put(keys, layout, buf.buffers(), h);
        put_s[mi] += SecondsSince(t0);
        if (!r.ok()) return ReportStatus("bench roundtrip", r.status());
        moved[mi] += uint64_t{r->written} * block;
      } else {
        std::memset(buf.bytes.data(), 0, buf.bytes.size());
        auto t0 = std::chrono::steady_clock::now();
        auto r = store.Get(keys, layout, buf.buffers());
        get_s[mi] += SecondsSince(t0);
        if (!r.ok()) return ReportStatus("bench roundtrip", r.status());
        VerifyBatch(keys, r->found, buf, &verified, &mismatches, &misses);
      }
    }
  }
  const StoreStats s = store.GetStats();
  auto gbps = [](uint64_t b, double sec) { return sec > 0 ? b / sec / 1e9 : 0.0; };
  auto wa = [](const MediumStats& m) {
    return m.admitted_bytes ? static_cast<double>(m.written_bytes) / m.admitted_bytes : 0.0;
  };
  std::printf("round trip: %lu blocks of %s (%.2f GiB) through DRAM and SSD\n",
              static_cast<unsigned long>(batches * a.blocks_per_put), layout.ToString().c_str(),
              static_cast<double>(batches * a.blocks_per_put * block) / kGiB);
  std::printf("%-6s %12s %10s %10s %14s %14s %8s\n", "medium", "bytes", "put GB/s", "get GB/s",
              "admitted", "written", "WA");
  for (int mi = 0; mi < 2; ++mi) {
    const MediumStats& m = mi ? s.ssd : s.dram;
    std::printf("%-6s %12lu %10.2f %10.2f %14lu %14lu %8.3f\n", mi ? "SSD" : "DRAM",
                static_cast<unsigned long>(moved[mi]), gbps(moved[mi], put_s[mi]),
                gbps(moved[mi], get_s[mi]), static_cast<unsigned long>(m.admitted_bytes),
                static_cast<unsigned long>(m.written_bytes), wa(m));
  }
  std::printf("bytes verified %lu, mismatches %lu, misses %lu, checksum failures %lu\n",
              static_cast<unsigned long>(verified), static_cast<unsigned long>(mismatches),
              static_cast<unsigned long>(misses),
              static_cast<unsigned long>(s.checksum_mismatches));
  if (a.json) {
    nlohmann::json j = {{"bench", "roundtrip"},
                        {"bytes_verified", verified},
                        {"mismatches", mismatches},
                        {"misses", misses},
                        {"dram_bytes", moved[0]},
                        {"ssd_bytes", moved[1]},
                        {"dram_put_gbps", gbps(moved[0], put_s[0])},
                        {"dram_get_gbps", gbps(moved[0], get_s[0])},
                        {"ssd_put_gbps", gbps(moved[1], put_s[1])},
                        {"ssd_get_gbps", gbps(moved[1], get_s[1])},
                        {"dram_write_amp", wa(s.dram)},
                        {"ssd_write_amp", wa(s.ssd)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return (mismatches == 0 && misses == 0 && s.checksum_mismatches == 0) ? 0 : 1;
}

}  // namespace

void RegisterRoundTripBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<RoundTripArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "roundtrip",
      "Write blocks through both media (half DRAM, half SSD), read them all back, "
      "verify every byte; exits 1 on any mismatch or miss");
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--bytes", a->bytes, "Total bytes to write")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "Layers per block")->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer (2 = K,V)")->capture_default_str();
  cmd->add_option("--slice-bytes", a->slice_bytes, "Bytes of one (layer, plane) slice")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--blocks-per-put", a->blocks_per_put, "Blocks per put batch")
      ->capture_default_str();
  cmd->add_option("--dir", a->dir,
                  "SSD pool directory (default: a temporary directory, removed "
                  "afterwards)");
  cmd->add_flag("--json", a->json, "Print one JSON object on the last line");
  cmd->callback([a, exit_code] { *exit_code = RunRoundTrip(*a); });
}

}  // namespace flatcake::cli
