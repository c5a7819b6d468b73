// Fuzz target: the trace readers (trace/trace.h): format detection, the Mooncake, Qwen and
// agentic JSON-lines parsers, the JSON scanner under them, and the gzip and zstd decoders the
// line reader picks by magic bytes. The first byte picks the format (auto or one of the three),
// whether malformed lines are skipped, and the block size; the rest is the file, which the reader
// opens from an in-memory file (memfd). Every input must end in requests or a Status.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trace/trace.h"

namespace {

using namespace flatcake::trace;

// One memfd for the whole run, rewritten for each input.
int TraceFd() {
  static const int fd = [] {
    const int f = memfd_create("fuzz-trace", 0);
    if (f < 0) std::abort();
    return f;
  }();
  return fd;
}

bool Store(const uint8_t* data, size_t size) {
  const int fd = TraceFd();
  if (ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ReaderOptions options;
  options.format = static_cast<TraceFormat>(mode % 4);
  options.skip_bad = (mode & 4) != 0;
  options.block_tokens = (mode & 8) != 0 ? 1u + (mode >> 4) : 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)DetectTraceFormat(text.substr(0, text.find('\n')));
  if (!Store(data + 1, size - 1)) std::abort();
  auto reader = OpenTrace("/proc/self/fd/" + std::to_string(TraceFd()), options);
  if (!reader.ok()) return 0;
  TraceRequest r;
  // A bounded number of requests: an input is a few KiB, its requests fewer.
  for (int i = 0; i < 100000; ++i) {
    auto more = (*reader)->Next(&r);
    if (!more.ok() || !*more) break;
  }
  return 0;
}
