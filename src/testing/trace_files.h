// Helpers shared by the trace tests: file writers for each compression, and
// the location of the shared reference traces. Test-only; not part of the library.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace flatcake::trace::testing {

inline void WritePlain(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  ASSERT_EQ(std::fclose(f), 0);
}

inline void WriteGzip(const std::string& path, const std::string& text) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

inline std::string ZstdBytes(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

inline void WriteZstd(const std::string& path, const std::string& text) {
  WritePlain(path, ZstdBytes(text));
}

// The shared reference folder: $FLATCAKE_SHARED_DIR (ctest sets <repo>/../shared), else
// "../shared" relative to the working directory or the source tree. Returns "" when absent;
// callers fail the test with a message rather than skipping.
inline std::string SharedTracesDir() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("FLATCAKE_SHARED_DIR")) candidates.push_back(env);
  candidates.push_back("../shared");
  // This header lives in <repo>/src/testing; the shared folder sits beside the repository.
  candidates.push_back(
      (std::filesystem::path(__FILE__).parent_path() / "../../../shared").string());
  for (const std::string& c : candidates) {
    std::error_code ec;
    std::string dir = c + "/traces";
    if (std::filesystem::exists(dir + "/mooncake_conversation_trace.jsonl", ec)) return dir;
  }
  return "";
}

#define FC_REQUIRE_SHARED_TRACES(dir)                                                            \
  const std::string dir = ::flatcake::trace::testing::SharedTracesDir();                         \
  ASSERT_FALSE(dir.empty()) << "shared traces not found: set FLATCAKE_SHARED_DIR to the folder " \
                               "holding traces/ (ctest sets it to <repo>/../shared)"

}  // namespace flatcake::trace::testing
