// The I/O engine kinds that parameterised io/ tests run against, and the names their instances
// get ("posix", "preadv", "uring"). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "io/io_engine.h"

namespace flatcake::testing {

inline constexpr std::array<IoEngineKind, 3> kEngineKinds = {
    IoEngineKind::kPosix, IoEngineKind::kPreadv, IoEngineKind::kUring};

inline std::string EngineKindParamName(const ::testing::TestParamInfo<IoEngineKind>& info) {
  return std::string(IoEngineKindName(info.param));
}

}  // namespace flatcake::testing
