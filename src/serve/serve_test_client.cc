// serve_test_client: a client process of `flatcake serve` for the tests (serve_process_test.cc),
// which fork and exec it and read what it prints, one line per event, on stdout. Blocks carry
// FillBlock's content (util/block_content.h) and every byte read is compared with it.
//
//   serve_test_client SOCKET TENANT load NS SECONDS
//       puts, looks up and restores batches of its own keys (namespace NS) and of keys all load
//       clients share, on both media, for SECONDS; prints "ok puts P restores R hits H"; exits 1
//       at the first wrong byte or unexpected error.
//   serve_test_client SOCKET TENANT put NS FIRST COUNT dram|ssd
//       puts keys FIRST.. of NS on that medium; prints "put W".
//   serve_test_client SOCKET TENANT check NS FIRST COUNT
//       restores them; prints "found F" (exit 0 when every one was found, byte-exact).
//   serve_test_client SOCKET TENANT hold-write NS COUNT
//       reserves a DRAM write of COUNT keys, fills half of it, prints "reserved", and waits to be
//       killed: the write is never published.
//   serve_test_client SOCKET TENANT hold-restore NS FIRST COUNT
//       restores the keys and, in the middle (its first layer landed), prints "restoring" and
//       waits to be killed: its pins are held.
//   serve_test_client SOCKET TENANT survive NS COUNT SECONDS
//       puts COUNT keys on SSD, prints "written", then keeps looking them up; once the daemon is
//       gone and back (lookups missed, then hit again) restores them all, prints "recovered
//       misses M reconnects R" and exits 0; exits 1 after SECONDS.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "serve/daemon_connection.h"
#include "serve/remote_store.h"
#include "serve/rpc_convert.h"
#include "testing/serve_client_options.h"
#include "util/block_content.h"

namespace flatcake::serve {
namespace {

constexpr KvLayout kLayout{2, 2, 4096};  // 16 KiB blocks
constexpr uint64_t kSharedNs = 999;      // keys every load client of a tenant writes

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "serve_test_client: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<RemoteStore> Connect(const std::string& socket, const std::string& tenant) {
  auto store = RemoteStore::Connect(socket, tenant, testing::SmallClientOptions());
  if (!store.ok()) Fail("connect: " + store.status().ToString());
  return std::move(*store);
}

// Restores `keys` and checks every block found; returns how many were found.
uint32_t RestoreVerified(Store& store, const std::vector<Key>& keys) {
  HostBlocks dst(kLayout, keys.size());
  auto r = store.Get(keys, kLayout, dst.buffers());
  if (!r.ok()) Fail("restore: " + r.status().ToString());
  std::vector<uint8_t> want(kLayout.block_bytes());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r->found[i]) continue;
    FillBlock(keys[i], want.data(), want.size());
    if (std::memcmp(want.data(), dst.block(i), want.size()) != 0) {
      Fail("wrong bytes in block " + KeyToHex(keys[i]));
    }
  }
  return r->hits;
}

Result<PutResult> PutKeys(Store& store, const std::vector<Key>& keys, MediaType medium) {
  HostBlocks src(kLayout, keys.size());
  src.Fill(keys);
  WriteHints h;
  h.force_medium = medium;
  return store.Put(keys, kLayout, src.buffers(), h);
}

int Load(const std::string& socket, const std::string& tenant, uint64_t ns, double seconds) {
  auto store = Connect(socket, tenant);
  std::mt19937_64 rng(ns);
  uint64_t puts = 0, restores = 0, hits = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const uint64_t space = rng() % 3 == 0 ? kSharedNs : ns;
    const std::vector<Key> keys = MakeKeys(space, rng() % 200, 1 + rng() % 8);
    auto put = PutKeys(*store, keys, rng() % 2 ? MediaType::kDram : MediaType::kSsd);
    // A full store (every scope pinned by someone's restore) is no error of the daemon's.
    if (!put.ok() && !put.status().IsNoSpace()) Fail("put: " + put.status().ToString());
    ++puts;
    (void)store->Lookup(keys);
    hits += RestoreVerified(*store, keys);
    ++restores;
  }
  Say("ok puts " + std::to_string(puts) + " restores " + std::to_string(restores) + " hits " +
      std::to_string(hits));
  return hits > 0 ? 0 : 1;
}

