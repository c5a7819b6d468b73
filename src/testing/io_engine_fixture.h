// The fixture of the io/ engine tests: an engine of the parameter's kind (skipped where io_uring
// is unavailable) and a scratch directory whose files it opens. Test-only.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "io/io_engine.h"
#include "io/posix_io_engine.h"
#include "io/preadv_io_engine.h"
#include "io/uring_io_engine.h"
#include "util/temp_dir.h"

namespace flatcake::testing {

// Builds an engine of the given kind; `max_chunk` > 0 caps each system call / SQE, forcing short
// transfers that the engine must continue.
inline std::unique_ptr<IoEngine> MakeEngine(IoEngineKind kind, uint64_t max_chunk = 0) {
  switch (kind) {
    case IoEngineKind::kPosix: return std::make_unique<PosixIoEngine>(max_chunk);
    case IoEngineKind::kPreadv: return std::make_unique<PreadvIoEngine>(3, max_chunk);
    default: {
      auto e = UringIoEngine::Create({2, 16, max_chunk});
      return e.ok() ? std::move(e).value() : nullptr;
    }
  }
}

// Why MakeEngine(kUring) returned nullptr: a build without the engine, or a kernel refusing rings.
inline std::string UringSkipReason() {
  auto e = UringIoEngine::Create({2, 16, 0});
  return e.ok() ? "io_uring unavailable" : e.status().ToString();
}

class EngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    engine_ = MakeEngine(GetParam());
    if (engine_ == nullptr) GTEST_SKIP() << UringSkipReason();
  }
  // Opens (creating) file `name`; returns -1 and skips when O_DIRECT is refused.
  int Open(const std::string& name, bool direct) {
    int flags = O_CREAT | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = ::open(dir_.File(name).c_str(), flags, 0644);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  TempDir dir_;
  std::unique_ptr<IoEngine> engine_;
  std::vector<int> fds_;
};

}  // namespace flatcake::testing
