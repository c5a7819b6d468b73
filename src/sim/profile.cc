#include "sim/profile.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

namespace flatcake::sim {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Reads the fields of one JSON object into a profile, each through a typed setter.
class FieldReader {
 public:
  FieldReader(const Json& obj, std::string origin, bool require_sources)
      : obj_(obj), origin_(std::move(origin)), require_sources_(require_sources) {}

  Status Number(const char* name, double* out, bool required = true) {
    auto it = obj_.find(name);
    if (it == obj_.end()) {
      return required ? Error(name, "is missing") : Status::OK();
    }
    const Json* v = &*it;
    if (v->is_object()) {
      auto src = v->find("source");
      if (require_sources_ &&
          (src == v->end() || !src->is_string() || src->get<std::string>().empty())) {
        return Error(name, "has no \"source\"");
      }
      auto val = v->find("value");
      if (val == v->end()) return Error(name, "has no \"value\"");
      v = &*val;
    } else if (require_sources_) {
      return Error(name, "must be {\"value\": ..., \"source\": \"...\"}");
    }
    if (v->is_boolean()) {
      *out = v->get<bool>() ? 1 : 0;
      return Status::OK();
    }
    if (!v->is_number()) return Error(name, "is not a number");
    *out = v->get<double>();
    if (!(*out >= 0)) return Error(name, "must be >= 0");
    return Status::OK();
  }
  template <typename T>
  Status Integer(const char* name, T* out, bool required = true) {
    double d = static_cast<double>(*out);
    FC_RETURN_IF_ERROR(Number(name, &d, required));
    if (d != static_cast<double>(static_cast<uint64_t>(d))) {
      return Error(name, "must be a whole number");
    }
    *out = static_cast<T>(d);
    return Status::OK();
  }
  Status Bool(const char* name, bool* out, bool required = true) {
    double d = *out ? 1 : 0;
    FC_RETURN_IF_ERROR(Number(name, &d, required));
    *out = d != 0;
    return Status::OK();
  }
  Status String(const char* name, std::string* out, bool required = true) {
    auto it = obj_.find(name);
    if (it == obj_.end()) return required ? Error(name, "is missing") : Status::OK();
    if (!it->is_string()) return Error(name, "is not a string");
    *out = it->get<std::string>();
    return Status::OK();
  }
  Status NumberList(const char* name, std::vector<double>* out) {
    auto it = obj_.find(name);
    if (it == obj_.end()) return Error(name, "is missing");
    const Json* v = &*it;
    if (v->is_object()) {
      auto val = v->find("value");
      if (val == v->end()) return Error(name, "has no \"value\"");
      v = &*val;
    }
    if (!v->is_array()) return Error(name, "is not a list");
    out->clear();
    for (const Json& e : *v) {
      if (!e.is_number() || !(e.get<double>() > 0))
        return Error(name, "holds a non-positive value");
      out->push_back(e.get<double>());
    }
    return Status::OK();
  }

 private:
  Status Error(const char* name, const char* what) const {
    return Status::Corruption(origin_ + ": field \"" + name + "\" " + what);
  }
  const Json& obj_;
  std::string origin_;
  bool require_sources_;
};

std::vector<fs::path> SearchDirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("FLATCAKE_PROFILES"); env && *env) dirs.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / "profiles");
    dirs.push_back(exe.parent_path().parent_path() / "profiles");
    // An install's bin/flatcake: <prefix>/share/flatcake/profiles; a wheel's keeps them in
    // <prefix>/lib/flatcake/profiles, a folder of its own that `pip uninstall` removes whole.
    dirs.push_back(exe.parent_path().parent_path() / "share" / "flatcake" / "profiles");
    dirs.push_back(exe.parent_path().parent_path() / "lib" / "flatcake" / "profiles");
  }
  dirs.emplace_back("profiles");
#ifdef FLATCAKE_SOURCE_DIR
  dirs.push_back(fs::path(FLATCAKE_SOURCE_DIR) / "profiles");
#endif
  return dirs;
}

Status Check(bool ok, const std::string& name, const char* what) {
  return ok ? Status::OK() : Status::InvalidArgument("profile " + name + ": " + what);
}

}  // namespace

