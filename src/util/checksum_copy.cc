// CopySliceWithChecksum and CopySlice (checksum.h): a copy that computes the slice's XXH3-64 from
// the very registers it stores, so each byte crosses the memory bus once each way, as in a plain
// memcpy, instead of once more for a hash pass.
//
// The loop is XXH3-64's long-input algorithm (inputs over 240 bytes) written out with AVX-512 and
// with AVX2, as the library's own vector paths compute it: 64-byte stripes accumulated into eight
// 64-bit lanes against the seeded secret, the lanes scrambled after every 16 stripes (1 KiB), the
// input's last 64 bytes accumulated once more against the secret shifted by 7, and the lanes
// merged. checksum_test holds both to SliceChecksum (the library's dispatched entry point) for
// every length class, seed, alignment and store kind. The widest the CPU has is used: AVX-512
// gathered 8 KiB-256 KiB slices at 11.3 GB/s against AVX2's 10.5 on the development VM (memcpy:
// 13.1). Shorter inputs, and CPUs without AVX2, take memcpy and SliceChecksum.
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
constexpr uint64_t kScrambleSecret = kSecretBytes - kStripe;
constexpr uint64_t kMidsizeMax = 240;  // XXH3_MIDSIZE_MAX: shorter inputs hash another way

// __builtin_cpu_init first: these run during static initialisation.
const bool kHaveAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
const bool kHaveAvx512 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") != 0;
}();

// The lanes' initial values (XXH3_INIT_ACC), 64-byte aligned for either vector width.
struct alignas(64) Lanes {
  uint64_t v[8] = {XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2, XXH_PRIME64_3,
                   XXH_PRIME64_4, XXH_PRIME32_2, XXH_PRIME64_5, XXH_PRIME32_1};
};

// XXH3_initCustomSecret: the default secret's 64-bit words plus and minus the seed in turn.
void InitSecret(uint8_t* secret, uint64_t seed) {
  for (uint64_t i = 0; i < kSecretBytes; i += 16) {
    const uint64_t lo = XXH_readLE64(XXH3_kSecret + i) + seed;
    const uint64_t hi = XXH_readLE64(XXH3_kSecret + i + 8) - seed;
    std::memcpy(secret + i, &lo, 8);
    std::memcpy(secret + i + 8, &hi, 8);
  }
}

// XXH3_mergeAccs and the final avalanche.
uint64_t MergeLanes(const Lanes& lanes, const uint8_t* secret, uint64_t len) {
  uint64_t result = len * XXH_PRIME64_1;
  for (int i = 0; i < 4; ++i) {
    const uint8_t* key = secret + kMergeSecret + 16 * i;
    result += XXH3_mul128_fold64(lanes.v[2 * i] ^ XXH_readLE64(key),
                                 lanes.v[2 * i + 1] ^ XXH_readLE64(key + 8));
  }
  return XXH3_avalanche(result);
}

// The stripes of an input of len bytes: every stripe that starts before its last byte, in whole
// 1 KiB blocks (each followed by a scramble) and then the last partial block's.
struct StripePlan {
  explicit StripePlan(uint64_t len)
      : blocks((len - 1) / kHashBlock),
        stripes(blocks * kStripesPerBlock + ((len - 1) % kHashBlock) / kStripe) {}
  // Whether a scramble follows stripe s.
  bool ScrambleAfter(uint64_t s) const {
    return s % kStripesPerBlock == kStripesPerBlock - 1 && s < blocks * kStripesPerBlock;
  }
  const uint64_t blocks;
  const uint64_t stripes;
};

// --- AVX2: a stripe is two 32-byte halves, the lanes two registers. ---

[[gnu::target("avx2"), gnu::always_inline]] inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// XXH3_accumulate_512 on one stripe held in d[0] (bytes 0-31) and d[1] (32-63).
[[gnu::target("avx2"), gnu::always_inline]] inline void Accumulate256(__m256i* acc,
                                                                      const __m256i* d,
                                                                      const uint8_t* secret) {
  for (int i = 0; i < 2; ++i) {
    const __m256i dk = _mm256_xor_si256(d[i], Load256(secret + 32 * i));
    const __m256i product = _mm256_mul_epu32(dk, _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1)));
    const __m256i swapped = _mm256_shuffle_epi32(d[i], _MM_SHUFFLE(1, 0, 3, 2));
    acc[i] = _mm256_add_epi64(product, _mm256_add_epi64(acc[i], swapped));
  }
}

