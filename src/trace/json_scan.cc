#include "trace/json_scan.h"

#include <charconv>
#include <cmath>

namespace flatcake::trace {
namespace {

constexpr int kMaxDepth = 64;
// Largest integer a double holds exactly; integral floats beyond it are refused as ambiguous.
constexpr double kMaxExactDouble = 9007199254740992.0;

bool IsNumberChar(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

Status JsonCursor::Error(std::string_view what) const {
  std::string msg = "column " + std::to_string(column()) + ": " + std::string(what);
  return Status::Corruption(msg);
}

Status JsonCursor::ExpectEnd() {
  SkipWs();
  if (pos_ != text_.size()) return Error("unexpected trailing characters");
  return Status::OK();
}

bool JsonCursor::PeekNull() {
  SkipWs();
  if (text_.substr(pos_, 4) == "null") {
    pos_ += 4;
    return true;
  }
  return false;
}

Status JsonCursor::ParseKey(std::string_view* key) {
  SkipWs();
  if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
  // Fast path: no escapes, return a view into the text.
  size_t start = pos_ + 1;
  size_t i = start;
  while (i < text_.size() && text_[i] != '"' && text_[i] != '\\') ++i;
  if (i < text_.size() && text_[i] == '"') {
    *key = text_.substr(start, i - start);
    pos_ = i + 1;
    return Status::OK();
  }
  FC_RETURN_IF_ERROR(ParseString(&key_scratch_));
  *key = key_scratch_;
  return Status::OK();
}

Status JsonCursor::ParseString(std::string* out) {
  SkipWs();
  if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a string");
  ++pos_;
  out->clear();
  while (pos_ < text_.size()) {
    char c = text_[pos_++];
    if (c == '"') return Status::OK();
    if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (pos_ >= text_.size()) break;
    char e = text_[pos_++];
    switch (e) {
      case '"': out->push_back('"'); break;
      case '\\': out->push_back('\\'); break;
      case '/': out->push_back('/'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        if (pos_ + 4 > text_.size()) return Error("short \\u escape");
        uint32_t cp = 0;
        auto [p, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, cp, 16);
        if (ec != std::errc() || p != text_.data() + pos_ + 4) return Error("bad \\u escape");
        pos_ += 4;
        AppendUtf8(cp, out);  // surrogate pairs are kept as two code points; names only
        break;
      }
      default: return Error("bad escape in string");
    }
  }
  return Error("unterminated string");
}

Status JsonCursor::ParseDouble(double* out) {
  SkipWs();
  size_t end = pos_;
  while (end < text_.size() && IsNumberChar(text_[end])) ++end;
  const char* first = text_.data() + pos_;
  if (end > pos_ && text_[pos_] == '+') return Error("expected a number");
  auto [p, ec] = std::from_chars(first, text_.data() + end, *out);
  if (ec != std::errc() || p != text_.data() + end || end == pos_)
    return Error("expected a number");
  if (!std::isfinite(*out)) return Error("number out of range");
  pos_ = end;
  return Status::OK();
}

Status JsonCursor::ParseUint64(uint64_t* out) {
  SkipWs();
  // Fast path: plain digits.
  size_t i = pos_;
  uint64_t v = 0;
  while (i < text_.size() && text_[i] >= '0' && text_[i] <= '9') {
    uint64_t d = static_cast<uint64_t>(text_[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return Error("integer out of range");
    v = v * 10 + d;
    ++i;
  }
  if (i > pos_ && (i == text_.size() || !IsNumberChar(text_[i]))) {
    *out = v;
    pos_ = i;
    return Status::OK();
  }
  double d = 0;
  size_t start = pos_;
  FC_RETURN_IF_ERROR(ParseDouble(&d));
  if (d < 0 || d != std::floor(d) || d > kMaxExactDouble) {
    pos_ = start;
    return Error("expected a non-negative integer");
  }
  *out = static_cast<uint64_t>(d);
  return Status::OK();
}

Status JsonCursor::ParseInt64(int64_t* out) {
  SkipWs();
  bool neg = pos_ < text_.size() && text_[pos_] == '-';
  if (neg) ++pos_;
  uint64_t mag = 0;
  size_t start = pos_;
  Status s = ParseUint64(&mag);
  if (!s.ok()) {
    pos_ = start - (neg ? 1 : 0);
    return Error("expected an integer");
  }
  if (mag > static_cast<uint64_t>(INT64_MAX) + (neg ? 1 : 0)) return Error("integer out of range");
  *out = neg ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
  return Status::OK();
}

Status JsonCursor::ParseUintArray(std::vector<uint64_t>* out) {
  out->clear();
  return ParseArray([&]() -> Status {
    uint64_t v = 0;
    FC_RETURN_IF_ERROR(ParseUint64(&v));
    out->push_back(v);
    return Status::OK();
  });
}

Status JsonCursor::SkipValue() { return SkipValueAt(0); }

Status JsonCursor::SkipValueAt(int depth) {
  if (depth > kMaxDepth) return Error("nesting too deep");
  SkipWs();
  if (pos_ >= text_.size()) return Error("expected a value");
  char c = text_[pos_];
  if (c == '{') {
    return ParseObject([&](std::string_view) { return SkipValueAt(depth + 1); });
  }
  if (c == '[') return ParseArray([&]() { return SkipValueAt(depth + 1); });
  if (c == '"') return ParseString(&key_scratch_);
  for (std::string_view word : {"true", "false", "null"}) {
    if (text_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return Status::OK();
    }
  }
  double d = 0;
  return ParseDouble(&d);
}

}  // namespace flatcake::trace
