#include "core/option_table.h"

#include <cctype>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace flatcake {
namespace {

constexpr uint64_t kPage = 4096;

// One row per StoreOptions field, in declaration order. The help is one line without '|' (it
// goes into a Markdown table cell); values and ranges are added from the other columns.
constexpr OptionSpec kTable[] = {
    {.name = "node_id",
     .flag = "--node-id",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::node_id,
     .help = "This node's id in the GVA NodeID field.",
     .max = 4095},
    {.name = "dram_bytes",
     .flag = "--dram-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::dram_bytes,
     .help = "Host DRAM arena capacity (apart from an engine's own host pool); 0 disables the "
             "DRAM medium."},
    {.name = "dram_path",
     .flag = "--dram-path",
     .kind = OptionKind::kPath,
     .member = &StoreOptions::dram_path,
     .help = "Back the DRAM arena by this file (in /dev/shm or a hugetlbfs mount) so its blocks "
             "outlive the process and are recovered at open; empty: anonymous memory."},
    {.name = "huge_pages",
     .flag = "--huge-pages",
     .kind = OptionKind::kEnum,
     .member = &StoreOptions::huge_pages,
     .help = "DRAM arena pages: auto is hugetlb if reserved, else THP, else plain pages.",
     .choices = kHugePageModeNames},
    {.name = "ssd_dirs",
     .flag = "--ssd-dir",
     .kind = OptionKind::kPathList,
     .member = &StoreOptions::ssd_dirs,
     .help = "SSD pool directories, one per drive (repeat the flag; in Python a list or a "
             "comma-separated string); none disables the SSD medium."},
    {.name = "ssd_bytes",
     .flag = "--ssd-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::ssd_bytes,
     .help = "SSD pool capacity over all directories (pre-allocated pool files)."},
    {.name = "ssd_file_bytes",
     .flag = "--ssd-file-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::ssd_file_bytes,
     .help = "Size of each pre-allocated pool file; sessions share files, a segment never spans "
             "two (so a block must fit in one).",
     .min = kPage,
     .multiple = kPage},
    {.name = "direct_io",
     .flag = "--direct-io",
     .kind = OptionKind::kEnum,
     .member = &StoreOptions::direct_io,
     .help = "O_DIRECT for pool files: auto falls back to buffered I/O where the filesystem "
             "refuses it.",
     .choices = kDirectIoModeNames},
    {.name = "tau_tokens",
     .flag = "--tau-tokens",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::tau_tokens,
     .help = "Placement τ: a prior reply shorter than this keeps a chat turn in DRAM."},
    {.name = "l_agent_tokens",
     .flag = "--l-agent-tokens",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::l_agent_tokens,
     .help = "Placement L_agent: a context at least this long goes to SSD."},
    {.name = "tokens_per_block",
     .flag = "--tokens-per-block",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::tokens_per_block,
     .help = "Tokens per block (page); the SGLang backend sets it to SGLang's --page-size.",
     .min = 1},
    {.name = "high_watermark",
     .flag = "--high-watermark",
     .kind = OptionKind::kRatio,
     .member = &StoreOptions::high_watermark,
     .help = "Reclaim a medium when its usage reaches this fraction."},
    {.name = "low_watermark",
     .flag = "--low-watermark",
     .kind = OptionKind::kRatio,
     .member = &StoreOptions::low_watermark,
     .help = "... down to this fraction (0 < low <= high)."},
    {.name = "index_capacity",
     .flag = "--index-capacity",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::index_capacity,
     .help = "Level-1 index slots; 0 sizes it from the capacities."},
    {.name = "max_scopes",
     .flag = "--max-scopes",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::max_scopes,
     .help = "Maximum live scopes (sessions x media).",
     .min = 1,
     .max = uint64_t{1} << 30},
    {.name = "io_engine",
     .flag = "--io-engine",
     .kind = OptionKind::kEnum,
     .member = &StoreOptions::io_engine,
     .help = "I/O engine: auto is io_uring, else the preadv thread pool.",
     .choices = kIoEngineKindNames},
    {.name = "io_workers",
     .flag = "--io-workers",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::io_workers,
     .help = "I/O worker threads (one io_uring ring each).",
     .min = 1,
     .max = 64},
    {.name = "io_queue_depth",
     .flag = "--io-queue-depth",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::io_queue_depth,
     .help = "I/O queue depth per worker.",
     .min = 1,
     .max = 4096},
    {.name = "read_window_bytes",
     .flag = "--read-window-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::read_window_bytes,
     .help = "Bounded staging window for SSD restores.",
     .min = kPage},
    {.name = "read_inflight_bytes",
     .flag = "--read-inflight-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::read_inflight_bytes,
     .help = "SSD restore reads in flight at most (0: the read window). A device serves the reads "
             "in flight side by side: a few reads' worth lets layers land one after another."},
    {.name = "write_staging_bytes",
     .flag = "--write-staging-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::write_staging_bytes,
     .help = "Gather buffers of SSD segment writes, allocated and faulted in at open: writes of "
             "max_io_bytes (at most half of this), this many bytes of them in flight.",
     .min = kPage},
    {.name = "max_gap_bytes",
     .flag = "--max-gap-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::max_gap_bytes,
     .help = "Δgap: coalesced reads bridge holes up to this size."},
    {.name = "max_io_bytes",
     .flag = "--max-io-bytes",
     .kind = OptionKind::kSize,
     .member = &StoreOptions::max_io_bytes,
     .help = "Merged reads are split at this size.",
     .min = kPage,
     .multiple = kPage},
    {.name = "scheduler",
     .flag = "--scheduler",
     .kind = OptionKind::kEnum,
     .member = &StoreOptions::scheduler,
     .help = "Restore scheduling: mas is FC-MAS (DRAM-ready first, SSD restores by HRRN), fcfs "
             "one FCFS queue (for comparison).",
     .choices = kRestoreSchedulerNames},
    {.name = "verify_checksums",
     .flag = "--no-verify",
     .kind = OptionKind::kBool,
     .member = &StoreOptions::verify_checksums,
     .help = "Verify every block's checksum on read (a mismatch is a miss).",
     .flag_clears = true},
    {.name = "recover",
     .flag = "--recover",
     .kind = OptionKind::kBool,
     .member = &StoreOptions::recover,
     .help = "Rebuild the store from the SSD pool's journal at open (--recover=false: start "
             "empty, discarding what the pool held)."},
    {.name = "wipe",
     .flag = "--wipe",
     .kind = OptionKind::kBool,
     .member = &StoreOptions::wipe,
     .help = "Discard an SSD pool that cannot be recovered (another format version or geometry) "
             "instead of refusing to open."},
    {.name = "sync",
     .flag = "--sync",
     .kind = OptionKind::kEnum,
     .member = &StoreOptions::sync,
     .help = "When SSD writes become durable against power loss: none (the OS writes back), "
             "interval (every sync_interval_ms) or every (each segment, before its commit "
             "record).",
     .choices = kSyncModeNames},
    {.name = "sync_interval_ms",
     .flag = "--sync-interval-ms",
     .kind = OptionKind::kCount,
     .member = &StoreOptions::sync_interval_ms,
     .help = "Period of sync=interval, in milliseconds.",
     .min = 1,
     .max = 3600 * 1000},
    {.name = "group_access",
     .flag = "--group-access",
     .kind = OptionKind::kBool,
     .member = &StoreOptions::group_access,
     .help = "Create pool files group-readable and -writable (0660), for a daemon whose clients "
             "of other users in its group open them; otherwise every file is the owner's only "
             "(0600). flatcake serve sets it when its allow-list admits anyone else."},
};

std::string JoinChoices(std::span<const std::string_view> choices, std::string_view sep) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += sep;
    out += c;
  }
  return out;
}