Status SimProfile::Validate() const {
  FC_RETURN_IF_ERROR(Check(layers > 0 && planes > 0, name, "layers and planes must be > 0"));
  FC_RETURN_IF_ERROR(Check(kv_bytes_per_token > 0, name, "kv_bytes_per_token must be > 0"));
  FC_RETURN_IF_ERROR(Check(max_running > 0, name, "max_running must be > 0"));
  FC_RETURN_IF_ERROR(Check(prefill_tokens_per_s > 0, name, "prefill_tokens_per_s must be > 0"));
  FC_RETURN_IF_ERROR(Check(h2d_gbps > 0 && host_copy_gbps > 0 && scatter_gbps > 0, name,
                           "h2d_gbps, host_copy_gbps and scatter_gbps must be > 0"));
  FC_RETURN_IF_ERROR(
      Check(ssd.read_gbps > 0 && ssd.write_gbps > 0 && ssd.max_iops > 0 && ssd.workers > 0 &&
                ssd.queue_depth > 0 && ssd.gds_gbps_per_worker > 0,
            name, "the SSD's bandwidths, IOPS, workers and queue depth must be > 0"));
  FC_RETURN_IF_ERROR(Check(dram_bytes > 0 && ssd_bytes > 0, name, "budgets must be > 0"));
  FC_RETURN_IF_ERROR(Check(staging_bytes > 0 && gpu_window_bytes > 0, name,
                           "staging_bytes and gpu_window_bytes must be > 0"));
  FC_RETURN_IF_ERROR(Check(flat_file_bytes >= 4096 && flat_file_bytes % 4096 == 0, name,
                           "flat_file_bytes must be a positive multiple of 4096"));
  FC_RETURN_IF_ERROR(Check(max_io_bytes >= 4096 && max_io_bytes % 4096 == 0, name,
                           "max_io_bytes must be a positive multiple of 4096"));
  FC_RETURN_IF_ERROR(Check(bucket_bytes > 0 && bucket_keys > 0 && prefetch_batch_objects > 0, name,
                           "bucket limits and prefetch_batch_objects must be > 0"));
  FC_RETURN_IF_ERROR(Check(workload == "agentic" || workload == "replay-default", name,
                           "workload must be \"agentic\" or \"replay-default\""));
  FC_RETURN_IF_ERROR(Check(!qps.empty(), name, "qps must list at least one load"));
  return Status::OK();
}

