#include "serve/serve_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "core/option_table.h"
#include "serve/http_get.h"
#include "serve/wire.h"

namespace flatcake::serve {
namespace {

constexpr ServeSettingSpec kSettings[] = {
    {.key = "socket",
     .flag = "--socket",
     .help = "The Unix socket clients connect to (required: here or --socket). A live daemon "
             "on it is refused; a stale socket file is replaced."},
    {.key = "socket_mode",
     .flag = "--socket-mode",
     .help = "The socket's file mode, octal: who may connect at all ([allow] still decides). To "
             "admit a group, list it in [allow] and open the mode (\"0660\") to it."},
    {.key = "metrics_addr",
     .flag = "--metrics-addr",
     .help = "HOST:PORT of the Prometheus metrics endpoint (GET /metrics, no authentication: "
             "keep it on a loopback or private address); empty: no endpoint."},
    {.key = "max_clients",
     .flag = "--max-clients",
     .help = "Most clients connected at once; one more is refused."},
    {.key = "log_level",
     .flag = "--log-level",
     .help = "What the daemon logs to stderr: error, warn, info or debug."},
    {.key = "etcd",
     .flag = "--etcd",
     .help = "etcd client URLs (http://HOST:PORT[,...]) of the cluster to join "
             "(docs/cluster.md); empty: a one-node store."},
    {.key = "cluster",
     .flag = "--cluster",
     .help = "The cluster's name: its keys in etcd are under /flatcake/NAME/."},
    {.key = "node_name",
     .flag = "--node-name",
     .help = "This node's name in the cluster; empty: the host name."},
    {.key = "lease_ttl_s",
     .flag = "--lease-ttl",
     .help = "Seconds a node that stops renewing its etcd lease (killed, cut off) stays a "
             "member (2..3600)."},
    {.key = "peer_staging_bytes",
     .flag = "--peer-staging-bytes",
     .help = "Memory for other nodes' restores from this node's SSD, at most (a restore's SSD "
             "hits are staged here, layer after layer, as they are sent); a restore finding "
             "less gets the leading hits that fit, the rest are misses. 0: a quarter of the "
             "machine's memory."},
};

// The tables a file may hold besides the settings, for the unknown-key message.
constexpr std::string_view kTables = "[store], [allow], [default_quota], [tenants.NAME]";

// "<source>:<line>: <what>" for a node of the document.
class ErrorAt {
 public:
  explicit ErrorAt(std::string_view source) : source_(source) {}
  Status operator()(const toml::source_region& where, std::string_view what) const {
    std::string at(source_);
    if (where.begin.line > 0) at += ":" + std::to_string(where.begin.line);
    return Status::InvalidArgument(at + ": " + std::string(what));
  }

 private:
  std::string source_;
};

std::string_view NodeTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

// Reads the document's values into a ServeConfig, one key at a time.
class ConfigReader {
 public:
  explicit ConfigReader(std::string_view source) : error_(source) {}

