// JsonCursor: a small pull scanner for one JSON text (one trace line). Readers walk an object's
// members and parse only the fields they need, skipping the rest, which keeps `trace stats` fast
// without building a DOM per line. Errors are Corruption statuses naming the byte column.
//
// Thread safety: a cursor is a value over a caller-owned string_view; single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::trace {

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text) : text_(text) {}

  // Walks the members of the object at the cursor: for each member `on_member(key)` must consume
  // the value (with a Parse*/Skip call) and return OK.
  template <typename F>
  Status ParseObject(F&& on_member);
  // Walks the elements of the array at the cursor; `on_element()` consumes each one.
  template <typename F>
  Status ParseArray(F&& on_element);

  Status ParseString(std::string* out);
  Status ParseDouble(double* out);
  // Integers; an integral value written as a float ("12.0", "1e3") is accepted, a fraction or a
  // value out of range is not.
  Status ParseUint64(uint64_t* out);
  Status ParseInt64(int64_t* out);
  // An array of non-negative integers (the hot path: hash_ids).
  Status ParseUintArray(std::vector<uint64_t>* out);
  // Skips any value (bounded nesting depth).
  Status SkipValue();
  // Requires that only whitespace remains.
  Status ExpectEnd();
  bool PeekNull();  // consumes and returns true if the next value is `null`

  Status Error(std::string_view what) const;
  size_t column() const { return pos_ + 1; }

 private:
  void SkipWs() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipWs();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status ParseKey(std::string_view* key);
  Status SkipValueAt(int depth);

  std::string_view text_;
  size_t pos_ = 0;
  std::string key_scratch_;  // keys with escapes are decoded here
};

template <typename F>
Status JsonCursor::ParseObject(F&& on_member) {
  if (!Consume('{')) return Error("expected '{'");
  if (Consume('}')) return Status::OK();
  for (;;) {
    std::string_view key;
    FC_RETURN_IF_ERROR(ParseKey(&key));
    if (!Consume(':')) return Error("expected ':'");
    FC_RETURN_IF_ERROR(on_member(key));
    if (Consume(',')) continue;
    if (Consume('}')) return Status::OK();
    return Error("expected ',' or '}'");
  }
}

template <typename F>
Status JsonCursor::ParseArray(F&& on_element) {
  if (!Consume('[')) return Error("expected '['");
  if (Consume(']')) return Status::OK();
  for (;;) {
    FC_RETURN_IF_ERROR(on_element());
    if (Consume(',')) continue;
    if (Consume(']')) return Status::OK();
    return Error("expected ',' or ']'");
  }
}

}  // namespace flatcake::trace
