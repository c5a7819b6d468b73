// `flatcake soak --client` (hidden): one client process of the soak (cli/soak.h says what it
// prints). It draws, at random, puts (1 to 32 blocks of one of two layouts, on DRAM, on SSD or
// where placement puts them, in one of 8 sessions), lookups and restores of ranges it or its
// tenant's other clients put recently or of random ranges, and restores it cancels midway; every
// restored block is compared byte by byte with FillBlock's content of its key.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/soak.h"
#include "flatcake/clock.h"
#include "serve/remote_store.h"
#include "util/block_content.h"

namespace flatcake::cli::soak {

void ClientCounters::Add(const ClientCounters& o) {
  puts += o.puts;
  put_blocks += o.put_blocks;
  put_written += o.put_written;
  put_present += o.put_present;
  lookups += o.lookups;
  lookup_keys += o.lookup_keys;
  lookup_hits += o.lookup_hits;
  restores += o.restores;
  restore_keys += o.restore_keys;
  restore_hits += o.restore_hits;
  restores_cancelled += o.restores_cancelled;
  bytes_verified += o.bytes_verified;
  wrong_bytes += o.wrong_bytes;
  wrong_blocks += o.wrong_blocks;
  corrupt += o.corrupt;
  errors += o.errors;
}

nlohmann::json ClientCounters::ToJson() const {
  return {{"puts", puts},
          {"put_blocks", put_blocks},
          {"put_written", put_written},
          {"put_present", put_present},
          {"lookups", lookups},
          {"lookup_keys", lookup_keys},
          {"lookup_hits", lookup_hits},
          {"restores", restores},
          {"restore_keys", restore_keys},
          {"restore_hits", restore_hits},
          {"restores_cancelled", restores_cancelled},
          {"bytes_verified", bytes_verified},
          {"wrong_bytes", wrong_bytes},
          {"wrong_blocks", wrong_blocks},
          {"corrupt", corrupt},
          {"errors", errors}};
}

ClientCounters ClientCounters::FromJson(const nlohmann::json& j) {
  ClientCounters c;
  auto get = [&j](const char* name) { return j.value(name, uint64_t{0}); };
  c.puts = get("puts");
  c.put_blocks = get("put_blocks");
  c.put_written = get("put_written");
  c.put_present = get("put_present");
  c.lookups = get("lookups");
  c.lookup_keys = get("lookup_keys");
  c.lookup_hits = get("lookup_hits");
  c.restores = get("restores");
  c.restore_keys = get("restore_keys");
  c.restore_hits = get("restore_hits");
  c.restores_cancelled = get("restores_cancelled");
  c.bytes_verified = get("bytes_verified");
  c.wrong_bytes = get("wrong_bytes");
  c.wrong_blocks = get("wrong_blocks");
  c.corrupt = get("corrupt");
  c.errors = get("errors");
  return c;
}

namespace {

volatile std::sig_atomic_t g_stop = 0;

void OnTerm(int) { g_stop = 1; }

struct Range {
  uint64_t ns = 0, first = 0, n = 0;
};

constexpr uint32_t kMaxBlocks = 32;

class SoakClient {
 public:
  explicit SoakClient(const ClientArgs& a)
      : a_(a), rng_(a.seed), bufs_{{kLayouts[0], kMaxBlocks}, {kLayouts[1], kMaxBlocks}} {}
  int Main();

