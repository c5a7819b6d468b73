// LayerVerifier: checksums restored blocks layer by layer, on helper threads, while later layers
// are still being read.
//
// A block's checksum is XXH3-64 over its slices in [layer][plane] order, so each block must be fed
// in layer order; blocks are independent. The verifier therefore partitions the blocks over its
// threads (block j goes to thread j % threads) and each thread walks the layers in order, hashing
// its blocks' slices of layer l once LayerReady(l) has been called. The restore's layer callback
// only signals; the hashing cost leaves the I/O completion path and is spread over the cores.
//
// Thread safety: LayerReady is called from the (serialised, in-order) layer callback; Finish and
// Digest from the thread that owns the verifier, after the restore.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "flatcake/layout.h"
#include "util/checksum.h"

namespace flatcake {

class LayerVerifier {
 public:
  // `blocks`: indices (into `dst`) of the blocks to verify. `threads` = 0 hashes inline in
  // LayerReady (for small restores, where a thread costs more than it saves).
  LayerVerifier(const BlockBuffers& dst, const KvLayout& layout, std::vector<uint32_t> blocks,
                uint32_t threads);
  ~LayerVerifier();
  LayerVerifier(const LayerVerifier&) = delete;
  LayerVerifier& operator=(const LayerVerifier&) = delete;

  // Layer `layer` of every block has landed. REQUIRES: called for layers 0, 1, ... in order.
  void LayerReady(uint32_t layer);
  // Waits until every signalled layer is hashed; stops the threads. Layers never signalled (the
  // restore failed) are skipped, and Digest is then meaningless.
  void Finish();
  // Checksum of blocks[j]. REQUIRES: Finish() returned and every layer was signalled.
  uint64_t Digest(size_t j) const { return sums_.Digest(j); }

 private:
  void HashLayer(uint32_t layer, uint32_t first, uint32_t step);
  void Worker(uint32_t index, uint32_t count);

  const BlockBuffers& dst_;
  const KvLayout layout_;
  const std::vector<uint32_t> blocks_;
  StreamingChecksums sums_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t ready_ = 0;  // GUARDED_BY(mu_): layers [0, ready_) have landed
  bool stop_ = false;   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace flatcake
