// LineReader: reads a text file line by line, transparently decompressing gzip (zlib gzread) or
// zstd (streaming ZSTD_decompressStream); the codec is chosen by the file's magic bytes, not its
// name. Lines of any length are supported (agentic traces hold a whole session per line).
//
// Thread safety: single-threaded cursor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "flatcake/status.h"

namespace flatcake::trace {

enum class Compression : uint8_t { kNone, kGzip, kZstd };

class LineReader {
 public:
  static Result<std::unique_ptr<LineReader>> Open(const std::string& path);
  virtual ~LineReader() = default;

  // Sets *line to the next line without its "\n" (or "\r\n") and returns true; false at the end
  // of the input. The view stays valid until the next call. A truncated or corrupt compressed
  // stream is an error.
  Result<bool> ReadLine(std::string_view* line);

  // 1-based number of the line last returned.
  uint64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }
  Compression compression() const { return compression_; }

 protected:
  LineReader(std::string path, Compression compression)
      : path_(std::move(path)), compression_(compression) {}
  // Appends up to `cap` decompressed bytes at `dst`; returns the count, 0 at the end.
  virtual Result<size_t> Fill(char* dst, size_t cap) = 0;

 private:
  std::string path_;
  Compression compression_;
  std::string buf_;  // decompressed bytes; [begin_, end_) not yet returned
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t scan_ = 0;  // bytes of [begin_, end_) already searched for '\n'
  bool eof_ = false;
  uint64_t line_number_ = 0;
};

}  // namespace flatcake::trace
