// The three trace readers and format detection.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "trace/json_scan.h"
#include "trace/line_reader.h"
#include "trace/trace.h"

namespace flatcake::trace {
namespace {

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

Status MissingField(std::string_view name) {
  return Status::Corruption("missing field \"" + std::string(name) + "\"");
}

// Parses one Mooncake line. Our generators add optional session_id, turn and parent.
Status ParseMooncakeLine(std::string_view line, TraceRequest* r) {
  JsonCursor c(line);
  bool has_ts = false, has_in = false, has_ids = false;
  r->output_tokens = 0;
  r->session_id = -1;
  r->turn = 0;
  r->parent = -1;
  r->request_id = -1;
  r->block_tokens = 0;
  FC_RETURN_IF_ERROR(c.ParseObject([&](std::string_view key) -> Status {
    if (key == "hash_ids") {
      has_ids = true;
      return c.ParseUintArray(&r->block_ids);
    }
    if (key == "timestamp") {
      has_ts = true;
      double ms = 0;
      FC_RETURN_IF_ERROR(c.ParseDouble(&ms));
      if (ms < 0) return c.Error("negative timestamp");
      r->time_s = ms / 1000.0;
      return Status::OK();
    }
    if (key == "input_length") {
      has_in = true;
      return c.ParseUint64(&r->input_tokens);
    }
    if (key == "output_length") return c.ParseUint64(&r->output_tokens);
    if (key == "session_id") return c.ParseInt64(&r->session_id);
    if (key == "block_tokens") {  // written by `trace gen`; overrides the reader's default
      uint64_t b = 0;
      FC_RETURN_IF_ERROR(c.ParseUint64(&b));
      if (b == 0 || b > (1u << 24)) return c.Error("block_tokens out of range");
      r->block_tokens = static_cast<uint32_t>(b);
      return Status::OK();
    }
    if (key == "parent") return c.ParseInt64(&r->parent);
    if (key == "turn") {
      int64_t t = 0;
      FC_RETURN_IF_ERROR(c.ParseInt64(&t));
      if (t < 0 || t > INT32_MAX) return c.Error("turn out of range");
      r->turn = static_cast<int32_t>(t);
      return Status::OK();
    }
    return c.SkipValue();
  }));
  FC_RETURN_IF_ERROR(c.ExpectEnd());
  if (!has_ts) return MissingField("timestamp");
  if (!has_in) return MissingField("input_length");
  if (!has_ids) return MissingField("hash_ids");
  return Status::OK();
}

Status ParseQwenLine(std::string_view line, TraceRequest* r) {
  JsonCursor c(line);
  bool has_id = false, has_parent = false, has_ts = false, has_in = false, has_ids = false;
  r->output_tokens = 0;
  r->turn = 0;
  std::string scratch;
  FC_RETURN_IF_ERROR(c.ParseObject([&](std::string_view key) -> Status {
    if (key == "hash_ids") {
      has_ids = true;
      return c.ParseUintArray(&r->block_ids);
    }
    if (key == "chat_id") {
      has_id = true;
      FC_RETURN_IF_ERROR(c.ParseInt64(&r->request_id));
      if (r->request_id < 0) return c.Error("negative chat_id");
      return Status::OK();
    }
    if (key == "parent_chat_id") {
      has_parent = true;
      return c.ParseInt64(&r->parent);
    }
    if (key == "timestamp") {
      has_ts = true;
      FC_RETURN_IF_ERROR(c.ParseDouble(&r->time_s));
      if (r->time_s < 0) return c.Error("negative timestamp");
      return Status::OK();
    }
    if (key == "input_length") {
      has_in = true;
      return c.ParseUint64(&r->input_tokens);
    }
    if (key == "output_length") return c.ParseUint64(&r->output_tokens);
    if (key == "turn") {
      int64_t t = 0;
      FC_RETURN_IF_ERROR(c.ParseInt64(&t));
      if (t < 0 || t > INT32_MAX) return c.Error("turn out of range");
      r->turn = static_cast<int32_t>(t);
      return Status::OK();
    }
    return c.SkipValue();  // "type" and anything else
  }));
  FC_RETURN_IF_ERROR(c.ExpectEnd());
  if (!has_id) return MissingField("chat_id");
  if (!has_parent) return MissingField("parent_chat_id");
  if (!has_ts) return MissingField("timestamp");
  if (!has_in) return MissingField("input_length");
  if (!has_ids) return MissingField("hash_ids");
  if (r->parent < -1) return Status::Corruption("parent_chat_id below -1");
  return Status::OK();
}

// Shared by the line-at-a-time readers: reading, line numbers, skip_bad and error context.
class LineTraceReader final : public TraceReader {
 public:
  LineTraceReader(std::unique_ptr<LineReader> lines, TraceFormat format, uint32_t block_tokens,
                  bool skip_bad)
      : lines_(std::move(lines)),
        format_(format),
        block_tokens_(block_tokens),
        skip_bad_(skip_bad) {}