  Status Read(const toml::table& doc, ServeConfig* config) {
    for (const auto& [key, node] : doc) {
      const std::string_view name = key.str();
      if (name == "store") {
        FC_ASSIGN_OR_RETURN(const toml::table* t, Table(node, "store"));
        FC_RETURN_IF_ERROR(ReadStore(*t, &config->store));
      } else if (name == "allow") {
        FC_ASSIGN_OR_RETURN(const toml::table* t, Table(node, "allow"));
        FC_RETURN_IF_ERROR(ReadAllow(*t, &config->allow));
      } else if (name == "default_quota") {
        FC_ASSIGN_OR_RETURN(const toml::table* t, Table(node, "default_quota"));
        FC_RETURN_IF_ERROR(ReadQuota(*t, "default_quota", &config->default_quota));
      } else if (name == "tenants") {
        FC_ASSIGN_OR_RETURN(const toml::table* t, Table(node, "tenants"));
        FC_RETURN_IF_ERROR(ReadTenants(*t, &config->tenants));
      } else if (name == "socket") {
        FC_ASSIGN_OR_RETURN(config->socket_path, String(node, name));
      } else if (name == "socket_mode") {
        FC_ASSIGN_OR_RETURN(const std::string text, String(node, name));
        const Result<mode_t> mode = ParseFileMode(text);
        if (!mode.ok()) return error_(node.source(), "socket_mode: " + Message(mode.status()));
        config->socket_mode = *mode;
      } else if (name == "metrics_addr") {
        FC_ASSIGN_OR_RETURN(config->metrics_addr, String(node, name));
        if (!config->metrics_addr.empty()) {
          const Result<HostPort> addr = ParseHostPort(config->metrics_addr);
          if (!addr.ok()) return error_(node.source(), "metrics_addr: " + Message(addr.status()));
        }
      } else if (name == "etcd") {
        FC_ASSIGN_OR_RETURN(config->etcd, String(node, name));
      } else if (name == "cluster") {
        FC_ASSIGN_OR_RETURN(config->cluster, String(node, name));
      } else if (name == "node_name") {
        FC_ASSIGN_OR_RETURN(config->node_name, String(node, name));
      } else if (name == "lease_ttl_s") {
        FC_ASSIGN_OR_RETURN(const uint64_t v, Unsigned(node, name, 2, 3600));
        config->lease_ttl_s = static_cast<uint32_t>(v);
      } else if (name == "peer_staging_bytes") {
        FC_ASSIGN_OR_RETURN(config->peer_staging_bytes, Size(node, name));
      } else if (name == "max_clients") {
        FC_ASSIGN_OR_RETURN(const uint64_t v, Unsigned(node, name, 1, kMaxMaxClients));
        config->max_clients = static_cast<uint32_t>(v);
      } else if (name == "log_level") {
        FC_ASSIGN_OR_RETURN(const std::string text, String(node, name));
        const Result<LogLevel> level = ParseLogLevel(text);
        if (!level.ok()) return error_(node.source(), Message(level.status()));
        config->log_level = *level;
      } else {
        std::string known;
        for (const ServeSettingSpec& s : kSettings) known += std::string(s.key) + ", ";
        return error_(key.source(), "unknown key '" + std::string(name) + "' (known: " + known +
                                        std::string(kTables) + ")");
      }
    }
    return Status::OK();
  }

 private:
  static std::string Message(const Status& s) { return std::string(s.message()); }

  Result<const toml::table*> Table(const toml::node& node, std::string_view name) const {
    if (const toml::table* t = node.as_table()) return t;
    return error_(node.source(), std::string(name) + " must be a table ([" + std::string(name) +
                                     "]), not " + std::string(NodeTypeName(node)));
  }

  Result<std::string> String(const toml::node& node, std::string_view name) const {
    if (const auto* s = node.as_string()) return s->get();
    return error_(node.source(),
                  std::string(name) + " must be a string, not " + std::string(NodeTypeName(node)));
  }

  Result<uint64_t> Unsigned(const toml::node& node, std::string_view name, uint64_t min,
                            uint64_t max) const {
    const auto* i = node.as_integer();
    if (i == nullptr) {
      return error_(node.source(), std::string(name) + " must be an integer, not " +
                                       std::string(NodeTypeName(node)));
    }
    if (i->get() < 0 || static_cast<uint64_t>(i->get()) < min ||
        static_cast<uint64_t>(i->get()) > max) {
      return error_(node.source(), std::string(name) + " = " + std::to_string(i->get()) +
                                       " is out of range (" + std::to_string(min) + ".." +
                                       std::to_string(max) + ")");
    }
    return static_cast<uint64_t>(i->get());
  }

  // A size: an integer of bytes, or a string with a unit ("256MiB").
  Result<uint64_t> Size(const toml::node& node, std::string_view name) const {
    if (const auto* s = node.as_string()) {
      const Result<uint64_t> v = ParseSizeText(s->get(), name);
      if (!v.ok()) return error_(node.source(), Message(v.status()));
      return *v;
    }
    if (node.is_integer()) return Unsigned(node, name, 0, std::numeric_limits<int64_t>::max());
    return error_(node.source(), std::string(name) +
                                     " must be a size: an integer of bytes or a string such as "
                                     "\"256MiB\", not " +
                                     std::string(NodeTypeName(node)));
  }

