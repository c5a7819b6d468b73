// CopySliceWithChecksum and CopySlice (checksum.h): a copy that computes the slice's XXH3-64 from
// the very registers it stores, so each byte crosses the memory bus once each way, as in a plain
// memcpy, instead of once more for a hash pass.
//
// The loop is XXH3-64's long-input algorithm (inputs over 240 bytes) written out with AVX2, as the
// library's own AVX2 path computes it: 64-byte stripes accumulated into eight 64-bit lanes against
// the seeded secret, the lanes scrambled after every 16 stripes (1 KiB), the input's last 64 bytes
// accumulated once more against the secret shifted by 7, and the lanes merged. checksum_test holds
// it to SliceChecksum (the library's dispatched entry point) for every length class, seed,
// alignment and store kind. Shorter inputs, and CPUs without AVX2, take memcpy and SliceChecksum.
#include <cstring>

#include "util/checksum.h"

#if defined(__x86_64__)
#include <immintrin.h>
// The XXH3 constants and scalar helpers (the default secret, the primes, the final fold and
// avalanche) from the header's inline implementation, the source the library is built from.
#define XXH_INLINE_ALL
#include <xxhash.h>
#define FLATCAKE_FUSED_AVX2 1
#endif

namespace flatcake {
namespace {

#ifdef FLATCAKE_FUSED_AVX2

constexpr uint64_t kStripe = 64;                                     // XXH_STRIPE_LEN
constexpr uint64_t kSecretBytes = 192;                               // XXH_SECRET_DEFAULT_SIZE
constexpr uint64_t kStripesPerBlock = (kSecretBytes - kStripe) / 8;  // 16
constexpr uint64_t kHashBlock = kStripe * kStripesPerBlock;          // 1 KiB between scrambles
constexpr uint64_t kLastStripeSecret = kSecretBytes - kStripe - 7;   // XXH_SECRET_LASTACC_START
constexpr uint64_t kMergeSecret = 11;                                // XXH_SECRET_MERGEACCS_START
constexpr uint64_t kMidsizeMax = 240;  // XXH3_MIDSIZE_MAX: shorter inputs hash another way

const bool kHaveAvx2 = [] {
  __builtin_cpu_init();  // this runs during static initialisation
  return __builtin_cpu_supports("avx2") != 0;
}();

// XXH3_accumulate_512 on one stripe held in d0 (bytes 0-31) and d1 (32-63).
[[gnu::target("avx2"), gnu::always_inline]] inline void Accumulate(__m256i* acc, __m256i d0,
                                                                   __m256i d1,
                                                                   const uint8_t* secret) {
  const __m256i d[2] = {d0, d1};
  for (int i = 0; i < 2; ++i) {
    const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + 32 * i));
    const __m256i dk = _mm256_xor_si256(d[i], key);
    const __m256i product = _mm256_mul_epu32(dk, _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1)));
    const __m256i swapped = _mm256_shuffle_epi32(d[i], _MM_SHUFFLE(1, 0, 3, 2));
    acc[i] = _mm256_add_epi64(product, _mm256_add_epi64(acc[i], swapped));
  }
}

// XXH3_scrambleAcc.
[[gnu::target("avx2"), gnu::always_inline]] inline void Scramble(__m256i* acc,
                                                                 const uint8_t* secret) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  for (int i = 0; i < 2; ++i) {
    const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + 32 * i));
    const __m256i dk =
        _mm256_xor_si256(_mm256_xor_si256(acc[i], _mm256_srli_epi64(acc[i], 47)), key);
    const __m256i hi = _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1));
    acc[i] = _mm256_add_epi64(_mm256_mul_epu32(dk, prime),
                              _mm256_slli_epi64(_mm256_mul_epu32(hi, prime), 32));
  }
}

[[gnu::target("avx2"), gnu::always_inline]] inline __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

template <bool kStream>
[[gnu::target("avx2"), gnu::always_inline]] inline void StoreStripe(uint8_t* dst, __m256i d0,
                                                                    __m256i d1) {
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), d0);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), d0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
  }
}