// XXH3_scrambleAcc.
[[gnu::target("avx2"), gnu::always_inline]] inline void Scramble256(__m256i* acc,
                                                                    const uint8_t* secret) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  for (int i = 0; i < 2; ++i) {
    const __m256i dk = _mm256_xor_si256(_mm256_xor_si256(acc[i], _mm256_srli_epi64(acc[i], 47)),
                                        Load256(secret + 32 * i));
    const __m256i hi = _mm256_shuffle_epi32(dk, _MM_SHUFFLE(0, 3, 0, 1));
    acc[i] = _mm256_add_epi64(_mm256_mul_epu32(dk, prime),
                              _mm256_slli_epi64(_mm256_mul_epu32(hi, prime), 32));
  }
}

template <bool Streaming>
[[gnu::target("avx2"), gnu::always_inline]] inline void Store256(uint8_t* dst, const __m256i* d) {
  for (int i = 0; i < 2; ++i) {
    if constexpr (Streaming) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32 * i), d[i]);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * i), d[i]);
    }
  }
}

// Copies len > 64 bytes (with Hashed, len > kMidsizeMax) and returns XXH3_64bits_withSeed of them
// (0 without Hashed). Streaming: non-temporal stores, not fenced; REQUIRES dst 32-byte aligned.
// `next`: prefetched, stripe by stripe, into L2 (when not null).
template <bool Hashed, bool Streaming>
[[gnu::target("avx2")]] uint64_t CopyAvx2(uint8_t* dst, const uint8_t* src, uint64_t len,
                                          uint64_t seed, const uint8_t* next) {
  alignas(64) uint8_t secret[kSecretBytes];
  Lanes lanes;
  if constexpr (Hashed) InitSecret(secret, seed);
  __m256i acc[2] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.v)),
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.v + 4))};
  const StripePlan plan(len);
  for (uint64_t s = 0; s < plan.stripes; ++s) {
    const uint64_t off = s * kStripe;
    // Stripe s of the next copy into L2 while this one streams: its first reads then hit.
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T1);
    const __m256i d[2] = {Load256(src + off), Load256(src + off + 32)};
    Store256<Streaming>(dst + off, d);
    if constexpr (Hashed) {
      Accumulate256(acc, d, secret + 8 * (s % kStripesPerBlock));
      if (plan.ScrambleAfter(s)) Scramble256(acc, secret + kScrambleSecret);
    }
  }
  // The 1 to 64 bytes left, and the last stripe (the input's last 64 bytes, which overlap the
  // stripes above unless len is a multiple of 64).
  const uint64_t done = plan.stripes * kStripe;
  const __m256i d[2] = {Load256(src + len - kStripe), Load256(src + len - 32)};
  if (len - done == kStripe) {
    Store256<Streaming>(dst + done, d);
  } else {
    std::memcpy(dst + done, src + done, len - done);
  }
  if constexpr (!Hashed) {
    return 0;
  } else {
    Accumulate256(acc, d, secret + kLastStripeSecret);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes.v), acc[0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes.v + 4), acc[1]);
    _mm256_zeroupper();
    return MergeLanes(lanes, secret, len);
  }
}

// --- AVX-512: a stripe and the lanes are one register each. ---

// GCC 12 warns that its own AVX-512 intrinsics use an uninitialised __Y (their
// _mm512_undefined_epi32 placeholders); the warnings are about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// XXH3_accumulate_512.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512i Accumulate512(__m512i acc, __m512i d,
                                                                            const uint8_t* secret) {
  const __m512i dk = _mm512_xor_si512(d, _mm512_loadu_si512(secret));
  const __m512i product = _mm512_mul_epu32(
      dk, _mm512_shuffle_epi32(dk, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(0, 3, 0, 1))));
  const __m512i swapped =
      _mm512_shuffle_epi32(d, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_epi64(product, _mm512_add_epi64(acc, swapped));
}

// XXH3_scrambleAcc.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512i Scramble512(__m512i acc,
                                                                          const uint8_t* secret) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  const __m512i dk = _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47)),
                                      _mm512_loadu_si512(secret));
  const __m512i hi = _mm512_shuffle_epi32(dk, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(0, 3, 0, 1)));
  return _mm512_add_epi64(_mm512_mul_epu32(dk, prime),
                          _mm512_slli_epi64(_mm512_mul_epu32(hi, prime), 32));
}

template <bool Streaming>
[[gnu::target("avx512f"), gnu::always_inline]] inline void Store512(uint8_t* dst, __m512i d) {
  if constexpr (Streaming) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), d);
  } else {
    _mm512_storeu_si512(dst, d);
  }
}