  // The node as the value a row of the option table takes (its range is SetOption's to check).
  Result<OptionValue> StoreValue(const OptionSpec& spec, const toml::node& node,
                                 const std::string& name) const {
    const auto wrong = [&](std::string_view expected) {
      return error_(node.source(), name + " must be " + std::string(expected) + ", not " +
                                       std::string(NodeTypeName(node)));
    };
    switch (spec.kind) {
      case OptionKind::kSize: {
        FC_ASSIGN_OR_RETURN(const uint64_t v, Size(node, name));
        return OptionValue(v);
      }
      case OptionKind::kCount: {
        FC_ASSIGN_OR_RETURN(const uint64_t v,
                            Unsigned(node, name, 0, std::numeric_limits<int64_t>::max()));
        return OptionValue(v);
      }
      case OptionKind::kRatio:
        if (const auto* f = node.as_floating_point()) return OptionValue(f->get());
        if (const auto* i = node.as_integer()) return OptionValue(static_cast<double>(i->get()));
        return wrong("a number");
      case OptionKind::kBool:
        if (const auto* b = node.as_boolean()) return OptionValue(b->get());
        return wrong("true or false");
      case OptionKind::kEnum:
      case OptionKind::kPath:
        if (const auto* s = node.as_string()) return OptionValue(s->get());
        return wrong(spec.kind == OptionKind::kEnum ? "a string (" + OptionRangeText(spec) + ")"
                                                    : std::string("a path (a string)"));
      case OptionKind::kPathList: {
        if (const auto* s = node.as_string()) return OptionValue(SplitPathList(s->get()));
        const toml::array* a = node.as_array();
        if (a == nullptr) return wrong("an array of directories");
        std::vector<std::string> dirs;
        for (const toml::node& item : *a) {
          const auto* s = item.as_string();
          if (s == nullptr || s->get().empty()) {
            return error_(item.source(), name + " must hold directories (non-empty strings), not " +
                                             std::string(NodeTypeName(item)));
          }
          dirs.push_back(s->get());
        }
        return OptionValue(std::move(dirs));
      }
    }
    return wrong("a value of a known kind");
  }

  Status ReadStore(const toml::table& table, StoreOptions* options) const {
    for (const auto& [key, node] : table) {
      const OptionSpec* spec = FindStoreOption(key.str());
      const std::string name = "store." + std::string(key.str());
      if (spec == nullptr) {
        return error_(key.source(),
                      "unknown key '" + name + "' (store options: " + StoreOptionNameList() + ")");
      }
      FC_ASSIGN_OR_RETURN(const OptionValue value, StoreValue(*spec, node, name));
      const Status set = SetOption(*spec, value, options);
      if (!set.ok()) return error_(node.source(), name + ": " + Message(set));
    }
    return Status::OK();
  }

  Status ReadAllow(const toml::table& table, PeerAllowList* allow) const {
    PeerAllowList read;
    for (const auto& [key, node] : table) {
      const std::string name = "allow." + std::string(key.str());
      if (key.str() != "uids" && key.str() != "gids") {
        return error_(key.source(), "unknown key '" + name + "' (known: allow.uids, allow.gids)");
      }
      const toml::array* a = node.as_array();
      if (a == nullptr) {
        return error_(node.source(),
                      name + " must be an array of ids, not " + std::string(NodeTypeName(node)));
      }
      for (const toml::node& item : *a) {
        // uid_t and gid_t: (uid_t)-1 is no id (it means "unchanged" to chown).
        FC_ASSIGN_OR_RETURN(const uint64_t id,
                            Unsigned(item, name, 0, std::numeric_limits<uint32_t>::max() - 1));
        if (key.str() == "uids") {
          read.uids.push_back(static_cast<uid_t>(id));
        } else {
          read.gids.push_back(static_cast<gid_t>(id));
        }
      }
    }
    *allow = std::move(read);
    return Status::OK();
  }

