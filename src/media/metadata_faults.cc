#include "media/metadata_faults.h"

#include <atomic>
#include <memory>
#include <utility>

namespace flatcake {
namespace {

// Read on every metadata op: an atomic shared_ptr, so that setting it needs no lock there.
std::shared_ptr<const MetadataFaultHook>& Hook() {
  static std::shared_ptr<const MetadataFaultHook> hook;
  return hook;
}

}  // namespace

void SetMetadataFaultHook(MetadataFaultHook hook) {
  auto next = hook ? std::make_shared<const MetadataFaultHook>(std::move(hook)) : nullptr;
  std::atomic_store(&Hook(), std::move(next));
}

int MetadataFault(MetadataOp op) {
  const std::shared_ptr<const MetadataFaultHook> hook = std::atomic_load(&Hook());
  return hook ? (*hook)(op) : 0;
}

}  // namespace flatcake
