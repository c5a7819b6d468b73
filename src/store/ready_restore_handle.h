// ReadyRestoreHandle: a RestoreHandle that is done from the start. A store whose restore ran to
// completion on the calling thread (the tiered baseline's synchronous Get, or a restore that
// failed before anything was read) returns its outcome through one.
//
// Thread safety: immutable after construction; every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "flatcake/status.h"
#include "flatcake/store.h"

namespace flatcake {

class ReadyRestoreHandle final : public RestoreHandle {
 public:
  // `num_layers`: the layout's layer count, which bounds WaitLayer.
  ReadyRestoreHandle(Result<GetResult> result, uint32_t num_layers)
      : result_(std::move(result)), num_layers_(num_layers) {}

  Result<GetResult> Wait() override { return result_; }
  bool WaitFor(std::chrono::nanoseconds) override { return true; }
  Status WaitLayer(uint32_t layer) override {
    if (layer >= num_layers_) {
      return Status::InvalidArgument("restore: layer " + std::to_string(layer) + " out of range (" +
                                     std::to_string(num_layers_) + " layers)");
    }
    return result_.status();
  }
  bool done() const override { return true; }
  void Cancel() override {}

 private:
  const Result<GetResult> result_;
  const uint32_t num_layers_;
};

}  // namespace flatcake