  Status ReadQuota(const toml::table& table, std::string_view prefix, TenantQuota* quota) const {
    for (const auto& [key, node] : table) {
      const std::string name = std::string(prefix) + "." + std::string(key.str());
      if (key.str() == "dram_bytes") {
        FC_ASSIGN_OR_RETURN(quota->dram_bytes, Size(node, name));
      } else if (key.str() == "ssd_bytes") {
        FC_ASSIGN_OR_RETURN(quota->ssd_bytes, Size(node, name));
      } else {
        return error_(key.source(), "unknown key '" + name + "' (known: dram_bytes, ssd_bytes)");
      }
    }
    return Status::OK();
  }

  Status ReadTenants(const toml::table& table,
                     std::map<std::string, TenantQuota, std::less<>>* tenants) const {
    for (const auto& [key, node] : table) {
      const std::string name(key.str());
      const Status valid = ValidateTenantName(name);
      if (!valid.ok()) return error_(key.source(), "tenants." + name + ": " + Message(valid));
      FC_ASSIGN_OR_RETURN(const toml::table* t, Table(node, "tenants." + name));
      FC_RETURN_IF_ERROR(ReadQuota(*t, "tenants." + name, &(*tenants)[name]));
    }
    return Status::OK();
  }

  ErrorAt error_;
};

// --- rendering ---

// A TOML basic string.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// `text` as comment lines of at most 99 columns.
std::string Comment(std::string_view text) {
  std::string out, line = "#";
  std::istringstream words{std::string(text)};
  for (std::string word; words >> word;) {
    if (line.size() + 1 + word.size() > 99 && line != "#") {
      out += line + "\n";
      line = "#";
    }
    line += " " + word;
  }
  return out + line + "\n";
}

// The row's value as TOML: sizes that FormatOption gives a unit to as strings ("1GiB").
std::string StoreValueToml(const OptionSpec& spec, const OptionValue& value) {
  if (const auto* dirs = std::get_if<std::vector<std::string>>(&value)) {
    std::string out = "[";
    for (const std::string& d : *dirs) out += (out.size() > 1 ? ", " : "") + Quote(d);
    return out + "]";
  }
  const std::string text = FormatOption(spec, value);
  switch (spec.kind) {
    case OptionKind::kSize:
      return text.find_first_not_of("0123456789") == std::string::npos ? text : Quote(text);
    case OptionKind::kRatio:
      return text.find_first_of(".eE") == std::string::npos ? text + ".0" : text;
    case OptionKind::kCount:
    case OptionKind::kBool: return text;
    default: return Quote(text);
  }
}

std::string Setting(std::string_view key, const std::string& value) {
  const ServeSettingSpec& spec = ServeSetting(key);
  return Comment(std::string(spec.help) + " Flag: " + std::string(spec.flag) + ".") +
         std::string(key) + " = " + value + "\n";
}

}  // namespace

const TenantQuota& ServeConfig::QuotaFor(std::string_view tenant) const {
  const auto it = tenants.find(tenant);
  return it == tenants.end() ? default_quota : it->second;
}

std::span<const ServeSettingSpec> ServeSettingTable() { return kSettings; }

const ServeSettingSpec& ServeSetting(std::string_view key) {
  for (const ServeSettingSpec& s : kSettings) {
    if (s.key == key) return s;
  }
  std::abort();  // REQUIRES: a key of the table
}

namespace {

// The TOML parser recurses once per dotted key part, table header level and nested array or
// inline table: a hostile file of 50,000 of them overflows the stack. Lines with more dots, and
// nesting deeper than this, are refused before parsing (no real configuration comes close).
constexpr int kMaxTomlDepth = 64;

Status CheckTomlDepth(std::string_view toml, std::string_view source) {
  int line = 1, dots = 0, depth = 0;
  char quote = 0;        // inside a string opened by this character
  bool comment = false;  // from # to the end of the line
  for (size_t i = 0; i < toml.size(); ++i) {
    const char c = toml[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      comment = false;
      continue;
    }
    if (comment) continue;
    if (quote != 0) {
      if (c == '\\' && quote == '"') {
        ++i;  // an escaped character
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    switch (c) {
      case '"':
      case '\'': quote = c; break;
      case '#': comment = true; break;
      case '.': ++dots; break;
      case '[':
      case '{': ++depth; break;
      case ']':
      case '}': --depth; break;
      default: break;
    }
    if (dots > kMaxTomlDepth || depth > kMaxTomlDepth) {
      return Status::InvalidArgument(std::string(source) + ":" + std::to_string(line) +
                                     ": keys or tables nested deeper than " +
                                     std::to_string(kMaxTomlDepth) + " levels");
    }
  }
  return Status::OK();
}

}  // namespace

Result<ServeConfig> ParseServeConfig(std::string_view toml, std::string_view source) {
  FC_RETURN_IF_ERROR(CheckTomlDepth(toml, source));
  toml::table doc;
  try {
    doc = toml::parse(toml, source);
  } catch (const toml::parse_error& e) {
    const toml::source_position at = e.source().begin;
    return Status::InvalidArgument(std::string(source) + ":" + std::to_string(at.line) + ":" +
                                   std::to_string(at.column) +
                                   ": malformed TOML: " + std::string(e.description()));
  }
  ServeConfig config;
  FC_RETURN_IF_ERROR(ConfigReader(source).Read(doc, &config));
  return config;
}

Result<ServeConfig> LoadServeConfig(const std::string& path) {
  // O_NONBLOCK: a FIFO without a writer must not hang the open. Only a regular file of at most
  // kMaxServeConfigBytes is read (not /dev/zero, not a FIFO, not a directory).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("no config file " + path);
    return Status::IOError("cannot read config file " + path + ": " + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IOError("cannot stat config file " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode))
    return Status::InvalidArgument("config file " + path + " is a directory");
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("config file " + path +
                                   " is not a regular file (a FIFO, socket or device)");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxServeConfigBytes) {
    return Status::InvalidArgument("config file " + path + " has " + std::to_string(st.st_size) +
                                   " bytes; at most " + std::to_string(kMaxServeConfigBytes) +
                                   " are read");
  }
  std::string text(kMaxServeConfigBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::IOError("cannot read config file " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxServeConfigBytes) {  // it grew while read
    return Status::InvalidArgument("config file " + path + " exceeds " +
                                   std::to_string(kMaxServeConfigBytes) + " bytes");
  }
  text.resize(got);
  return ParseServeConfig(text, path);
}

Status ApplyOverrides(const ServeOverrides& overrides, ServeConfig* config) {
  ServeConfig out = *config;
  if (overrides.socket_path) out.socket_path = *overrides.socket_path;
  if (overrides.socket_mode) out.socket_mode = *overrides.socket_mode;
  if (overrides.metrics_addr) out.metrics_addr = *overrides.metrics_addr;
  if (overrides.allow) out.allow = *overrides.allow;
  if (overrides.max_clients) out.max_clients = *overrides.max_clients;
  if (overrides.log_level) out.log_level = *overrides.log_level;
  if (overrides.etcd) out.etcd = *overrides.etcd;
  if (overrides.cluster) out.cluster = *overrides.cluster;
  if (overrides.node_name) out.node_name = *overrides.node_name;
  if (overrides.lease_ttl_s) out.lease_ttl_s = *overrides.lease_ttl_s;
  if (overrides.peer_staging_bytes) out.peer_staging_bytes = *overrides.peer_staging_bytes;
  for (const std::string& name : overrides.store_given) {
    const OptionSpec* spec = FindStoreOption(name);
    if (spec == nullptr) {
      return Status::InvalidArgument("no store option '" + name +
                                     "' (known: " + StoreOptionNameList() + ")");
    }
    FC_RETURN_IF_ERROR(
        SetOption(*spec, GetOption(*spec, overrides.store), &out.store).WithContext(spec->flag));
  }
  *config = std::move(out);
  return Status::OK();
}

Result<mode_t> ParseFileMode(std::string_view text) {
  mode_t mode = 0;
  for (const char c : text) {
    if (c < '0' || c > '7' || mode > 0777) {
      return Status::InvalidArgument("'" + std::string(text) + "' is no octal file mode");
    }
    mode = (mode << 3) | static_cast<mode_t>(c - '0');
  }
  if (text.empty() || mode > 0777) {
    return Status::InvalidArgument("'" + std::string(text) + "' is no file mode of 0 to 0777");
  }
  return mode;
}

std::string FileModeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode));
  return text;
}