  Result<bool> Next(TraceRequest* out) override {
    for (;;) {
      std::string_view line;
      FC_ASSIGN_OR_RETURN(bool more, lines_->ReadLine(&line));
      if (!more) return false;
      if (IsBlank(line)) continue;
      Status s =
          format_ == TraceFormat::kQwen ? ParseQwenLine(line, out) : ParseMooncakeLine(line, out);
      if (s.ok() && format_ == TraceFormat::kQwen) s = ResolveQwenSession(out);
      if (!s.ok()) {
        if (skip_bad_) {
          ++bad_lines_;
          continue;
        }
        return s.WithContext(lines_->path() + ":" + std::to_string(lines_->line_number()));
      }
      if (out->block_tokens == 0 || format_ == TraceFormat::kQwen)
        out->block_tokens = block_tokens_;
      return true;
    }
  }
  TraceFormat format() const override { return format_; }
  uint64_t bad_lines() const override { return bad_lines_; }

 private:
  // A Qwen request's session is the root of its parent chain. Parents normally precede their
  // children; an unknown parent starts a session named after it.
  Status ResolveQwenSession(TraceRequest* r) {
    int64_t root = r->request_id;
    if (r->parent >= 0) {
      auto it = root_of_.find(r->parent);
      root = it == root_of_.end() ? r->parent : it->second;
    }
    root_of_[r->request_id] = root;
    r->session_id = root;
    return Status::OK();
  }

  std::unique_ptr<LineReader> lines_;
  TraceFormat format_;
  uint32_t block_tokens_;
  bool skip_bad_;
  uint64_t bad_lines_ = 0;
  std::unordered_map<int64_t, int64_t> root_of_;
};

// The per-session agentic layout. Reads every session at the first Next(), expands the requests,
// renames session-local ids into one dense id space, and sorts by time across sessions.
class AgenticTraceReader final : public TraceReader {
 public:
  AgenticTraceReader(std::unique_ptr<LineReader> lines, uint32_t block_tokens, bool skip_bad)
      : lines_(std::move(lines)), block_tokens_(block_tokens), skip_bad_(skip_bad) {}

  Result<bool> Next(TraceRequest* out) override {
    if (!loaded_) {
      FC_RETURN_IF_ERROR(LoadAll());
      loaded_ = true;
    }
    if (next_ >= requests_.size()) return false;
    *out = std::move(requests_[next_++]);
    return true;
  }
  TraceFormat format() const override { return TraceFormat::kAgentic; }
  uint64_t bad_lines() const override { return bad_lines_; }

 private:
  Status LoadAll() {
    int64_t session = 0;
    for (;;) {
      std::string_view line;
      FC_ASSIGN_OR_RETURN(bool more, lines_->ReadLine(&line));
      if (!more) break;
      if (IsBlank(line)) continue;
      size_t before = requests_.size();
      Status s = ParseSession(line, session);
      if (!s.ok()) {
        requests_.resize(before);
        if (skip_bad_) {
          ++bad_lines_;
          continue;
        }
        return s.WithContext(lines_->path() + ":" + std::to_string(lines_->line_number()));
      }
      ++session;
    }
    // Stable: equal times keep file order (session order, then request order).
    std::stable_sort(
        requests_.begin(), requests_.end(),
        [](const TraceRequest& a, const TraceRequest& b) { return a.time_s < b.time_s; });
    return Status::OK();
  }

  Status ParseSession(std::string_view line, int64_t session) {
    JsonCursor c(line);
    uint32_t block_tokens = block_tokens_;
    bool local = false, has_requests = false;
    std::string scope;
    std::vector<TraceRequest> parsed;
    FC_RETURN_IF_ERROR(c.ParseObject([&](std::string_view key) -> Status {
      if (key == "block_size") {
        uint64_t b = 0;
        FC_RETURN_IF_ERROR(c.ParseUint64(&b));
        if (b == 0 || b > (1u << 24)) return c.Error("block_size out of range");
        block_tokens = static_cast<uint32_t>(b);
        return Status::OK();
      }
      if (key == "hash_id_scope") {
        if (c.PeekNull()) return Status::OK();
        FC_RETURN_IF_ERROR(c.ParseString(&scope));
        if (scope == "local" || scope == "session") {
          local = true;
        } else if (scope != "global") {
          return c.Error("hash_id_scope must be \"local\", \"session\" or \"global\"");
        }
        return Status::OK();
      }
      if (key == "requests") {
        has_requests = true;
        return c.ParseArray([&]() { return ParseRequest(c, &parsed); });
      }
      return c.SkipValue();  // id, models, ...
    }));
    FC_RETURN_IF_ERROR(c.ExpectEnd());
    if (!has_requests) return MissingField("requests");
    // Rename ids only after the whole line parsed, so a bad line leaves no trace in the maps.
    std::unordered_map<uint64_t, uint64_t> local_ids;
    int32_t turn = 0;
    for (TraceRequest& r : parsed) {
      for (uint64_t& id : r.block_ids) {
        auto& map = local ? local_ids : global_ids_;
        auto [it, inserted] = map.try_emplace(id, next_id_);
        if (inserted) ++next_id_;
        id = it->second;
      }
      r.session_id = session;
      r.turn = ++turn;
      r.block_tokens = block_tokens;
      requests_.push_back(std::move(r));
    }
    return Status::OK();
  }

