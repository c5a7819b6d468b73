#include "store/read_leases.h"

#include <atomic>

#include "store/flat_store.h"

namespace flatcake {

namespace {
// Owners of lease holders in this process, apart from the daemon's connections (small numbers).
std::atomic<uint64_t> g_next_owner{1};
}  // namespace

FlatStoreLeases::FlatStoreLeases(FlatStore& store)
    : store_(store),
      owner_((uint64_t{1} << 62) + g_next_owner.fetch_add(1)),
      media_(store.shared_media()),
      arena_(store.dram_arena_base()) {}

FlatStoreLeases::~FlatStoreLeases() { (void)store_.ReleaseOwner(owner_); }

Store& FlatStoreLeases::store() { return store_; }

Result<ReadPin> FlatStoreLeases::Pin(std::span<const Key> keys, const KvLayout& layout,
                                     int64_t /*arrival_ns: FC-MAS takes it at Admit*/) {
  return store_.PinRead(owner_, keys, layout);
}

Status FlatStoreLeases::Admit(uint64_t pin, int64_t arrival_ns,
                              std::function<void(Status)> on_admitted) {
  return store_.AdmitRead(owner_, pin, arrival_ns, std::move(on_admitted));
}

void FlatStoreLeases::ReadsDone(uint64_t pin) { (void)store_.FinishRead(owner_, pin); }

Status FlatStoreLeases::Unpin(uint64_t pin, size_t num_keys, const GetResult* delivered) {
  (void)store_.Unpin(owner_, pin);
  if (delivered != nullptr) store_.RecordLeaseRead(num_keys, *delivered);
  return Status::OK();
}

}  // namespace flatcake