Status ValidateServeConfig(const ServeConfig& config) {
  constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
  if (config.socket_path.empty()) {
    return Status::InvalidArgument(
        "no socket: give --socket PATH or socket = \"PATH\" in the "
        "config file");
  }
  if (config.socket_path.size() > kMaxSocketPath ||
      config.socket_path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("socket path '" + config.socket_path + "' must have 1 to " +
                                   std::to_string(kMaxSocketPath) + " bytes, no NUL");
  }
  if (!config.metrics_addr.empty()) {
    FC_RETURN_IF_ERROR(ParseHostPort(config.metrics_addr).status().WithContext("metrics_addr"));
  }
  if (config.allow.uids.empty() && config.allow.gids.empty()) {
    return Status::InvalidArgument("the allow-list admits nobody: list uids or gids in [allow]");
  }
  if (config.max_clients < 1 || config.max_clients > kMaxMaxClients) {
    return Status::InvalidArgument("max_clients = " + std::to_string(config.max_clients) +
                                   " is out of range (1.." + std::to_string(kMaxMaxClients) + ")");
  }
  if (config.log_level > LogLevel::kDebug) return Status::InvalidArgument("unknown log_level");
  if (config.lease_ttl_s < 2 || config.lease_ttl_s > 3600) {
    return Status::InvalidArgument("lease_ttl_s = " + std::to_string(config.lease_ttl_s) +
                                   " is out of range (2..3600)");
  }
  if (!config.etcd.empty()) {
    FC_RETURN_IF_ERROR(cluster::ParseEtcdEndpoints(config.etcd).status().WithContext("etcd"));
  }
  FC_RETURN_IF_ERROR(cluster::ValidateClusterName(config.cluster));
  if (config.node_name.size() > 255) {
    return Status::InvalidArgument("node_name must have at most 255 bytes");
  }
  for (const auto& [name, quota] : config.tenants) {
    FC_RETURN_IF_ERROR(ValidateTenantName(name).WithContext("tenants." + name));
  }
  return ValidateStoreOptions(config.store).WithContext("store");
}

