// LayeredRestore: one restore of many blocks through a RestoreReader, first layer first.
//
// A large restore goes out as two reader restores: its first layer, then the rest. The first
// layer's slices and plan are small, so its reads start at once, and the reader issues them before
// any of the rest's, while the starting thread is still building and planning the (much larger)
// rest; otherwise a long session's first layer would wait for the whole session's plan. The rest
// is started `after` the first layer: it issues once the first layer's reads are back from the
// device, so they do not share it with a window of later layers. The layers are still reported
// once each and in order: a layer of the rest that completes before the first layer is held back
// until the first layer is reported. A failed first layer cancels the rest (one reader restore
// stops issuing after its first error, and so do the two). A small restore is one reader restore.
//
// Thread safety: Start returns at once; the callbacks run on the reader's I/O workers (on_done
// inline in Start when nothing could be started). Cancel may be called from any thread, any time.
// The object stays alive until on_done has run, whoever else holds it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "io/restore_reader.h"
#include "util/thread_annotations.h"

namespace flatcake {

class LayeredRestore {
 public:
  // A restore of at least this many slices starts its first layer as a reader restore of its own.
  static constexpr uint64_t kSplitSlices = 4096;

  // Appends the slice reads of layers [first, last) to `*out`.
  using SliceSource =
      std::function<void(uint32_t first, uint32_t last, std::vector<SliceRead>* out)>;
  // Runs once, after the last layer was reported: the first error (OK when every read landed)
  // and the reads' stats summed over both reader restores.
  using DoneCallback = std::function<void(const Status& status, const ReaderStats& stats)>;

  // Restores the `total_slices` slices `source` builds, of layers [first_layer, end_layer).
  // `on_layer(l)` runs once per layer of that range that landed whole, in increasing order;
  // `on_slice` (may be null) as for RestoreReader::Start. `reader` must outlive the restore.
  static std::shared_ptr<LayeredRestore> Start(RestoreReader& reader, uint64_t total_slices,
                                               uint32_t first_layer, uint32_t end_layer,
                                               const SliceSource& source,
                                               std::function<void(uint32_t)> on_layer,
                                               SliceCallback on_slice, DoneCallback on_done);

  // Fails the restore with `why` unless it already failed: nothing more is issued, reads in
  // flight land, and on_done reports `why`. A no-op once done.
  void Cancel(const Status& why);

  LayeredRestore(const LayeredRestore&) = delete;
  LayeredRestore& operator=(const LayeredRestore&) = delete;

 private:
  LayeredRestore(bool split, uint32_t first_layer, std::function<void(uint32_t)> on_layer,
                 DoneCallback on_done);
  // One reader restore ended; the last one completes the layered restore.
  void PartDone(const Status& st, const ReaderStats& rs) EXCLUDES(mu_);
  // Records the first error and cancels both parts.
  void Fail(const Status& st) EXCLUDES(mu_);
  void OnFirstLayer(uint32_t layer, const Status& st) EXCLUDES(gate_mu_);
  void OnRestLayer(uint32_t layer, const Status& st) EXCLUDES(gate_mu_);
  // Keeps `h` for Cancel, unless the restore is over (then it is not needed any more).
  void Hold(std::shared_ptr<ReaderHandle> h, bool first) EXCLUDES(mu_);

  const bool split_;
  const uint32_t first_layer_;  // the range's first: the first part's one layer when split
  const std::function<void(uint32_t)> on_layer_;
  const DoneCallback on_done_;

  Mutex mu_;
  std::shared_ptr<ReaderHandle> first_ GUARDED_BY(mu_);  // dropped when done
  std::shared_ptr<ReaderHandle> rest_ GUARDED_BY(mu_);   // dropped when done
  Status status_ GUARDED_BY(mu_);                        // the first error
  ReaderStats stats_ GUARDED_BY(mu_);
  int parts_left_ GUARDED_BY(mu_) = 0;
  bool done_ GUARDED_BY(mu_) = false;

  // Layer reports of a split restore, merged into one ordered stream. Taken before mu_ (a failed
  // first layer fails the restore under it).
  Mutex gate_mu_ ACQUIRED_BEFORE(mu_);
  bool first_reported_ GUARDED_BY(gate_mu_) = false;  // the first part's layer went out
  std::vector<uint32_t> held_ GUARDED_BY(gate_mu_);   // the rest's OK layers that came earlier
};

}  // namespace flatcake
