#include "util/temp_dir.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace flatcake {

TempDir::TempDir(const std::string& prefix, std::string base) {
  if (base.empty()) {
    const char* env = std::getenv("TMPDIR");
    base = env ? env : "/tmp";
  }
  std::string tmpl = base + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* p = ::mkdtemp(buf.data());
  path_ = p ? p : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace flatcake
