// Helpers of the daemon's in-process tests (src/serve/*_test.cc): a small daemon over a test
// directory, clients of it, and blocks of FillBlock's content written and read back through
// them. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "serve/daemon.h"
#include "serve/remote_store.h"
#include "testing/serve_client_options.h"
#include "testing/store_blocks.h"
#include "util/block_content.h"

namespace flatcake::testing {

inline constexpr KvLayout kServeLayout{2, 2, 4096};  // 16 KiB blocks, 64 KiB per 4-block segment

// SmallStoreOptions (an 8 MiB arena, a 32 MiB durable pool under `dir`/pool) served on
// `dir`/sock.
inline serve::DaemonOptions SmallDaemonOptions(const std::string& dir) {
  serve::DaemonOptions o;
  o.store = SmallStoreOptions(dir);
  o.socket_path = dir + "/sock";
  o.hello_timeout = std::chrono::milliseconds(2000);
  o.shutdown_grace = std::chrono::milliseconds(1000);
  return o;
}

inline std::unique_ptr<serve::Daemon> StartDaemon(serve::DaemonOptions o) {
  auto d = serve::Daemon::Start(std::move(o));
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(*d) : nullptr;
}

inline std::unique_ptr<serve::RemoteStore> ConnectClient(const std::string& socket,
                                                         const std::string& tenant) {
  auto c = serve::RemoteStore::Connect(socket, tenant, SmallClientOptions());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Polls `pred` for up to `seconds`; whether it came true.
template <typename Pred>
bool Eventually(Pred pred, double seconds = 5) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Puts `keys` with FillBlock's content on `medium`.
inline Result<PutResult> PutBlocks(Store& s, const std::vector<Key>& keys, MediaType medium,
                                   const KvLayout& layout = kServeLayout) {
  HostBlocks src(layout, keys.size());
  src.Fill(keys);
  WriteHints h;
  h.force_medium = medium;
  return s.Put(keys, layout, src.buffers(), h);
}

}  // namespace flatcake::testing