// Copies len > 64 bytes (with kHash, len > kMidsizeMax) and returns XXH3_64bits_withSeed of them
// (0 without kHash). kStream: non-temporal stores, not fenced; REQUIRES dst 32-byte aligned.
template <bool kHash, bool kStream>
[[gnu::target("avx2")]] uint64_t CopyAvx2(uint8_t* dst, const uint8_t* src, uint64_t len,
                                          uint64_t seed, const uint8_t* next) {
  alignas(32) uint8_t secret[kSecretBytes];
  alignas(32) uint64_t lanes[8] = {XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2, XXH_PRIME64_3,
                                   XXH_PRIME64_4, XXH_PRIME32_2, XXH_PRIME64_5, XXH_PRIME32_1};
  if constexpr (kHash) {
    // XXH3_initCustomSecret: the default secret's 64-bit words plus and minus the seed in turn.
    for (uint64_t i = 0; i < kSecretBytes; i += 16) {
      const uint64_t lo = XXH_readLE64(XXH3_kSecret + i) + seed;
      const uint64_t hi = XXH_readLE64(XXH3_kSecret + i + 8) - seed;
      std::memcpy(secret + i, &lo, 8);
      std::memcpy(secret + i + 8, &hi, 8);
    }
  }
  __m256i acc[2] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes)),
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 4))};
  // Whole 1 KiB blocks, then the stripes of the last partial block: every stripe that starts
  // before the input's last byte, as XXH3 counts them.
  const uint64_t blocks = (len - 1) / kHashBlock;
  const uint64_t stripes = blocks * kStripesPerBlock + ((len - 1) % kHashBlock) / kStripe;
  for (uint64_t s = 0; s < stripes; ++s) {
    const uint64_t off = s * kStripe;
    // Stripe s of the next copy into L2 while this one streams: its first reads then hit.
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T1);
    const __m256i d0 = Load(src + off), d1 = Load(src + off + 32);
    StoreStripe<kStream>(dst + off, d0, d1);
    if constexpr (kHash) {
      const uint64_t in_block = s % kStripesPerBlock;
      Accumulate(acc, d0, d1, secret + 8 * in_block);
      if (in_block == kStripesPerBlock - 1 && s < blocks * kStripesPerBlock) {
        Scramble(acc, secret + kSecretBytes - kStripe);
      }
    }
  }
  // The 1 to 64 bytes left, and the last stripe (the input's last 64 bytes, which overlap the
  // stripes above unless len is a multiple of 64).
  const uint64_t done = stripes * kStripe;
  const __m256i d0 = Load(src + len - kStripe), d1 = Load(src + len - 32);
  if (len - done == kStripe) {
    StoreStripe<kStream>(dst + done, d0, d1);
  } else {
    std::memcpy(dst + done, src + done, len - done);
  }
  if constexpr (!kHash) {
    return 0;
  } else {
    Accumulate(acc, d0, d1, secret + kLastStripeSecret);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 4), acc[1]);
    _mm256_zeroupper();
    // XXH3_mergeAccs.
    uint64_t result = len * XXH_PRIME64_1;
    for (int i = 0; i < 4; ++i) {
      const uint8_t* key = secret + kMergeSecret + 16 * i;
      result += XXH3_mul128_fold64(lanes[2 * i] ^ XXH_readLE64(key),
                                   lanes[2 * i + 1] ^ XXH_readLE64(key + 8));
    }
    return XXH3_avalanche(result);
  }
}

bool Streamable(const void* dst, CopyStores stores) {
  return stores == CopyStores::kStreaming && reinterpret_cast<uintptr_t>(dst) % 32 == 0;
}

#endif  // FLATCAKE_FUSED_AVX2

}  // namespace

void FenceStreamingStores() {
#ifdef FLATCAKE_FUSED_AVX2
  _mm_sfence();
#endif
}

uint64_t CopySliceWithChecksum(void* dst, const void* src, uint64_t len, uint32_t position,
                               CopyStores stores, const void* next_src) {
#ifdef FLATCAKE_FUSED_AVX2
  if (kHaveAvx2 && len > kMidsizeMax) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    const auto* next = static_cast<const uint8_t*>(next_src);
    return Streamable(dst, stores) ? CopyAvx2<true, true>(d, s, len, position, next)
                                   : CopyAvx2<true, false>(d, s, len, position, next);
  }
#endif
  std::memcpy(dst, src, len);
  return SliceChecksum(dst, len, position);
}

void CopySlice(void* dst, const void* src, uint64_t len, CopyStores stores, const void* next_src) {
#ifdef FLATCAKE_FUSED_AVX2
  if (kHaveAvx2 && len > kStripe && Streamable(dst, stores)) {
    CopyAvx2<false, true>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), len, 0,
                          static_cast<const uint8_t*>(next_src));
    return;
  }
#endif
  std::memcpy(dst, src, len);
}

}  // namespace flatcake
