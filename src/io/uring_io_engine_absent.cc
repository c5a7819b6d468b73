// UringIoEngine in a build without io_uring (FLATCAKE_WITH_URING=OFF, or AUTO without liburing):
// the engine is not compiled, and Create says so, so MakeIoEngine's `auto` falls back to the
// preadv pool and an explicit `uring` request fails with this message. No engine is ever made, so
// the other members are unreachable; they exist only to keep the class linkable for code (tests)
// that names it.
#include "io/uring_io_engine.h"

namespace flatcake {

class UringIoEngine::Worker {};

bool UringIoEngine::CompiledIn() { return false; }

Result<std::unique_ptr<UringIoEngine>> UringIoEngine::Create(const Options& options) {
  return Status::Unsupported(
      "this build has no io_uring engine (configured with FLATCAKE_WITH_URING=OFF, or without "
      "liburing-dev); use the preadv or posix engine");
}

UringIoEngine::~UringIoEngine() = default;

Status UringIoEngine::RegisterFiles(std::span<const int> fds) {
  return Status::Unsupported("no io_uring in this build");
}

Status UringIoEngine::RegisterBuffers(std::span<const IoBufferRegion> regions) {
  return Status::Unsupported("no io_uring in this build");
}

void UringIoEngine::UnregisterBuffers(std::span<const IoBufferRegion> regions) {}

void UringIoEngine::Submit(std::span<const IoOp> ops, IoCompletionSink* sink) {
  for (const IoOp& op : ops)
    sink->OnIoComplete(op.tag, Status::Unsupported("no io_uring in this build"));
}

UringIoEngine::Stats UringIoEngine::stats() const { return Stats{}; }

}  // namespace flatcake
