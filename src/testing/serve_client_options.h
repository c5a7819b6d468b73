// The client options of the daemon's tests, in-process (testing/daemon_fixture.h) and in the
// client processes they start (serve/serve_test_client.cc): the posix engine and small windows,
// quick to attach and ample for test batches, and quick reconnection. Test-only; no gtest here.
#pragma once

#include <chrono>

#include "serve/daemon_connection.h"

namespace flatcake::testing {

inline serve::ClientOptions SmallClientOptions() {
  serve::ClientOptions o;
  o.client_name = "test";
  o.media.io_engine = IoEngineKind::kPosix;
  o.media.read_window_bytes = 4 * kMiB;
  o.media.write_staging_bytes = 1 * kMiB;
  o.media.max_io_bytes = 256 * kKiB;
  o.reconnect_interval = std::chrono::milliseconds(20);
  return o;
}

}  // namespace flatcake::testing
