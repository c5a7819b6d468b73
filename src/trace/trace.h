// Request traces: the one record type and the streaming reader every consumer (stats, replay,
// simulator) uses.
//
// A trace is a sequence of TraceRequest in arrival order. Block ids name prefix-chained KV blocks
// of `block_tokens` tokens each: equal ids mean a reusable block, and within one reader's output
// an id always means the same block (ids from session-local traces are renamed so that they stay
// unique across sessions).
//
// Thread safety: a TraceReader is a single-threaded cursor; use one per thread. OpenTrace and the
// free functions here are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::trace {

struct TraceRequest {
  double time_s = 0;           // arrival time in seconds since the trace start
  uint64_t input_tokens = 0;   // prompt tokens
  uint64_t output_tokens = 0;  // generated tokens
  // One id per input block, in prompt order (ceil(input_tokens / block_tokens) in well-formed
  // traces; readers do not enforce it).
  std::vector<uint64_t> block_ids;
  int64_t session_id = -1;  // -1 when the format does not say
  int32_t turn = 0;         // 1-based position in its chain; 0 when unknown
  int64_t parent = -1;      // request this one continues (format-specific id), -1 for none
  int64_t request_id = -1;  // the format's own request id where it has one (Qwen chat_id)
  uint32_t block_tokens = 0;
};

enum class TraceFormat : uint8_t {
  kAuto,      // detect from the first record
  kMooncake,  // {timestamp(ms), input_length, output_length, hash_ids}; 512-token blocks
  kQwen,      // {chat_id, parent_chat_id, timestamp(s), input_length, ..., turn, hash_ids}; 16
  kAgentic,   // one session per line: {id, block_size, hash_id_scope, requests: [...]}
};

std::string_view TraceFormatName(TraceFormat format);
// Accepts "auto", "mooncake", "qwen" (or "bailian") and "agentic".
Result<TraceFormat> ParseTraceFormat(std::string_view name);
// The block size a format implies when neither the file nor the caller says: 512, 16, 64.
uint32_t DefaultBlockTokens(TraceFormat format);

// Which format a JSON line is, from its top-level keys: "requests" -> agentic; "chat_id" or
// "parent_chat_id" -> Qwen; "hash_ids" with "timestamp" -> Mooncake.
Result<TraceFormat> DetectTraceFormat(std::string_view line);

struct ReaderOptions {
  TraceFormat format = TraceFormat::kAuto;
  // Tokens per block for formats that do not carry it (Mooncake, Qwen, agentic lines without
  // block_size). 0 = the format's default.
  uint32_t block_tokens = 0;
  // Count and skip malformed lines instead of failing on the first one.
  bool skip_bad = false;
};

class TraceReader {
 public:
  virtual ~TraceReader() = default;
  // Fills *out with the next request and returns true, or returns false at the end. A malformed
  // line yields Corruption naming the file and 1-based line (unless skip_bad).
  virtual Result<bool> Next(TraceRequest* out) = 0;
  virtual TraceFormat format() const = 0;
  // Lines skipped as malformed so far (always 0 without skip_bad).
  virtual uint64_t bad_lines() const = 0;
};

// Opens a plain, gzip or zstd (detected by magic bytes) JSON-lines trace. The agentic layout is
// read whole at the first Next() (requests must be sorted by time across sessions); the others
// stream one line at a time.
Result<std::unique_ptr<TraceReader>> OpenTrace(const std::string& path,
                                               const ReaderOptions& options = {});

// Reads a whole trace into memory.
Result<std::vector<TraceRequest>> ReadTrace(const std::string& path,
                                            const ReaderOptions& options = {});

}  // namespace flatcake::trace
