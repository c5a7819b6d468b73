// Names for the instances of parameterised tests made from text ("a bad size text" ->
// "a_bad_size_text", "docs/sglang.md" -> "docs_sglang_md"): GoogleTest accepts only letters,
// digits and underscores there. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <string_view>

namespace flatcake::testing {

inline std::string TestNameFrom(std::string_view text) {
  std::string name(text);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// For INSTANTIATE_TEST_SUITE_P over cases that describe themselves in a `what` field.
template <typename Case>
std::string CaseWhatParamName(const ::testing::TestParamInfo<Case>& info) {
  return TestNameFrom(info.param.what);
}

}  // namespace flatcake::testing
