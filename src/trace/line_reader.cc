#include "trace/line_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace flatcake::trace {
namespace {

constexpr size_t kChunk = 1 << 20;
// The buffer starts this small and doubles at each refill up to kChunk: a short trace (a test's,
// a fuzz input) reads without allocating and zeroing a whole chunk.
constexpr size_t kFirstBuffer = 4096;

class PlainSource final : public LineReader {
 public:
  PlainSource(std::string path, FILE* f) : LineReader(std::move(path), Compression::kNone), f_(f) {}
  ~PlainSource() override { std::fclose(f_); }

 protected:
  Result<size_t> Fill(char* dst, size_t cap) override {
    size_t n = std::fread(dst, 1, cap, f_);
    if (n == 0 && std::ferror(f_)) return Status::FromErrno(errno, "read " + path());
    return n;
  }

 private:
  FILE* f_;
};

class GzipSource final : public LineReader {
 public:
  GzipSource(std::string path, gzFile gz)
      : LineReader(std::move(path), Compression::kGzip), gz_(gz) {}
  ~GzipSource() override { gzclose(gz_); }

 protected:
  Result<size_t> Fill(char* dst, size_t cap) override {
    if (cap > (1u << 30)) cap = 1u << 30;
    int n = gzread(gz_, dst, static_cast<unsigned>(cap));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(gz_, &err);
      return Status::Corruption(path() + ": gzip: " + (msg ? msg : "read error"));
    }
    if (n == 0) {
      // gzread reports a file that ends inside a gzip member only through gzerror.
      int err = Z_OK;
      gzerror(gz_, &err);
      if (err == Z_BUF_ERROR) return Status::Corruption(path() + ": gzip: truncated stream");
    }
    return static_cast<size_t>(n);
  }

 private:
  gzFile gz_;
};

class ZstdSource final : public LineReader {
 public:
  ZstdSource(std::string path, FILE* f)
      : LineReader(std::move(path), Compression::kZstd),
        f_(f),
        ds_(ZSTD_createDStream()),
        in_buf_(ZSTD_DStreamInSize(), '\0') {
    ZSTD_initDStream(ds_);
  }
  ~ZstdSource() override {
    ZSTD_freeDStream(ds_);
    std::fclose(f_);
  }

 protected:
  Result<size_t> Fill(char* dst, size_t cap) override {
    ZSTD_outBuffer out{dst, cap, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        size_t n = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        if (n == 0) {
          if (std::ferror(f_)) return Status::FromErrno(errno, "read " + path());
          // A frame left open at the end of the file means the file was cut short.
          if (last_ret_ != 0) return Status::Corruption(path() + ": zstd: truncated stream");
          return size_t{0};
        }
        in_ = ZSTD_inBuffer{in_buf_.data(), n, 0};
      }
      size_t ret = ZSTD_decompressStream(ds_, &out, &in_);
      if (ZSTD_isError(ret)) {
        return Status::Corruption(path() + ": zstd: " + ZSTD_getErrorName(ret));
      }
      last_ret_ = ret;
    }
    return out.pos;
  }

 private:
  FILE* f_;
  ZSTD_DStream* ds_;
  std::string in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  size_t last_ret_ = 0;
};

}  // namespace

Result<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::FromErrno(errno, "open " + path);
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t got = std::fread(magic, 1, sizeof(magic), f);
  if (got == 0 && std::ferror(f)) {
    int err = errno;
    std::fclose(f);
    return Status::FromErrno(err, "read " + path);
  }
  std::rewind(f);
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    std::fclose(f);
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) return Status::IOError("gzopen " + path + " failed");
    gzbuffer(gz, 256 * 1024);
    return std::unique_ptr<LineReader>(new GzipSource(path, gz));
  }
  if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
    return std::unique_ptr<LineReader>(new ZstdSource(path, f));
  }
  return std::unique_ptr<LineReader>(new PlainSource(path, f));
}

Result<bool> LineReader::ReadLine(std::string_view* line) {
  for (;;) {
    const char* base = buf_.data() + begin_;
    const void* nl = std::memchr(base + scan_, '\n', end_ - begin_ - scan_);
    if (nl != nullptr || (eof_ && end_ > begin_)) {
      size_t len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - base) : end_ - begin_;
      size_t consumed = nl ? len + 1 : len;
      if (len > 0 && base[len - 1] == '\r') --len;
      *line = std::string_view(base, len);
      begin_ += consumed;
      scan_ = 0;
      ++line_number_;
      return true;
    }
    if (eof_) return false;
    scan_ = end_ - begin_;
    // Compact, then grow so that a line longer than the buffer still fits.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() < kChunk || buf_.size() - end_ < kChunk / 2) {
      buf_.resize(std::max(buf_.size() * 2, kFirstBuffer));
    }
    FC_ASSIGN_OR_RETURN(size_t n, Fill(buf_.data() + end_, buf_.size() - end_));
    if (n == 0) eof_ = true;
    end_ += n;
  }
}

}  // namespace flatcake::trace