// As CopyAvx2; Streaming REQUIRES dst 64-byte aligned.
template <bool Hashed, bool Streaming>
[[gnu::target("avx512f")]] uint64_t CopyAvx512(uint8_t* dst, const uint8_t* src, uint64_t len,
                                               uint64_t seed, const uint8_t* next) {
  alignas(64) uint8_t secret[kSecretBytes];
  Lanes lanes;
  if constexpr (Hashed) InitSecret(secret, seed);
  __m512i acc = _mm512_load_si512(lanes.v);
  const StripePlan plan(len);
  for (uint64_t s = 0; s < plan.stripes; ++s) {
    const uint64_t off = s * kStripe;
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T1);
    const __m512i d = _mm512_loadu_si512(src + off);
    Store512<Streaming>(dst + off, d);
    if constexpr (Hashed) {
      acc = Accumulate512(acc, d, secret + 8 * (s % kStripesPerBlock));
      if (plan.ScrambleAfter(s)) acc = Scramble512(acc, secret + kScrambleSecret);
    }
  }
  const uint64_t done = plan.stripes * kStripe;
  const __m512i d = _mm512_loadu_si512(src + len - kStripe);
  if (len - done == kStripe) {
    Store512<Streaming>(dst + done, d);
  } else {
    std::memcpy(dst + done, src + done, len - done);
  }
  if constexpr (!Hashed) {
    return 0;
  } else {
    acc = Accumulate512(acc, d, secret + kLastStripeSecret);
    _mm512_store_si512(lanes.v, acc);
    _mm256_zeroupper();
    return MergeLanes(lanes, secret, len);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // FLATCAKE_FUSED_AVX2

bool IsaAvailable(CopyIsa isa) {
  switch (isa) {
    case CopyIsa::kPortable: return true;
#ifdef FLATCAKE_FUSED_AVX2
    case CopyIsa::kAvx2: return kHaveAvx2;
    case CopyIsa::kAvx512: return kHaveAvx512 && kHaveAvx2;
#endif
    default: return false;
  }
}

const CopyIsa kWidestIsa = IsaAvailable(CopyIsa::kAvx512) ? CopyIsa::kAvx512
                           : IsaAvailable(CopyIsa::kAvx2) ? CopyIsa::kAvx2
                                                          : CopyIsa::kPortable;

// The copy on `isa` (REQUIRES available); with `hash`, returns the checksum.
uint64_t CopyOn(CopyIsa isa, bool hash, void* dst_v, const void* src_v, uint64_t len,
                uint32_t position, CopyStores stores, const void* next_v) {
#ifdef FLATCAKE_FUSED_AVX2
  auto* dst = static_cast<uint8_t*>(dst_v);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const auto* next = static_cast<const uint8_t*>(next_v);
  const uintptr_t align = reinterpret_cast<uintptr_t>(dst);
  const bool stream = stores == CopyStores::kStreaming;
  // AVX-512 streams only to 64-byte aligned destinations: AVX2 takes those aligned to 32 only.
  if (isa == CopyIsa::kAvx512 && stream && align % 64 != 0) isa = CopyIsa::kAvx2;
  if (len > (hash ? kMidsizeMax : kStripe) && isa != CopyIsa::kPortable) {
    if (isa == CopyIsa::kAvx512) {
      if (hash) {
        return stream ? CopyAvx512<true, true>(dst, src, len, position, next)
                      : CopyAvx512<true, false>(dst, src, len, position, next);
      }
      return stream ? CopyAvx512<false, true>(dst, src, len, 0, next)
                    : CopyAvx512<false, false>(dst, src, len, 0, next);
    }
    const bool stream256 = stream && align % 32 == 0;
    if (hash) {
      return stream256 ? CopyAvx2<true, true>(dst, src, len, position, next)
                       : CopyAvx2<true, false>(dst, src, len, position, next);
    }
    return stream256 ? CopyAvx2<false, true>(dst, src, len, 0, next)
                     : CopyAvx2<false, false>(dst, src, len, 0, next);
  }
#endif
  std::memcpy(dst_v, src_v, len);
  return hash ? SliceChecksum(dst_v, len, position) : 0;
}

}  // namespace

void FenceStreamingStores() {
#ifdef FLATCAKE_FUSED_AVX2
  _mm_sfence();
#endif
}

uint64_t CopySliceWithChecksum(void* dst, const void* src, uint64_t len, uint32_t position,
                               CopyStores stores, const void* next_src) {
  return CopyOn(kWidestIsa, true, dst, src, len, position, stores, next_src);
}

void CopySlice(void* dst, const void* src, uint64_t len, CopyStores stores, const void* next_src) {
  if (stores == CopyStores::kCached) {
    std::memcpy(dst, src, len);
    return;
  }
  (void)CopyOn(kWidestIsa, false, dst, src, len, 0, stores, next_src);
}

bool TEST_CopyIsaAvailable(CopyIsa isa) { return IsaAvailable(isa); }

uint64_t TEST_CopySliceOn(CopyIsa isa, bool hash, void* dst, const void* src, uint64_t len,
                          uint32_t position, CopyStores stores) {
  return CopyOn(isa, hash, dst, src, len, position, stores, nullptr);
}

}  // namespace flatcake