int Put(const std::string& socket, const std::string& tenant, uint64_t ns, uint64_t first,
        uint64_t count, const std::string& medium) {
  auto store = Connect(socket, tenant);
  auto put = PutKeys(*store, MakeKeys(ns, first, count),
                     medium == "ssd" ? MediaType::kSsd : MediaType::kDram);
  if (!put.ok()) Fail("put: " + put.status().ToString());
  Say("put " + std::to_string(put->written));
  return 0;
}

int Check(const std::string& socket, const std::string& tenant, uint64_t ns, uint64_t first,
          uint64_t count) {
  auto store = Connect(socket, tenant);
  const uint32_t found = RestoreVerified(*store, MakeKeys(ns, first, count));
  Say("found " + std::to_string(found));
  return found == count ? 0 : 1;
}

[[noreturn]] void WaitToBeKilled() {
  for (;;) ::pause();
}

int HoldWrite(const std::string& socket, const std::string& tenant, uint64_t ns, uint64_t count) {
  auto c = DaemonConnection::Open(socket, tenant, testing::SmallClientOptions());
  if (!c.ok()) Fail("connect: " + c.status().ToString());
  rpc::Request request;
  rpc::ReserveWrite* w = request.mutable_reserve_write();
  w->set_keys(EncodeKeys(MakeKeys(ns, 0, count)));
  *w->mutable_layout() = ToRpc(kLayout);
  w->mutable_hints()->set_force_medium(rpc::MEDIUM_DRAM);
  auto reply = (*c)->Call(std::move(request), rpc::Response::kReserveWrite);
  if (!reply.ok()) Fail("reserve: " + reply.status().ToString());
  // Half the first segment written, as a writer killed in the middle leaves it.
  const rpc::Segment& seg = reply->reserve_write().segments(0);
  std::memset((*c)->media().access().dram + seg.offset(), 0xAB, seg.bytes() / 2);
  Say("reserved");
  WaitToBeKilled();
}

int HoldRestore(const std::string& socket, const std::string& tenant, uint64_t ns, uint64_t first,
                uint64_t count) {
  auto store = Connect(socket, tenant);
  const std::vector<Key> keys = MakeKeys(ns, first, count);
  HostBlocks dst(kLayout, keys.size());
  RestoreOptions ro;
  ro.on_layer = [](uint32_t layer) {
    Say("restoring");
    WaitToBeKilled();
  };
  auto r = store->Get(keys, kLayout, dst.buffers(), ro);
  Fail("the restore ended: " + (r.ok() ? std::string("OK") : r.status().ToString()));
}

int Survive(const std::string& socket, const std::string& tenant, uint64_t ns, uint64_t count,
            double seconds) {
  auto store = Connect(socket, tenant);
  const std::vector<Key> keys = MakeKeys(ns, 0, count);
  auto put = PutKeys(*store, keys, MediaType::kSsd);
  if (!put.ok() || put->written != count) Fail("put before the restart");
  Say("written");
  uint64_t misses = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const size_t hits = store->Exists(keys);
    if (hits < count) ++misses;
    if (misses > 0 && hits == count) {
      const uint32_t found = RestoreVerified(*store, keys);
      if (found != count) Fail("recovered " + std::to_string(found) + " of the blocks");
      Say("recovered misses " + std::to_string(misses) + " reconnects " +
          std::to_string(store->reconnects()));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Fail("no restart seen, or the blocks never came back (misses " + std::to_string(misses) + ")");
}

int Main(int argc, char** argv) {
  if (argc < 4) Fail("usage: serve_test_client SOCKET TENANT MODE ARGS...");
  const std::string socket = argv[1], tenant = argv[2], mode = argv[3];
  auto arg = [&](int i) -> uint64_t {
    if (i >= argc) Fail("missing argument " + std::to_string(i) + " for " + mode);
    return std::strtoull(argv[i], nullptr, 10);
  };
  if (mode == "load") return Load(socket, tenant, arg(4), std::atof(argv[5]));
  if (mode == "put" && argc > 7) return Put(socket, tenant, arg(4), arg(5), arg(6), argv[7]);
  if (mode == "check") return Check(socket, tenant, arg(4), arg(5), arg(6));
  if (mode == "hold-write") return HoldWrite(socket, tenant, arg(4), arg(5));
  if (mode == "hold-restore") return HoldRestore(socket, tenant, arg(4), arg(5), arg(6));
  if (mode == "survive") return Survive(socket, tenant, arg(4), arg(5), std::atof(argv[6]));
  Fail("unknown mode " + mode);
}

}  // namespace
}  // namespace flatcake::serve

int main(int argc, char** argv) { return flatcake::serve::Main(argc, argv); }