size_t ChoiceIndex(std::span<const std::string_view> choices, std::string_view text) {
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == text) return i;
  }
  return choices.size();
}

Status ChoiceError(std::string_view option, std::span<const std::string_view> choices,
                   std::string_view text) {
  return Status::InvalidArgument(std::string(option) + " must be one of " +
                                 JoinChoices(choices, ", ") + ", not '" + std::string(text) + "'");
}

template <typename E, size_t N>
std::string_view NameOf(E value, const std::array<std::string_view, N>& names) {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : std::string_view("?");
}

template <typename E, size_t N>
Result<E> ParseName(std::string_view option, const std::array<std::string_view, N>& names,
                    std::string_view text) {
  const size_t i = ChoiceIndex(names, text);
  if (i == N) return ChoiceError(option, names, text);
  return static_cast<E>(i);
}

std::string FormatDouble(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// The largest value the member's type holds (0 for non-integer members).
uint64_t FieldTypeMax(const OptionMember& member) {
  return std::visit(
      [](auto m) -> uint64_t {
        using T = std::remove_cvref_t<decltype(std::declval<StoreOptions>().*m)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return std::numeric_limits<T>::max();
        } else {
          return 0;
        }
      },
      member);
}

}  // namespace

std::string_view OptionKindName(OptionKind kind) {
  switch (kind) {
    case OptionKind::kSize: return "size";
    case OptionKind::kCount: return "count";
    case OptionKind::kRatio: return "ratio";
    case OptionKind::kBool: return "bool";
    case OptionKind::kEnum: return "enum";
    case OptionKind::kPathList: return "path_list";
    case OptionKind::kPath: return "path";
  }
  return "?";
}

