// Puts a batch of KV blocks into a FlatCake store, restores them into other memory and checks
// every byte: the smallest integration of the public API (include/flatcake/store.h), built
// against an installed FlatCake (CMakeLists.txt beside it). With an SSD directory as argument,
// half the blocks go to SSD, the rest to DRAM.
//
//   flatcake_consumer [SSD_DIR]   exit 0 when every block came back byte-exact
#include <flatcake/store.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kBlocks = 8;

int Fail(const std::string& what, const flatcake::Status& st) {
  std::fprintf(stderr, "flatcake_consumer: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  flatcake::StoreOptions options;
  options.dram_bytes = 64ull << 20;
  if (argc > 1) {
    options.ssd_dirs = {argv[1]};
    options.ssd_bytes = 64ull << 20;
    options.ssd_file_bytes = 16ull << 20;
  }
  auto opened = flatcake::Store::Open(options);
  if (!opened.ok()) return Fail("open", opened.status());
  flatcake::Store& store = **opened;

  const flatcake::KvLayout layout{.num_layers = 4, .num_planes = 2, .slice_bytes = 4096};
  std::vector<flatcake::Key> keys;
  std::vector<std::vector<uint8_t>> src(kBlocks), dst(kBlocks);
  std::vector<void*> src_ptrs, dst_ptrs;
  for (uint32_t b = 0; b < kBlocks; ++b) {
    keys.push_back(flatcake::KeyFromString("consumer/block/" + std::to_string(b)));
    src[b].resize(layout.block_bytes());
    for (size_t i = 0; i < src[b].size(); ++i) src[b][i] = static_cast<uint8_t>(i * 131 + b);
    dst[b].assign(layout.block_bytes(), 0);
    src_ptrs.push_back(src[b].data());
    dst_ptrs.push_back(dst[b].data());
  }
  const uint32_t half = argc > 1 ? kBlocks / 2 : kBlocks;
  const std::pair<uint32_t, uint32_t> batches[] = {{0, half}, {half, kBlocks}};
  for (const auto& [first, last] : batches) {
    if (first == last) continue;
    flatcake::WriteHints hints;
    hints.session = "consumer";
    hints.force_medium = first == 0 ? flatcake::MediaType::kDram : flatcake::MediaType::kSsd;
    const flatcake::BlockBuffers buffers{
        .ptrs = std::span<void* const>(src_ptrs).subspan(first, last - first)};
    auto put = store.Put(std::span(keys).subspan(first, last - first), layout, buffers, hints);
    if (!put.ok()) return Fail("put", put.status());
  }
  auto got = store.Get(keys, layout, flatcake::BlockBuffers{.ptrs = dst_ptrs});
  if (!got.ok()) return Fail("get", got.status());
  for (uint32_t b = 0; b < kBlocks; ++b) {
    if (!got->found[b] || std::memcmp(src[b].data(), dst[b].data(), src[b].size()) != 0) {
      std::fprintf(stderr, "flatcake_consumer: block %u came back wrong (found %d)\n", b,
                   got->found[b]);
      return 1;
    }
  }
  std::printf(
      "flatcake_consumer: %u blocks put and restored byte-exact (%llu bytes from DRAM, "
      "%llu from SSD)\n",
      kBlocks, static_cast<unsigned long long>(got->bytes_from_dram),
      static_cast<unsigned long long>(got->bytes_from_ssd));
  return 0;
}