  static Status ParseRequest(JsonCursor& c, std::vector<TraceRequest>* out) {
    TraceRequest r;
    bool has_t = false, has_in = false, has_ids = false;
    FC_RETURN_IF_ERROR(c.ParseObject([&](std::string_view key) -> Status {
      if (key == "hash_ids") {
        has_ids = true;
        return c.ParseUintArray(&r.block_ids);
      }
      if (key == "t") {
        has_t = true;
        FC_RETURN_IF_ERROR(c.ParseDouble(&r.time_s));
        if (r.time_s < 0) return c.Error("negative t");
        return Status::OK();
      }
      if (key == "in") {
        has_in = true;
        return c.ParseUint64(&r.input_tokens);
      }
      if (key == "out") return c.ParseUint64(&r.output_tokens);
      return c.SkipValue();  // type, model, api_time, think_time, ttft, ...
    }));
    if (!has_t) return MissingField("requests[].t");
    if (!has_in) return MissingField("requests[].in");
    if (!has_ids) return MissingField("requests[].hash_ids");
    out->push_back(std::move(r));
    return Status::OK();
  }

  std::unique_ptr<LineReader> lines_;
  uint32_t block_tokens_;
  bool skip_bad_;
  bool loaded_ = false;
  uint64_t bad_lines_ = 0;
  std::vector<TraceRequest> requests_;
  size_t next_ = 0;
  std::unordered_map<uint64_t, uint64_t> global_ids_;
  uint64_t next_id_ = 0;
};

}  // namespace

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto: return "auto";
    case TraceFormat::kMooncake: return "mooncake";
    case TraceFormat::kQwen: return "qwen";
    case TraceFormat::kAgentic: return "agentic";
  }
  return "unknown";
}

Result<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "auto") return TraceFormat::kAuto;
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "qwen" || name == "bailian") return TraceFormat::kQwen;
  if (name == "agentic") return TraceFormat::kAgentic;
  return Status::InvalidArgument("unknown trace format \"" + std::string(name) +
                                 "\" (auto, mooncake, qwen, agentic)");
}

uint32_t DefaultBlockTokens(TraceFormat format) {
  switch (format) {
    case TraceFormat::kQwen: return 16;
    case TraceFormat::kAgentic: return 64;
    default: return 512;
  }
}

Result<TraceFormat> DetectTraceFormat(std::string_view line) {
  JsonCursor c(line);
  bool requests = false, chat = false, ids = false, ts = false;
  FC_RETURN_IF_ERROR(c.ParseObject([&](std::string_view key) -> Status {
    if (key == "requests") requests = true;
    if (key == "chat_id" || key == "parent_chat_id") chat = true;
    if (key == "hash_ids") ids = true;
    if (key == "timestamp") ts = true;
    return c.SkipValue();
  }));
  if (requests) return TraceFormat::kAgentic;
  if (chat) return TraceFormat::kQwen;
  if (ids && ts) return TraceFormat::kMooncake;
  return Status::Corruption(
      "cannot tell the trace format: no \"requests\", \"chat_id\" or \"timestamp\"+\"hash_ids\"");
}

Result<std::unique_ptr<TraceReader>> OpenTrace(const std::string& path,
                                               const ReaderOptions& options) {
  TraceFormat format = options.format;
  if (format == TraceFormat::kAuto) {
    // Detect from the first non-blank line that parses (the first one, unless skip_bad), then
    // reopen so the reader sees the file from its start; detection reads a few lines at most.
    FC_ASSIGN_OR_RETURN(auto probe, LineReader::Open(path));
    for (;;) {
      std::string_view line;
      FC_ASSIGN_OR_RETURN(bool more, probe->ReadLine(&line));
      if (!more) {
        format = TraceFormat::kMooncake;  // empty input: any reader yields nothing
        break;
      }
      if (IsBlank(line)) continue;
      Result<TraceFormat> f = DetectTraceFormat(line);
      if (f.ok()) {
        format = *f;
        break;
      }
      if (!options.skip_bad) {
        return f.status().WithContext(path + ":" + std::to_string(probe->line_number()));
      }
    }
  }
  FC_ASSIGN_OR_RETURN(auto lines, LineReader::Open(path));
  uint32_t block_tokens = options.block_tokens ? options.block_tokens : DefaultBlockTokens(format);
  if (format == TraceFormat::kAgentic) {
    return std::unique_ptr<TraceReader>(
        new AgenticTraceReader(std::move(lines), block_tokens, options.skip_bad));
  }
  return std::unique_ptr<TraceReader>(
      new LineTraceReader(std::move(lines), format, block_tokens, options.skip_bad));
}

Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, const ReaderOptions& options) {
  FC_ASSIGN_OR_RETURN(auto reader, OpenTrace(path, options));
  std::vector<TraceRequest> out;
  TraceRequest r;
  for (;;) {
    FC_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
    if (!more) break;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace flatcake::trace