std::span<const OptionSpec> StoreOptionTable() { return kTable; }

const OptionSpec* FindStoreOption(std::string_view name) {
  for (const OptionSpec& spec : kTable) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string StoreOptionNameList() {
  std::string out;
  for (const OptionSpec& spec : kTable) {
    if (!out.empty()) out += ", ";
    out += spec.name;
  }
  return out;
}

uint64_t OptionMax(const OptionSpec& spec) { return std::min(spec.max, FieldTypeMax(spec.member)); }

std::string OptionRangeText(const OptionSpec& spec) {
  switch (spec.kind) {
    case OptionKind::kSize:
    case OptionKind::kCount: {
      const auto number = [&](uint64_t v) {
        return spec.kind == OptionKind::kSize ? FormatSizeText(v) : std::to_string(v);
      };
      const uint64_t max = OptionMax(spec);
      std::string out;
      if (max < FieldTypeMax(spec.member)) {
        out = number(spec.min) + ".." + number(max);
      } else if (spec.min > 0) {
        out = ">= " + number(spec.min);
      }
      if (spec.multiple > 1) {
        out += (out.empty() ? "multiple of " : ", multiple of ") + number(spec.multiple);
      }
      return out;
    }
    case OptionKind::kRatio: return "0..1";
    case OptionKind::kEnum: return JoinChoices(spec.choices, "|");
    case OptionKind::kBool:
    case OptionKind::kPathList:
    case OptionKind::kPath: return "";
  }
  return "";
}

OptionValue GetOption(const OptionSpec& spec, const StoreOptions& options) {
  return std::visit(
      [&](auto member) -> OptionValue {
        const auto& v = options.*member;
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_enum_v<T>) {
          const auto i = static_cast<size_t>(v);
          return std::string(i < spec.choices.size() ? spec.choices[i] : "?");
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, double>) {
          return v;
        } else if constexpr (std::is_integral_v<T>) {
          return uint64_t{v};
        } else {
          return v;
        }
      },
      spec.member);
}

Status CheckOption(const OptionSpec& spec, const OptionValue& value) {
  const std::string name(spec.name);
  switch (spec.kind) {
    case OptionKind::kSize:
    case OptionKind::kCount: {
      const uint64_t* v = std::get_if<uint64_t>(&value);
      if (v == nullptr) return Status::InvalidArgument(name + " must be an integer");
      if (*v < spec.min || *v > OptionMax(spec) || *v % spec.multiple != 0) {
        return Status::InvalidArgument(name + " = " + std::to_string(*v) + " is out of range (" +
                                       OptionRangeText(spec) + ")");
      }
      return Status::OK();
    }
    case OptionKind::kRatio: {
      const double* v = std::get_if<double>(&value);
      if (v == nullptr) return Status::InvalidArgument(name + " must be a number");
      if (!(*v >= 0 && *v <= 1)) {
        return Status::InvalidArgument(name + " must be a fraction in 0..1, got " +
                                       FormatDouble(*v));
      }
      return Status::OK();
    }
    case OptionKind::kBool:
      if (!std::holds_alternative<bool>(value)) {
        return Status::InvalidArgument(name + " must be true or false");
      }
      return Status::OK();
    case OptionKind::kEnum: {
      const std::string* v = std::get_if<std::string>(&value);
      if (v == nullptr) return Status::InvalidArgument(name + " must be a string");
      if (ChoiceIndex(spec.choices, *v) == spec.choices.size()) {
        return ChoiceError(name, spec.choices, *v);
      }
      return Status::OK();
    }
    case OptionKind::kPathList:
      if (!std::holds_alternative<std::vector<std::string>>(value)) {
        return Status::InvalidArgument(name + " must be a list of directories");
      }
      return Status::OK();
    case OptionKind::kPath:
      if (!std::holds_alternative<std::string>(value)) {
        return Status::InvalidArgument(name + " must be a path (a string)");
      }
      return Status::OK();
  }
  return Status::InvalidArgument(name + ": unknown option kind");
}

