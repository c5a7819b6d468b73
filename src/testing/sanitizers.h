// Whether this test was built with AddressSanitizer (the test command's clang tree), for tests
// that scale their work down there or skip a timing check.
#pragma once

namespace flatcake::testing {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLATCAKE_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(FLATCAKE_TEST_ASAN)
inline constexpr bool kBuiltWithAsan = true;
#else
inline constexpr bool kBuiltWithAsan = false;
#endif

}  // namespace flatcake::testing
