#include "store/layer_verifier.h"

namespace flatcake {

LayerVerifier::LayerVerifier(const BlockBuffers& dst, const KvLayout& layout,
                             std::vector<uint32_t> blocks, uint32_t threads)
    : dst_(dst), layout_(layout), blocks_(std::move(blocks)), sums_(blocks_.size()) {
  for (uint32_t i = 0; i < threads; ++i)
    threads_.emplace_back(&LayerVerifier::Worker, this, i, threads);
}

LayerVerifier::~LayerVerifier() { Finish(); }

void LayerVerifier::HashLayer(uint32_t layer, uint32_t first, uint32_t step) {
  for (size_t j = first; j < blocks_.size(); j += step) {
    for (uint32_t p = 0; p < layout_.num_planes; ++p) {
      sums_.Update(j, SliceAddress(dst_, layout_, blocks_[j], layer, p), layout_.slice_bytes);
    }
  }
}

void LayerVerifier::LayerReady(uint32_t layer) {
  if (threads_.empty()) {
    HashLayer(layer, 0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = layer + 1;
  cv_.notify_all();
}

void LayerVerifier::Worker(uint32_t index, uint32_t count) {
  for (uint32_t l = 0; l < layout_.num_layers; ++l) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_ > l || stop_; });
      if (ready_ <= l) return;  // stopped before this layer arrived (the restore failed)
    }
    HashLayer(l, index, count);
  }
}

void LayerVerifier::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // workers finish every signalled layer, then leave
    cv_.notify_all();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace flatcake