std::string DescribeServeConfig(const ServeConfig& config) {
  const auto ids = [](const auto& list) {
    std::string out;
    for (const auto id : list) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out.empty() ? std::string("-") : out;
  };
  const StoreOptions& store = config.store;
  std::string out = "socket " + config.socket_path + " (mode " + FileModeText(config.socket_mode) +
                    "), allow uids " + ids(config.allow.uids) + " gids " + ids(config.allow.gids);
  out +=
      ", dram " + (store.dram_bytes == 0 ? std::string("off") : FormatSizeText(store.dram_bytes));
  if (store.dram_bytes != 0 && !store.dram_path.empty()) out += " (file " + store.dram_path + ")";
  if (store.ssd_dirs.empty()) {
    out += ", ssd off";
  } else {
    const size_t dirs = store.ssd_dirs.size();
    out += ", ssd " + FormatSizeText(store.ssd_bytes) + " in " + std::to_string(dirs) +
           (dirs == 1 ? " dir (" : " dirs (") + FormatSizeText(store.ssd_file_bytes) +
           " files, sync " + std::string(SyncModeName(store.sync)) + ")";
  }
  out += ", metrics " + (config.metrics_addr.empty() ? std::string("none") : config.metrics_addr);
  out += config.etcd.empty() ? ", one node" : ", cluster " + config.cluster + " at " + config.etcd;
  const size_t tenants = config.tenants.size();
  out += ", " + std::to_string(tenants) + (tenants == 1 ? " tenant quota" : " tenant quotas");
  out += ", max_clients " + std::to_string(config.max_clients);
  return out + ", log " + std::string(LogLevelName(config.log_level));
}

