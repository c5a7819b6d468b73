// `flatcake bench recover`: how long a restart takes. Writes a durable SSD pool of --blocks
// blocks (in sessions of several turns, as serving does), closes the store, reopens it (recovery
// rebuilds the index, scopes and extents from the pool's journal), then reads every block back and
// compares it with its deterministic content. Prints a table and, with --json, one object:
// blocks, recovery_s, bytes_read_fraction (bytes read by recovery / payload bytes in the pool),
// mismatches (and misses, write and read GB/s, the journal's size).
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/store_flags.h"
#include "flatcake/store.h"
#include "util/block_content.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

struct RecoverArgs {
  uint64_t blocks = 1 << 20;
  uint64_t slice_bytes = 4096;
  uint32_t layers = 1;
  uint32_t planes = 1;
  uint32_t blocks_per_put = 1024;
  uint32_t turns_per_session = 8;
  std::string dir;
  bool json = false;
};

// Writes `puts` batches of a.blocks_per_put blocks, a.turns_per_session batches per session, into
// a store opened with `o`, and closes it; returns the seconds the puts took.
Result<double> WritePool(const RecoverArgs& a, const StoreOptions& o, const KvLayout& layout,
                         uint64_t puts) {
  FC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(o));
  HostBlocks buf(layout, a.blocks_per_put);
  WriteHints h;
  h.force_medium = MediaType::kSsd;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < puts; ++i) {
    const auto keys = MakeKeys(i, 0, a.blocks_per_put);
    buf.Fill(keys);
    h.session = "session-" + std::to_string(i / a.turns_per_session);
    FC_RETURN_IF_ERROR(store->Put(keys, layout, buf.buffers(), h).status());
  }
  return SecondsSince(t0);
}

struct ReadBackResult {
  double seconds = 0;
  uint64_t mismatches = 0, misses = 0;
};

// Reads every block WritePool wrote back from `store` and compares it with its content.
Result<ReadBackResult> ReadBack(const RecoverArgs& a, Store& store, const KvLayout& layout,
                                uint64_t puts) {
  const uint64_t block = layout.block_bytes();
  HostBlocks buf(layout, a.blocks_per_put);
  std::vector<uint8_t> want(block);
  ReadBackResult out;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < puts; ++i) {
    const auto keys = MakeKeys(i, 0, a.blocks_per_put);
    std::memset(buf.bytes.data(), 0, buf.bytes.size());
    FC_ASSIGN_OR_RETURN(GetResult r, store.Get(keys, layout, buf.buffers()));
    for (size_t k = 0; k < keys.size(); ++k) {
      if (!r.found[k]) {
        out.misses++;
        continue;
      }
      FillBlock(keys[k], want.data(), block);
      if (std::memcmp(want.data(), buf.block(k), block) != 0) out.mismatches++;
    }
  }
  out.seconds = SecondsSince(t0);
  return out;
}