Status SetOption(const OptionSpec& spec, const OptionValue& value, StoreOptions* options) {
  FC_RETURN_IF_ERROR(CheckOption(spec, value));
  std::visit(
      [&](auto member) {
        auto& field = options->*member;
        using T = std::remove_cvref_t<decltype(field)>;
        if constexpr (std::is_enum_v<T>) {
          field = static_cast<T>(ChoiceIndex(spec.choices, std::get<std::string>(value)));
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, double> ||
                             std::is_same_v<T, std::vector<std::string>> ||
                             std::is_same_v<T, std::string>) {
          field = std::get<T>(value);
        } else {
          field = static_cast<T>(std::get<uint64_t>(value));  // in range: checked above
        }
      },
      spec.member);
  return Status::OK();
}

std::string FormatOption(const OptionSpec& spec, const OptionValue& value) {
  if (const uint64_t* v = std::get_if<uint64_t>(&value)) {
    return spec.kind == OptionKind::kSize ? FormatSizeText(*v) : std::to_string(*v);
  }
  if (const double* v = std::get_if<double>(&value)) return FormatDouble(*v);
  if (const bool* v = std::get_if<bool>(&value)) return *v ? "true" : "false";
  if (const std::string* v = std::get_if<std::string>(&value)) return *v;
  return JoinChoices(
      [&] {
        std::vector<std::string_view> parts;
        for (const std::string& d : std::get<std::vector<std::string>>(value)) parts.push_back(d);
        return parts;
      }(),
      ",");
}

Status SetOptionFromText(const OptionSpec& spec, std::string_view text, StoreOptions* options) {
  const std::string name(spec.name);
  const char* end = text.data() + text.size();
  switch (spec.kind) {
    case OptionKind::kSize: {
      FC_ASSIGN_OR_RETURN(const uint64_t v, ParseSizeText(text, name));
      return SetOption(spec, v, options);
    }
    case OptionKind::kCount: {
      uint64_t v = 0;
      const auto r = std::from_chars(text.data(), end, v);
      if (text.empty() || r.ec != std::errc() || r.ptr != end) {
        return Status::InvalidArgument(name + " must be a non-negative integer, not '" +
                                       std::string(text) + "'");
      }
      return SetOption(spec, v, options);
    }
    case OptionKind::kRatio: {
      double v = 0;
      const auto r = std::from_chars(text.data(), end, v);
      if (text.empty() || r.ec != std::errc() || r.ptr != end) {
        return Status::InvalidArgument(name + " must be a number, not '" + std::string(text) + "'");
      }
      return SetOption(spec, v, options);
    }
    case OptionKind::kBool:
      if (text == "true" || text == "1") return SetOption(spec, true, options);
      if (text == "false" || text == "0") return SetOption(spec, false, options);
      return Status::InvalidArgument(name + " must be true or false, not '" + std::string(text) +
                                     "'");
    case OptionKind::kEnum:
    case OptionKind::kPath: return SetOption(spec, std::string(text), options);
    case OptionKind::kPathList: return SetOption(spec, SplitPathList(text), options);
  }
  return Status::InvalidArgument(name + ": unknown option kind");
}

std::string FormatSizeText(uint64_t bytes) {
  static constexpr std::pair<uint64_t, std::string_view> kUnits[] = {
      {kGiB * 1024, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + std::string(suffix);
  }
  return std::to_string(bytes);
}

Result<uint64_t> ParseSizeText(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    return Status::InvalidArgument(std::string(what) +
                                   " must be a size in bytes (4096, 256MiB, "
                                   "4G), not '" +
                                   std::string(text) + "'");
  };
  uint64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc()) return bad();  // no digits, a sign, or past 2^64 - 1
  std::string unit(text.substr(static_cast<size_t>(r.ptr - text.data())));
  const size_t first = unit.find_first_not_of(' ');
  unit.erase(0, first == std::string::npos ? unit.size() : first);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, int> kUnits[] = {
      {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
      {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40}};
  for (const auto& [suffix, shift] : kUnits) {
    if (unit != suffix) continue;
    if (shift > 0 && v > (UINT64_MAX >> shift)) return bad();
    return v << shift;
  }
  return bad();
}

std::vector<std::string> SplitPathList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string_view entry = text.substr(start, comma - start);
    while (!entry.empty() && (entry.front() == ' ' || entry.front() == '\t')) {
      entry.remove_prefix(1);
    }
    while (!entry.empty() && (entry.back() == ' ' || entry.back() == '\t')) entry.remove_suffix(1);
    if (!entry.empty()) out.emplace_back(entry);
    start = comma + 1;
  }
  return out;
}