Result<SimProfile> ParseProfile(std::string_view text, std::string_view origin,
                                bool require_sources) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string where(origin);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(where + ": not a JSON object");
  }
  SimProfile p;
  auto section = [&](const char* name) -> Result<const Json*> {
    auto it = j.find(name);
    if (it == j.end() || !it->is_object()) {
      return Status::Corruption(where + ": section \"" + name + "\" is missing");
    }
    return &*it;
  };
  {
    FieldReader r(j, where, false);
    FC_RETURN_IF_ERROR(r.String("name", &p.name));
    FC_RETURN_IF_ERROR(r.String("description", &p.description, false));
  }
  FC_ASSIGN_OR_RETURN(const Json* model, section("model"));
  FieldReader m(*model, where + " model", require_sources);
  FC_RETURN_IF_ERROR(m.Integer("layers", &p.layers));
  FC_RETURN_IF_ERROR(m.Integer("planes", &p.planes));
  FC_RETURN_IF_ERROR(m.Integer("page_tokens", &p.page_tokens));
  FC_RETURN_IF_ERROR(m.Integer("kv_bytes_per_token", &p.kv_bytes_per_token));

  FC_ASSIGN_OR_RETURN(const Json* engine, section("engine"));
  FieldReader e(*engine, where + " engine", require_sources);
  FC_RETURN_IF_ERROR(e.Integer("max_running", &p.max_running));
  FC_RETURN_IF_ERROR(e.Number("prefill_tokens_per_s", &p.prefill_tokens_per_s));
  FC_RETURN_IF_ERROR(e.Number("prefill_attn_s_per_mtok", &p.prefill_attn_s_per_mtok));
  FC_RETURN_IF_ERROR(e.Number("decode_tokens_per_s", &p.decode_tokens_per_s));
  FC_RETURN_IF_ERROR(e.Integer("hbm_kv_bytes", &p.hbm_kv_bytes));
  FC_RETURN_IF_ERROR(e.Bool("writes_hold_slot", &p.writes_hold_slot));

  FC_ASSIGN_OR_RETURN(const Json* host, section("host"));
  FieldReader h(*host, where + " host", require_sources);
  FC_RETURN_IF_ERROR(h.Number("h2d_gbps", &p.h2d_gbps));
  FC_RETURN_IF_ERROR(h.Number("host_copy_gbps", &p.host_copy_gbps));
  FC_RETURN_IF_ERROR(h.Number("scatter_gbps", &p.scatter_gbps));
  FC_RETURN_IF_ERROR(h.Bool("scatter_pipelined", &p.scatter_pipelined));

  FC_ASSIGN_OR_RETURN(const Json* ssd, section("ssd"));
  FieldReader s(*ssd, where + " ssd", require_sources);
  FC_RETURN_IF_ERROR(s.Number("read_gbps", &p.ssd.read_gbps));
  FC_RETURN_IF_ERROR(s.Number("write_gbps", &p.ssd.write_gbps));
  FC_RETURN_IF_ERROR(s.Number("cmd_latency_s", &p.ssd.cmd_latency_s));
  FC_RETURN_IF_ERROR(s.Number("max_iops", &p.ssd.max_iops));
  FC_RETURN_IF_ERROR(s.Number("cmd_cpu_s", &p.ssd.cmd_cpu_s));
  FC_RETURN_IF_ERROR(s.Integer("workers", &p.ssd.workers));
  FC_RETURN_IF_ERROR(s.Integer("queue_depth", &p.ssd.queue_depth));
  FC_RETURN_IF_ERROR(s.Number("gds_gbps_per_worker", &p.ssd.gds_gbps_per_worker));

  FC_ASSIGN_OR_RETURN(const Json* budget, section("budget"));
  FieldReader b(*budget, where + " budget", require_sources);
  FC_RETURN_IF_ERROR(b.Integer("dram_bytes", &p.dram_bytes));
  FC_RETURN_IF_ERROR(b.Integer("ssd_bytes", &p.ssd_bytes));
  FC_RETURN_IF_ERROR(b.Integer("staging_bytes", &p.staging_bytes));
  FC_RETURN_IF_ERROR(b.Integer("gpu_window_bytes", &p.gpu_window_bytes));

  FC_ASSIGN_OR_RETURN(const Json* store, section("store"));
  FieldReader st(*store, where + " store", require_sources);
  FC_RETURN_IF_ERROR(st.Integer("flat_file_bytes", &p.flat_file_bytes));
  FC_RETURN_IF_ERROR(st.Integer("max_gap_bytes", &p.max_gap_bytes));
  FC_RETURN_IF_ERROR(st.Integer("max_io_bytes", &p.max_io_bytes));
  FC_RETURN_IF_ERROR(st.Integer("tau_tokens", &p.tau_tokens));
  FC_RETURN_IF_ERROR(st.Integer("l_agent_tokens", &p.l_agent_tokens));
  FC_RETURN_IF_ERROR(st.Integer("bucket_bytes", &p.bucket_bytes));
  FC_RETURN_IF_ERROR(st.Integer("bucket_keys", &p.bucket_keys));
  FC_RETURN_IF_ERROR(st.Number("prefetch_timeout_base_s", &p.prefetch_timeout_base_s));
  FC_RETURN_IF_ERROR(
      st.Number("prefetch_timeout_per_ki_token_s", &p.prefetch_timeout_per_ki_token_s));
  FC_RETURN_IF_ERROR(st.Number("prefetch_timeout_max_s", &p.prefetch_timeout_max_s));
  FC_RETURN_IF_ERROR(st.Integer("prefetch_batch_objects", &p.prefetch_batch_objects));
  FC_RETURN_IF_ERROR(st.Bool("promotion_rereads", &p.promotion_rereads));

  FC_ASSIGN_OR_RETURN(const Json* wl, section("workload"));
  FieldReader w(*wl, where + " workload", false);
  FC_RETURN_IF_ERROR(w.String("kind", &p.workload));
  FC_RETURN_IF_ERROR(w.Integer("requests", &p.workload_requests, false));
  FC_RETURN_IF_ERROR(w.Number("scale", &p.workload_scale, false));
  FC_RETURN_IF_ERROR(w.Integer("concurrency", &p.workload_concurrency, false));
  FC_RETURN_IF_ERROR(w.NumberList("qps", &p.qps));

  FC_RETURN_IF_ERROR(p.Validate());
  return p;
}

Result<std::string> FindProfilePath(std::string_view name_or_path) {
  const std::string arg(name_or_path);
  if (arg.find('/') != std::string::npos || arg.ends_with(".json")) return arg;
  for (const fs::path& d : SearchDirs()) {
    std::error_code ec;
    if (fs::is_regular_file(d / (arg + ".json"), ec)) return (d / (arg + ".json")).string();
  }
  std::string known;
  for (const std::string& n : ListProfiles()) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("no profile named '" + arg +
                          "' (known: " + (known.empty() ? "none found" : known) +
                          "; set FLATCAKE_PROFILES to the profiles/ directory)");
}

Result<SimProfile> LoadProfile(std::string_view name_or_path) {
  FC_ASSIGN_OR_RETURN(const std::string path, FindProfilePath(name_or_path));
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseProfile(ss.str(), path, /*require_sources=*/false);
}

std::vector<std::string> ListProfiles() {
  std::vector<std::string> names;
  for (const fs::path& d : SearchDirs()) {
    std::error_code ec;
    for (const auto& ent : fs::directory_iterator(d, ec)) {
      if (ent.path().extension() != ".json") continue;
      std::string n = ent.path().stem().string();
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    if (!names.empty()) break;  // the first directory that has profiles is the one used
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace flatcake::sim