std::string RenderServeConfigToml() {
  const ServeConfig defaults;
  std::string out =
      "# flatcake serve: the daemon's configuration (docs/serve.md, \"Configuration\").\n"
      "#\n"
      "# Every key is optional and shows its default; a flag of `flatcake serve` overrides\n"
      "# the file's value. Sizes are integers of bytes or strings with a binary unit\n"
      "# (\"4096\", \"256MiB\", \"4G\", \"1TiB\").\n"
      "#\n"
      "# Generated from the option tables (src/serve/serve_config.cc, src/core/option_table.cc)\n"
      "# by RenderServeConfigToml; serve_config_test fails when this file differs.\n\n";
  out += Setting("socket", Quote(defaults.socket_path)) + "\n";
  out += Setting("socket_mode", Quote(FileModeText(defaults.socket_mode))) + "\n";
  out += Setting("metrics_addr", Quote(defaults.metrics_addr)) + "\n";
  out += Setting("max_clients", std::to_string(defaults.max_clients)) + "\n";
  out += Setting("log_level", Quote(LogLevelName(defaults.log_level))) + "\n";
  out += Setting("etcd", Quote(defaults.etcd)) + "\n";
  out += Setting("cluster", Quote(defaults.cluster)) + "\n";
  out += Setting("node_name", Quote(defaults.node_name)) + "\n";
  out += Setting("lease_ttl_s", std::to_string(defaults.lease_ttl_s)) + "\n";
  out += Setting("peer_staging_bytes", std::to_string(defaults.peer_staging_bytes)) + "\n";

  out += Comment(
      "Who may connect, by the peer's credentials (SO_PEERCRED): a peer whose uid, or whose "
      "effective gid, is listed (supplementary groups are not seen). Without this table: the "
      "daemon's own uid only. With it: exactly the ids listed, root included only if listed. "
      "Flags: --allow-uid, --allow-gid (repeatable; given, they replace the table).");
  out += "# [allow]\n# uids = [1000]\n# gids = []\n\n";

  out += Comment(
      "The quota of every tenant not named under [tenants]: bytes of segment footprint the "
      "tenant may hold on each medium; 0 is no limit beyond the medium's capacity.");
  out += "[default_quota]\n";
  out += "dram_bytes = " + std::to_string(defaults.default_quota.dram_bytes) + "\n";
  out += "ssd_bytes = " + std::to_string(defaults.default_quota.ssd_bytes) + "\n\n";

  out += Comment(
      "Quotas of named tenants, one table each (a tenant name is 1 to 64 bytes of "
      "[A-Za-z0-9._-], as clients give it in Hello); a key left out is 0, no limit.");
  out += "# [tenants.sglang]\n# dram_bytes = \"64GiB\"\n# ssd_bytes = \"2TiB\"\n\n";

  out += Comment(
      "The store the daemon owns: one key per store option, as the CLI's store flags and the "
      "Python module take them (README.md, \"Store options\").");
  out += "[store]\n";
  for (const OptionSpec& spec : StoreOptionTable()) {
    std::string help(spec.help);
    const std::string range = OptionRangeText(spec);
    if (spec.kind == OptionKind::kEnum) {
      help += " Values: " + range + ".";
    } else if (!range.empty()) {
      help += " Range: " + range + ".";
    }
    help += " Flag: " + std::string(spec.flag) + (spec.flag_clears ? " (sets it false)." : ".");
    out.append("\n").append(Comment(help));
    out += std::string(spec.name) + " = " + StoreValueToml(spec, GetOption(spec, defaults.store)) +
           "\n";
  }
  return out;
}

}  // namespace flatcake::serve