std::string RenderOptionTableJson() {
  const StoreOptions defaults;
  nlohmann::json rows = nlohmann::json::array();
  for (const OptionSpec& spec : kTable) {
    nlohmann::json row = {{"name", spec.name},
                          {"flag", spec.flag},
                          {"kind", OptionKindName(spec.kind)},
                          {"default", FormatOption(spec, GetOption(spec, defaults))},
                          {"range", OptionRangeText(spec)},
                          {"help", spec.help}};
    if (spec.kind == OptionKind::kEnum) {
      row["choices"] = std::vector<std::string>(spec.choices.begin(), spec.choices.end());
    }
    if (spec.kind == OptionKind::kSize || spec.kind == OptionKind::kCount) {
      row["min"] = spec.min;
      row["max"] = OptionMax(spec);
      row["multiple"] = spec.multiple;
    }
    if (spec.kind == OptionKind::kBool) row["flag_clears"] = spec.flag_clears;
    rows.push_back(std::move(row));
  }
  return rows.dump();
}

std::string RenderOptionTableMarkdown() {
  // Appends rather than `"`" + std::string(...)`: GCC 12 warns (-Wrestrict) on the latter.
  const auto code = [](std::string_view text) {
    std::string out;
    out.reserve(text.size() + 2);
    out.append("`").append(text).append("`");
    return out;
  };
  const StoreOptions defaults;
  std::string out =
      "| Option | CLI flag | Default | Values | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const OptionSpec& spec : kTable) {
    std::string flag = code(spec.flag);
    if (spec.kind == OptionKind::kBool && spec.flag_clears) flag += " (sets false)";
    const std::string value = FormatOption(spec, GetOption(spec, defaults));
    std::string range = OptionRangeText(spec);
    if (spec.kind == OptionKind::kEnum) {
      range = code(JoinChoices(spec.choices, "`, `"));
    } else if (spec.kind == OptionKind::kPathList) {
      range = "directories";
    } else if (spec.kind == OptionKind::kPath) {
      range = "a path";
    } else if (spec.kind == OptionKind::kBool) {
      range = "`true`, `false`";
    } else if (range.empty()) {
      range = "any";
    }
    out.append("| ").append(code(spec.name)).append(" | ").append(flag).append(" | ");
    out.append(value.empty() ? "none" : code(value)).append(" | ").append(range).append(" | ");
    out.append(spec.help).append(" |\n");
  }
  return out;
}

Result<std::string> ReplaceOptionTable(std::string_view document, std::string_view table) {
  const size_t begin = document.find(kOptionTableBegin);
  const size_t end = document.find(kOptionTableEnd);
  if (begin == std::string_view::npos || end == std::string_view::npos || end < begin ||
      document.find(kOptionTableBegin, begin + 1) != std::string_view::npos ||
      document.find(kOptionTableEnd, end + 1) != std::string_view::npos) {
    return Status::InvalidArgument("the document needs one '" + std::string(kOptionTableBegin) +
                                   "' line followed by one '" + std::string(kOptionTableEnd) +
                                   "' line");
  }
  const size_t body = document.find('\n', begin);
  if (body == std::string_view::npos || body > end) {
    return Status::InvalidArgument("the option table's begin marker must end its line");
  }
  std::string out(document.substr(0, body + 1));
  out += table;
  out += document.substr(end);
  return out;
}

std::string_view HugePageModeName(HugePageMode mode) { return NameOf(mode, kHugePageModeNames); }
Result<HugePageMode> ParseHugePageMode(std::string_view text) {
  return ParseName<HugePageMode>("huge_pages", kHugePageModeNames, text);
}
std::string_view DirectIoModeName(DirectIoMode mode) { return NameOf(mode, kDirectIoModeNames); }
Result<DirectIoMode> ParseDirectIoMode(std::string_view text) {
  return ParseName<DirectIoMode>("direct_io", kDirectIoModeNames, text);
}
std::string_view IoEngineKindName(IoEngineKind kind) { return NameOf(kind, kIoEngineKindNames); }
Result<IoEngineKind> ParseIoEngineKind(std::string_view text) {
  return ParseName<IoEngineKind>("io_engine", kIoEngineKindNames, text);
}
std::string_view RestoreSchedulerName(RestoreScheduler scheduler) {
  return NameOf(scheduler, kRestoreSchedulerNames);
}
Result<RestoreScheduler> ParseRestoreScheduler(std::string_view text) {
  return ParseName<RestoreScheduler>("scheduler", kRestoreSchedulerNames, text);
}
std::string_view SyncModeName(SyncMode mode) { return NameOf(mode, kSyncModeNames); }
Result<SyncMode> ParseSyncMode(std::string_view text) {
  return ParseName<SyncMode>("sync", kSyncModeNames, text);
}

}  // namespace flatcake
