// TempDir: a fresh scratch directory, removed with its contents on destruction. The benchmarks and
// the replay use one when the user names no directory; the tests use one per test. Not
// thread-safe; each owner has its own.
#pragma once

#include <string>

namespace flatcake {

class TempDir {
 public:
  // Creates `<base>/<prefix>-XXXXXX`; `base` empty: $TMPDIR, else /tmp. On failure path() is
  // empty and ok() false.
  explicit TempDir(const std::string& prefix = "flatcake-test", std::string base = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace flatcake
