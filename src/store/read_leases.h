// ReadLeases: the store's read leases as a data half outside the store uses them: the GPU path
// (gpu/gpu_transfer.h) pins a batch's hits, has FC-MAS admit the read, moves the bytes itself
// from this process's view of the media, then gives the pin back with what it delivered.
//
// Two stores hand them out: the embedded FlatStore (FlatStoreLeases, below: its lease calls under
// one owner of its own) and the node daemon's client (serve/remote_store.h,
// RemoteStore::OpenReadLeases: PinRead and Unpin over one connection to the daemon, the arena as
// this process maps it, the pool files as this process opens them).
//
// Thread safety: every method from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "flatcake/store.h"
#include "store/data_plan.h"

namespace flatcake {

class FlatStore;

class ReadLeases {
 public:
  virtual ~ReadLeases() = default;

  // The store the leases are of: its options, and the puts of a data half that writes.
  virtual Store& store() = 0;
  // The DRAM arena's byte 0 as this process maps it (null: no DRAM) and its size; the SSD pool's
  // geometry (no paths: no SSD) with pool offsets as PinnedHit::offset gives them.
  virtual const uint8_t* dram_arena() const = 0;
  virtual uint64_t dram_bytes() const = 0;
  virtual const SsdPoolGeometry& ssd_geometry() const = 0;

  // Pins the hits of `keys` (FlatStore::PinRead): id 0 and nothing held when none.
  // InvalidArgument for a bad layout or a hit stored with another one; IOError when the store is
  // out of reach (the daemon's connection broke).
  virtual Result<ReadPin> Pin(std::span<const Key> keys, const KvLayout& layout,
                              int64_t arrival_ns) = 0;
  // FC-MAS for pin `pin` (FlatStore::AdmitRead): `on_admitted` runs once, OK when the reads may
  // start. The daemon's client's pins come back admitted, and it runs at once.
  virtual Status Admit(uint64_t pin, int64_t arrival_ns,
                       std::function<void(Status)> on_admitted) = 0;
  // The admitted reads of pin `pin` are done: its share of the read window goes back.
  virtual void ReadsDone(uint64_t pin) = 0;
  // Drops pin `pin`, recording what its reads delivered of its `num_keys` keys (the store counts
  // a lease's reads as its own restores); null: nothing was read, nothing is recorded. An error
  // says the pin was lost before this (the daemon's connection broke, releasing it): what was
  // read is not trusted.
  virtual Status Unpin(uint64_t pin, size_t num_keys, const GetResult* delivered) = 0;
};

// The embedded store's leases under an owner of their own; every lease still held ends with it.
class FlatStoreLeases final : public ReadLeases {
 public:
  explicit FlatStoreLeases(FlatStore& store);
  ~FlatStoreLeases() override;
  FlatStoreLeases(const FlatStoreLeases&) = delete;
  FlatStoreLeases& operator=(const FlatStoreLeases&) = delete;

  Store& store() override;
  const uint8_t* dram_arena() const override { return arena_; }
  uint64_t dram_bytes() const override { return media_.dram_bytes; }
  const SsdPoolGeometry& ssd_geometry() const override { return media_.ssd; }
  Result<ReadPin> Pin(std::span<const Key> keys, const KvLayout& layout,
                      int64_t arrival_ns) override;
  Status Admit(uint64_t pin, int64_t arrival_ns, std::function<void(Status)> on_admitted) override;
  void ReadsDone(uint64_t pin) override;
  Status Unpin(uint64_t pin, size_t num_keys, const GetResult* delivered) override;

 private:
  FlatStore& store_;
  const uint64_t owner_;
  const SharedMedia media_;
  const uint8_t* const arena_;
};

}  // namespace flatcake