int RunRecover(const RecoverArgs& a) {
  const KvLayout layout{a.layers, a.planes, a.slice_bytes};
  if (Status st = ValidateKvLayout(layout); !st.ok()) return ReportStatus("bench recover", st);
  if (a.blocks_per_put == 0 || a.turns_per_session == 0) {
    return ReportStatus("bench recover",
                        Status::InvalidArgument("--blocks-per-put and --turns must be positive"));
  }
  const uint64_t block = layout.block_bytes();
  const uint64_t puts = (a.blocks + a.blocks_per_put - 1) / a.blocks_per_put;
  const uint64_t blocks = puts * a.blocks_per_put;
  std::unique_ptr<TempDir> tmp;
  std::string dir = a.dir;
  if (dir.empty()) {
    tmp = std::make_unique<TempDir>("flatcake-recover");
    dir = tmp->path();
  }
  StoreOptions o;
  o.dram_bytes = 0;
  o.ssd_dirs = {dir};
  o.ssd_file_bytes = 256 * kMiB;
  // Room for the payload (each segment's runs padded to 4 KiB) below the reclaim watermark.
  const uint64_t payload = blocks * block;
  const uint64_t room = static_cast<uint64_t>(static_cast<double>(payload) * 1.1 / 0.9);
  o.ssd_bytes = (room / o.ssd_file_bytes + 2) * o.ssd_file_bytes;
  o.max_scopes = static_cast<uint32_t>(
      std::max<uint64_t>(1024, 2 * (puts + a.turns_per_session - 1) / a.turns_per_session));
  o.index_capacity = std::bit_ceil(2 * blocks);  // 4 KiB blocks: more than the default sizing
  o.sync = SyncMode::kNone;  // the bench measures recovery, not the disk's flush
  o.wipe = true;             // a measurement starts from an empty pool ...
  auto written = WritePool(a, o, layout, puts);
  if (!written.ok()) return ReportStatus("bench recover", written.status());
  const double write_s = *written;
  o.wipe = false;  // ... and the reopen recovers it
  const auto t0 = std::chrono::steady_clock::now();
  auto opened = Store::Open(o);
  const double open_s = SecondsSince(t0);
  if (!opened.ok()) return ReportStatus("bench recover", opened.status());
  Store& store = **opened;
  const StoreInfo info = store.GetInfo();

  auto checked = ReadBack(a, store, layout, puts);
  if (!checked.ok()) return ReportStatus("bench recover", checked.status());
  const auto [read_s, mismatches, misses] = *checked;
  const StoreStats st = store.GetStats();
  const double fraction =
      payload ? static_cast<double>(info.recovery_read_bytes) / static_cast<double>(payload) : 0;
  std::printf("recover: %lu blocks of %s (%.2f GiB) in %lu segments\n",
              static_cast<unsigned long>(blocks), layout.ToString().c_str(),
              static_cast<double>(payload) / kGiB, static_cast<unsigned long>(puts));
  std::printf(
      "  write %.2f s (%.2f GB/s); open with recovery %.3f s (recovery %.3f s), read "
      "%.2f MiB = %.4f%% of the payload; journal %.2f MiB\n",
      write_s, payload / write_s / 1e9, open_s, info.recovery_seconds,
      static_cast<double>(info.recovery_read_bytes) / kMiB, 100 * fraction,
      static_cast<double>(st.journal_bytes) / kMiB);
  std::printf(
      "  recovered %lu blocks, %lu segments, %lu scopes, %lu records skipped; read back "
      "%.2f s (%.2f GB/s): mismatches %lu, misses %lu\n",
      static_cast<unsigned long>(info.recovered_blocks),
      static_cast<unsigned long>(info.recovered_segments),
      static_cast<unsigned long>(info.recovered_scopes),
      static_cast<unsigned long>(info.skipped_records), read_s, payload / read_s / 1e9,
      static_cast<unsigned long>(mismatches), static_cast<unsigned long>(misses));
  if (a.json) {
    nlohmann::json j = {{"bench", "recover"},
                        {"blocks", info.recovered_blocks},
                        {"blocks_written", blocks},
                        {"block_bytes", block},
                        {"segments", info.recovered_segments},
                        {"recovery_s", info.recovery_seconds},
                        {"open_s", open_s},
                        {"bytes_read", info.recovery_read_bytes},
                        {"payload_bytes", payload},
                        {"bytes_read_fraction", fraction},
                        {"skipped_records", info.skipped_records},
                        {"journal_bytes", st.journal_bytes},
                        {"write_gbps", payload / write_s / 1e9},
                        {"read_gbps", payload / read_s / 1e9},
                        {"mismatches", mismatches},
                        {"misses", misses}};
    std::printf("%s\n", j.dump().c_str());
  }
  return mismatches == 0 && misses == 0 && info.recovered_blocks == blocks ? 0 : 1;
}

}  // namespace

void RegisterRecoverBench(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<RecoverArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "recover",
      "Write a durable SSD pool, close and reopen it (recovery from the journal), read every "
      "block back; exits 1 on any mismatch or miss");
  const auto size = CLI::AsSizeValue(false);
  cmd->add_option("--blocks", a->blocks, "Blocks to write (rounded up to whole puts)")
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "Layers per block")->capture_default_str();
  cmd->add_option("--planes", a->planes, "Planes per layer")->capture_default_str();
  cmd->add_option("--slice-bytes", a->slice_bytes, "Bytes of one (layer, plane) slice")
      ->transform(size)
      ->capture_default_str();
  cmd->add_option("--blocks-per-put", a->blocks_per_put, "Blocks per put (one segment)")
      ->capture_default_str();
  cmd->add_option("--turns", a->turns_per_session, "Puts per session")->capture_default_str();
  cmd->add_option("--dir", a->dir,
                  "SSD pool directory (default: a temporary directory, removed afterwards; a "
                  "pool already there is wiped)");
  cmd->add_flag("--json", a->json, "Print one JSON object on the last line");
  cmd->callback([a, exit_code] { *exit_code = RunRecover(*a); });
}

}  // namespace flatcake::cli