 private:
  void Put();
  void Lookup();
  void Restore(bool cancel);
  // A range to read: one put recently (by this client or, for shared keys, maybe another) or
  // anywhere in a namespace.
  Range PickRange();
  void Verify(const Range& r, const GetResult& got);
  void Error(const char* op, const Status& st);
  void Report();
  static void Say(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  const ClientArgs a_;
  std::mt19937_64 rng_;
  HostBlocks bufs_[2];
  std::unique_ptr<serve::RemoteStore> store_;
  std::deque<Range> recent_;
  ClientCounters c_;
};

void SoakClient::Error(const char* op, const Status& st) {
  ++c_.errors;
  Say("E " + std::to_string(SteadyNowNs()) + " " + op + " " +
      std::string(StatusCodeName(st.code())) + " " + std::string(st.message()));
}

void SoakClient::Report() { Say("S " + c_.ToJson().dump()); }

void SoakClient::Put() {
  const int layout = static_cast<int>(rng_() % 2);
  const uint64_t ns = rng_() % 3 == 0 ? SharedNs(layout) : OwnNs(a_.slot, layout);
  const uint64_t n = 1 + rng_() % kMaxBlocks;
  const Range r{ns, rng_() % (kKeySpace - n), n};
  const std::vector<Key> keys = MakeKeys(r.ns, r.first, r.n);
  HostBlocks& src = bufs_[layout];
  for (uint64_t i = 0; i < n; ++i) FillBlock(keys[i], src.block(i), src.layout.block_bytes());
  WriteHints h;
  h.session = "soak-" + std::to_string(a_.slot) + "-" + std::to_string(rng_() % 8);
  if (const uint64_t where = rng_() % 3; where < 2) h.force_medium = static_cast<MediaType>(where);
  BlockBuffers b = src.buffers();
  b.ptrs = b.ptrs.subspan(0, n);
  ++c_.puts;
  c_.put_blocks += n;
  Result<PutResult> put = store_->Put(keys, src.layout, b, h);
  if (!put.ok()) return Error("put", put.status());
  c_.put_written += put->written;
  c_.put_present += put->already_present;
  recent_.push_back(r);
  if (recent_.size() > 64) recent_.pop_front();
}

Range SoakClient::PickRange() {
  if (!recent_.empty() && rng_() % 4 != 0) {
    Range r = recent_[rng_() % recent_.size()];
    // A part of it, or the whole.
    const uint64_t skip = rng_() % 2 ? rng_() % r.n : 0;
    r.first += skip;
    r.n -= skip;
    return r;
  }
  const int layout = static_cast<int>(rng_() % 2);
  const uint64_t ns = rng_() % 2 ? SharedNs(layout) : OwnNs(a_.slot, layout);
  const uint64_t n = 1 + rng_() % kMaxBlocks;
  return Range{ns, rng_() % (kKeySpace - n), n};
}

void SoakClient::Lookup() {
  const Range r = PickRange();
  const std::vector<Key> keys = MakeKeys(r.ns, r.first, r.n);
  ++c_.lookups;
  c_.lookup_keys += r.n;
  c_.lookup_hits += store_->Lookup(keys).leading_hits;
}

void SoakClient::Verify(const Range& r, const GetResult& got) {
  HostBlocks& dst = bufs_[LayoutOfNs(r.ns)];
  const uint64_t bytes = dst.layout.block_bytes();
  std::vector<uint8_t> want(bytes);
  const std::vector<Key> keys = MakeKeys(r.ns, r.first, r.n);
  c_.restore_hits += got.hits;
  c_.corrupt += got.corrupt;
  for (uint64_t i = 0; i < r.n; ++i) {
    if (!got.found[i]) continue;
    FillBlock(keys[i], want.data(), bytes);
    c_.bytes_verified += bytes;
    if (std::memcmp(want.data(), dst.block(i), bytes) == 0) continue;
    uint64_t wrong = 0;
    for (uint64_t b = 0; b < bytes; ++b) wrong += want[b] != dst.block(i)[b];
    c_.wrong_bytes += wrong;
    ++c_.wrong_blocks;
    Say("W " + KeyToHex(keys[i]) + " " + std::to_string(wrong));
  }
}

void SoakClient::Restore(bool cancel) {
  const Range r = PickRange();
  const std::vector<Key> keys = MakeKeys(r.ns, r.first, r.n);
  HostBlocks& dst = bufs_[LayoutOfNs(r.ns)];
  // Zeros first, so that a block reported found but never written shows.
  std::memset(dst.bytes.data(), 0, r.n * dst.layout.block_bytes());
  BlockBuffers b = dst.buffers();
  b.ptrs = b.ptrs.subspan(0, r.n);
  ++c_.restores;
  c_.restore_keys += r.n;
  Result<std::unique_ptr<RestoreHandle>> h = store_->Restore(keys, dst.layout, b);
  if (!h.ok()) return Error("restore", h.status());
  if (cancel) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 2000));
    (*h)->Cancel();
  }
  Result<GetResult> got = (*h)->Wait();
  if (!got.ok()) {
    // What Cancel makes of a restore not done yet.
    if (cancel && got.status().code() == StatusCode::kAborted) {
      ++c_.restores_cancelled;
      return;
    }
    return Error(cancel ? "restore_cancel" : "restore", got.status());
  }
  Verify(r, *got);
}

int SoakClient::Main() {
  serve::ClientOptions co;
  co.client_name = "soak client " + std::to_string(a_.slot);
  co.reconnect_interval = std::chrono::milliseconds(50);
  co.request_timeout = std::chrono::milliseconds(20000);
  // Started while the daemon restarts, a client waits for it.
  const int64_t give_up = SteadyNowNs() + 30'000'000'000LL;
  for (;;) {
    auto s = serve::RemoteStore::Connect(a_.socket, a_.tenant, co);
    if (s.ok()) {
      store_ = std::move(*s);
      break;
    }
    Error("connect", s.status());
    if (SteadyNowNs() > give_up || g_stop) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  int64_t next_report = 0;
  while (!g_stop) {
    const uint64_t pick = rng_() % 100;
    if (pick < 35) {
      Put();
    } else if (pick < 60) {
      Lookup();
    } else {
      Restore(/*cancel=*/pick >= 95);
    }
    if (const int64_t now = SteadyNowNs(); now >= next_report) {
      Report();
      next_report = now + 200'000'000;
    }
  }
  Report();
  return 0;
}

}  // namespace

int RunClient(const ClientArgs& a) {
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  SoakClient client(a);
  return client.Main();
}

}  // namespace flatcake::cli::soak
