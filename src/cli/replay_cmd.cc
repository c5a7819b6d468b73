// `flatcake replay`: replays a trace (or a built-in workload) with real reads and writes on this
// machine's disk under each policy (flat, tiered, dram-only), and prints one row per policy and
// load. See docs/replay.md.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "eval/replay.h"
#include "trace/trace.h"
#include "trace/workload_gen.h"
#include "util/temp_dir.h"

namespace flatcake::cli {
namespace {

struct ReplayArgs {
  std::string trace_path;
  std::string workload;
  std::string format = "auto";
  uint64_t max_requests = 0;
  uint64_t requests = 0;  // generated workloads; 0 = the built-in default
  double scale = 0;       // generated workloads; 0 = the built-in default
  uint64_t seed = 1;
  std::vector<std::string> policies = {"flat", "tiered", "dram-only"};
  std::vector<double> qps;
  std::string dir;
  bool json = false;
  std::string plot;
  bool progress = true;
  eval::ReplayOptions o;
};

Result<std::vector<trace::TraceRequest>> LoadRequests(ReplayArgs& a) {
  std::vector<trace::TraceRequest> reqs;
  if (!a.trace_path.empty()) {
    trace::ReaderOptions ro;
    FC_ASSIGN_OR_RETURN(ro.format, trace::ParseTraceFormat(a.format));
    FC_ASSIGN_OR_RETURN(auto reader, trace::OpenTrace(a.trace_path, ro));
    trace::TraceRequest r;
    for (;;) {
      FC_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
      if (!more) break;
      reqs.push_back(r);
      if (a.max_requests && reqs.size() >= a.max_requests) break;
    }
    if (reqs.empty()) return Status::InvalidArgument("trace " + a.trace_path + " has no requests");
    return reqs;
  }
  FC_ASSIGN_OR_RETURN(auto kind,
                      trace::ParseWorkloadKind(a.workload.empty() ? "agentic" : a.workload));
  const bool builtin = a.workload.empty();
  // The agentic kind gets the built-in default's size (eval::DefaultReplayWorkload).
  auto wo = kind == trace::WorkloadKind::kAgentic ? eval::DefaultReplayWorkload()
                                                  : trace::DefaultWorkloadOptions(kind);
  wo.seed = a.seed;
  if (a.requests) wo.requests = a.requests;
  if (a.scale > 0) wo.scale = a.scale;
  if (a.max_requests) wo.requests = std::min(wo.requests, a.max_requests);
  FC_RETURN_IF_ERROR(trace::ValidateWorkloadOptions(wo));
  FC_ASSIGN_OR_RETURN(reqs, trace::GenerateWorkload(kind, wo));
  // Placement thresholds are in tokens: scale them with the workload so a scaled-down agentic
  // session is still "long" to the flat store.
  if (builtin || a.scale > 0) {
    a.o.l_agent_tokens = eval::ScaledLAgentTokens(a.o.l_agent_tokens, wo.scale);
  }
  return reqs;
}

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void PrintTable(const std::vector<eval::ReplayReport>& rows) {
  std::printf("%-9s %6s %6s %6s %6s %11s %9s %9s %6s %6s %9s %9s %7s %8s %8s %8s %6s %5s\n",
              "policy", "qps", "hit%", "dram%", "ssd%", "recomputed", "ssd_rd", "ssd_wr", "r_amp",
              "w_amp", "rst_p50", "rst_p99", "rd_GB/s", "ttft_avg", "ttft_p50", "ttft_p99", "req/s",
              "bad");
  for (const auto& r : rows) {
    std::printf(
        "%-9s %6.2f %6.1f %6.1f %6.1f %11llu %8.2fG %8.2fG %6.3f %6.3f %8.1fms %8.1fms %7.2f "
        "%7.3fs %7.3fs %7.3fs %6.2f %5llu\n",
        r.policy.c_str(), r.qps, r.hit_rate_pct(), r.hit_dram_pct(), r.hit_ssd_pct(),
        static_cast<unsigned long long>(r.recomputed_tokens), r.ssd_bytes_read / 1e9,
        r.ssd_bytes_written / 1e9, r.read_amp, r.write_amp, r.restore_p50_s * 1e3,
        r.restore_p99_s * 1e3, r.ssd_read_gbps, r.ttft_mean_s, r.ttft_p50_s, r.ttft_p99_s,
        r.throughput_rps, static_cast<unsigned long long>(r.mismatches));
  }
}

nlohmann::json ToJson(const eval::ReplayReport& r) {
  nlohmann::json j;
  j["policy"] = r.policy;
  j["qps"] = r.qps;
  j["requests"] = r.requests;
  j["duration_s"] = r.duration_s;
  j["block_bytes"] = r.block_bytes;
  j["block_tokens"] = r.block_tokens;
  j["hit_rate_pct"] = r.hit_rate_pct();
  j["hit_dram_pct"] = r.hit_dram_pct();
  j["hit_ssd_pct"] = r.hit_ssd_pct();
  j["input_tokens"] = r.input_tokens;
  j["recomputed_tokens"] = r.recomputed_tokens;
  j["revoked_blocks"] = r.revoked_blocks;
  j["ssd_bytes_read"] = r.ssd_bytes_read;
  j["ssd_bytes_delivered"] = r.ssd_bytes_delivered;
  j["ssd_bytes_written"] = r.ssd_bytes_written;
  j["dram_bytes_written"] = r.dram_bytes_written;
  j["bytes_admitted"] = r.bytes_admitted;
  j["read_amp"] = r.read_amp;
  j["write_amp"] = r.write_amp;
  j["restore_p50_s"] = r.restore_p50_s;
  j["restore_p99_s"] = r.restore_p99_s;
  j["ssd_read_gbps"] = r.ssd_read_gbps;
  j["ttft_mean_s"] = r.ttft_mean_s;
  j["ttft_p50_s"] = r.ttft_p50_s;
  j["ttft_p99_s"] = r.ttft_p99_s;
  j["throughput_rps"] = r.throughput_rps;
  j["gpu_busy_frac"] = r.gpu_busy_frac;
  j["mismatches"] = r.mismatches;
  j["errors"] = r.errors;
  j["promotions"] = r.promotions;
  j["evictions"] = r.evictions;
  j["offloads"] = r.offloads;
  j["buckets_dropped"] = r.buckets_dropped;
  j["revocations"] = r.revocations;
  j["scopes_reclaimed"] = r.scopes_reclaimed;
  return j;
}

bool HaveGnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// Draws the policies side by side: hit rate split by medium, and TTFT; with several loads, hit
// rate and mean/P99 TTFT against QPS.
Status Plot(const std::string& path, const std::vector<eval::ReplayReport>& rows,
            const std::vector<std::string>& policies, const std::vector<double>& qps) {
  const bool svg = path.size() > 4 && path.substr(path.size() - 4) == ".svg";
  const bool png = path.size() > 4 && path.substr(path.size() - 4) == ".png";
  if (!svg && !png) return Status::InvalidArgument("--plot needs a .png or .svg file name");
  std::string data_path = path + ".dat";
  std::FILE* d = std::fopen(data_path.c_str(), "w");
  if (!d) return Status::IOError("cannot write " + data_path);
  std::ostringstream gp;
  gp << "set terminal " << (svg ? "svg size 1200,450" : "pngcairo size 1200,450") << "\n";
  gp << "set output '" << path << "'\nset multiplot layout 1,2\nset grid ytics\n";
  gp << "set key outside bottom center horizontal\n";
  if (qps.size() <= 1) {
    // Bars: one cluster per policy.
    std::fprintf(d, "policy dram ssd ttft_mean ttft_p99\n");
    for (const auto& r : rows) {
      std::fprintf(d, "%s %f %f %f %f\n", r.policy.c_str(), r.hit_dram_pct(), r.hit_ssd_pct(),
                   r.ttft_mean_s, r.ttft_p99_s);
    }
    gp << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8\n"
       << "set boxwidth 0.6\nset ylabel 'delivered hit rate (%)'\nset yrange [0:100]\n"
       << "set title 'Hit rate by medium'\n"
       << "plot '" << data_path << "' using 2:xtic(1) title 'DRAM', '' using 3 title 'SSD'\n"
       << "set style histogram clustered\nset yrange [0:*]\nset ylabel 'TTFT (s)'\n"
       << "set title 'Modelled TTFT'\n"
       << "plot '" << data_path << "' using 4:xtic(1) title 'mean', '' using 5 title 'P99'\n";
  } else {
    // Lines: one data block per policy.
    for (const auto& p : policies) {
      std::fprintf(d, "# %s\n", p.c_str());
      for (const auto& r : rows) {
        if (r.policy == p) {
          std::fprintf(d, "%f %f %f %f\n", r.qps, r.hit_rate_pct(), r.ttft_mean_s, r.ttft_p99_s);
        }
      }
      std::fprintf(d, "\n\n");
    }
    gp << "set xlabel 'QPS'\nset ylabel 'delivered hit rate (%)'\nset yrange [0:100]\n"
       << "set title 'Hit rate vs load'\nplot ";
    for (size_t i = 0; i < policies.size(); ++i) {
      gp << (i ? ", " : "") << "'" << data_path << "' index " << i
         << " using 1:2 with linespoints lw 2 title '" << policies[i] << "'";
    }
    gp << "\nset ylabel 'TTFT (s)'\nset autoscale y\nset logscale y\nset title 'Modelled TTFT "
          "vs load (solid mean, dashed P99)'\nplot ";
    for (size_t i = 0; i < policies.size(); ++i) {
      gp << (i ? ", " : "") << "'" << data_path << "' index " << i
         << " using 1:3 with linespoints lw 2 lc " << i + 1 << " title '" << policies[i]
         << " mean', '' index " << i << " using 1:4 with linespoints dt 2 lc " << i + 1
         << " title '" << policies[i] << " P99'";
    }
    gp << "\n";
  }
  gp << "unset multiplot\n";
  std::fclose(d);
  std::string script = path + ".gp";
  std::FILE* s = std::fopen(script.c_str(), "w");
  if (!s) return Status::IOError("cannot write " + script);
  std::fputs(gp.str().c_str(), s);
  std::fclose(s);
  const std::string cmd = "gnuplot '" + script + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::remove(script.c_str());
  std::remove(data_path.c_str());
  if (rc != 0) return Status::IOError("gnuplot failed (exit " + std::to_string(rc) + ")");
  return Status::OK();
}

// A progress callback for the run `label`: a redrawn bar on a terminal, else a line every 25%.
decltype(eval::ReplayOptions::progress) ProgressReporter(const std::string& label) {
  if (isatty(STDERR_FILENO)) {
    return [label](uint64_t done, uint64_t total) {
      const int width = 30;
      const int fill = total ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\r%-22s [%s%s] %llu/%llu", label.c_str(),
                   std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  return [label, last = uint64_t{0}](uint64_t done, uint64_t total) mutable {
    const uint64_t pct = total ? 100 * done / total : 100;
    if (pct >= last + 25 || done == total) {
      std::fprintf(stderr, "%s: %llu%%\n", label.c_str(), static_cast<unsigned long long>(pct));
      last = pct;
    }
  };
}

int RunReplayCommand(ReplayArgs& a) {
  if (!a.trace_path.empty() && !a.workload.empty()) {
    return ReportArgError("replay",
                          Status::InvalidArgument("give --trace or --workload, not both"));
  }
  if (!a.plot.empty() && !(a.plot.ends_with(".png") || a.plot.ends_with(".svg"))) {
    return ReportArgError("replay",
                          Status::InvalidArgument("--plot needs a .png or .svg file name"));
  }
  if (!a.plot.empty() && !HaveGnuplot()) {
    return ReportStatus("replay",
                        Status::Unsupported("--plot needs gnuplot, which is not on PATH"));
  }
  std::vector<eval::ReplayPolicy> policies;
  std::vector<std::string> names;
  for (const auto& p : a.policies) {
    auto r = eval::ParseReplayPolicy(p);
    if (!r.ok()) return ReportArgError("replay", r.status());
    policies.push_back(*r);
    names.emplace_back(eval::ReplayPolicyName(*r));
  }
  if (!a.workload.empty()) {
    if (auto kind = trace::ParseWorkloadKind(a.workload); !kind.ok()) {
      return ReportArgError("replay", kind.status());
    }
  }
  if (auto format = trace::ParseTraceFormat(a.format); !format.ok()) {
    return ReportArgError("replay", format.status());
  }
  const bool builtin = a.trace_path.empty() && a.workload.empty();
  auto reqs = LoadRequests(a);
  if (!reqs.ok()) return ReportStatus("replay", reqs.status());
  if (a.qps.empty()) a.qps = {builtin ? eval::kDefaultReplayQps : 0.0};
  for (double q : a.qps) {
    if (q < 0) {
      return ReportArgError("replay", Status::InvalidArgument("--qps values must be >= 0"));
    }
  }
  std::unique_ptr<TempDir> tmp;
  std::string base = a.dir;
  if (base.empty()) {
    tmp = std::make_unique<TempDir>("flatcake-replay");
    if (tmp->path().empty()) {
      return ReportStatus("replay", Status::IOError("cannot create a temporary directory"));
    }
    base = tmp->path();
  }
  std::fprintf(stderr, "replay: %zu requests, block %u tokens; data under %s\n", reqs->size(),
               a.o.block_tokens ? a.o.block_tokens : reqs->front().block_tokens, base.c_str());
  std::vector<eval::ReplayReport> rows;
  for (double q : a.qps) {
    for (size_t i = 0; i < policies.size(); ++i) {
      eval::ReplayOptions o = a.o;
      o.policy = policies[i];
      o.qps = q;
      // A fresh directory per run: every policy starts from an empty cache.
      o.dir = base + "/" + names[i] + "-" + std::to_string(rows.size());
      std::error_code ec;
      std::filesystem::create_directories(o.dir, ec);
      if (ec) return ReportStatus("replay", Status::IOError("cannot create " + o.dir));
      const std::string label = names[i] + " @" + (q > 0 ? Fmt("%.2f", q) + " qps" : "trace");
      if (a.progress) o.progress = ProgressReporter(label);
      auto r = eval::RunReplay(*reqs, o);
      std::filesystem::remove_all(o.dir, ec);
      if (!r.ok()) return ReportStatus("replay", r.status());
      if (r->errors > 0) {
        std::fprintf(stderr, "replay: %s: %llu request errors, first: %s\n", label.c_str(),
                     static_cast<unsigned long long>(r->errors), r->first_error.c_str());
      }
      rows.push_back(*r);
    }
  }
  if (a.json) {
    for (const auto& r : rows) std::printf("%s\n", ToJson(r).dump().c_str());
  } else {
    PrintTable(rows);
  }
  if (!a.plot.empty()) {
    Status st = Plot(a.plot, rows, names, a.qps);
    if (!st.ok()) return ReportStatus("replay", st);
    std::fprintf(stderr, "replay: plot written to %s\n", a.plot.c_str());
  }
  uint64_t bad = 0;
  for (const auto& r : rows) bad += r.mismatches + r.errors;
  return bad ? 2 : 0;
}

}  // namespace

void RegisterReplayCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd =
      app.add_subcommand("replay",
                         "Replay a trace with real I/O under flat, tiered and DRAM-only policies "
                         "(no arguments: a built-in agentic workload)");
  const auto size = CLI::AsSizeValue(false);
  ReplayArgs& a = *args;
  a.o.dram_bytes = 64 * kMiB;
  a.o.ssd_bytes = 2 * kGiB;
  // The replay's KV bytes and token counts are scaled down (see docs/replay.md); the tiered
  // baseline's host staging pool and prefetch deadlines are scaled with them so that restores
  // meet them in the same proportion as at full size.
  a.o.tiered.staging_bytes = 16 * kMiB;
  a.o.tiered.prefetch_timeout_base_s = 0.2;
  a.o.tiered.prefetch_timeout_per_ki_token_s = 0.01;
  a.o.tiered.prefetch_timeout_max_s = 3.0;
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--trace", a.trace_path, "Trace file (Mooncake/Qwen/agentic JSONL)");
  cmd->add_option("--format", a.format, "Trace format: auto, mooncake, qwen, agentic");
  cmd->add_option("--workload", a.workload, "Generated workload: agentic, conversation, api");
  cmd->add_option("--requests", a.requests,
                  "Requests to generate (generated workloads; 0 = the workload's default)");
  cmd->add_option("--scale", a.scale,
                  "Token scale of a generated workload (0 = the workload's default)");
  cmd->add_option("--seed", a.seed, "Seed of a generated workload");
  cmd->add_option("--max-requests", a.max_requests, "Replay at most this many requests (0 = all)");
  cmd->add_option("--policy", a.policies, "Policies, comma separated: flat,tiered,dram-only")
      ->delimiter(',');
  cmd->add_option("--qps", a.qps,
                  "Target arrival rate(s), comma separated; 0 = trace timing; none given = the "
                  "built-in run's rate without --trace/--workload, trace timing otherwise")
      ->delimiter(',');
  cmd->add_option("--dram-bytes", a.o.dram_bytes, "DRAM budget per policy")->transform(size);
  cmd->add_option("--ssd-bytes", a.o.ssd_bytes, "SSD budget per policy")->transform(size);
  cmd->add_option("--dir", a.dir, "Data directory (default: a temporary one, removed after)");
  cmd->add_option("--workers", a.o.workers, "Requests in flight at once");
  cmd->add_option("--layers", a.o.model.layers, "Model layers");
  cmd->add_option("--kv-bytes-per-token", a.o.model.kv_bytes_per_token,
                  "KV bytes per token (0: --block-bytes / block tokens)");
  cmd->add_option("--block-bytes", a.o.model.block_bytes, "Block size when kv-bytes-per-token is 0")
      ->transform(size);
  cmd->add_option("--block-tokens", a.o.block_tokens, "Override the trace's tokens per block");
  cmd->add_option("--prefill-tps", a.o.model.prefill_tokens_per_s,
                  "Modelled GPU prefill rate (tokens/s)");
  cmd->add_option("--staging-bytes", a.o.tiered.staging_bytes, "Tiered: host staging pool")
      ->transform(size);
  cmd->add_option("--bucket-bytes", a.o.tiered.bucket_bytes, "Tiered: bucket size limit")
      ->transform(size);
  cmd->add_option("--bucket-keys", a.o.tiered.bucket_keys, "Tiered: keys per bucket limit");
  cmd->add_option("--prefetch-timeout-base", a.o.tiered.prefetch_timeout_base_s,
                  "Tiered: prefetch timeout base (s)");
  cmd->add_option("--prefetch-timeout-per-ki-token", a.o.tiered.prefetch_timeout_per_ki_token_s,
                  "Tiered: prefetch timeout per 1024 tokens (s)");
  cmd->add_option("--promotion-rereads", a.o.tiered.promotion_rereads,
                  "Tiered: a promotion reads the object from SSD again (true/false)");
  cmd->add_option("--flat-file-bytes", a.o.flat_file_bytes,
                  "Flat: SSD pool file size (sessions share files; a segment never spans two)")
      ->transform(size);
  cmd->add_option("--window-bytes", a.o.flat_window_bytes,
                  "Flat: the store's read window, into which FC-MAS admits SSD restores")
      ->transform(size);
  cmd->add_option("--max-gap-bytes", a.o.flat_max_gap_bytes,
                  "Flat: largest hole bridged by one read (Δgap)")
      ->transform(size);
  cmd->add_option("--tau-tokens", a.o.tau_tokens, "Flat: short-reply threshold (tokens)");
  cmd->add_option("--l-agent-tokens", a.o.l_agent_tokens,
                  "Flat: long-context threshold (tokens; scaled with --scale)");
  AddStoreFlag(cmd, "io_engine", &a.o.io_engine);
  cmd->add_flag("--json", a.json, "One JSON object per policy and load, one per line");
  cmd->add_option("--plot", a.plot, "Draw the policies side by side (PNG or SVG, via gnuplot)");
  cmd->add_flag("!--no-progress", a.progress, "No progress bar on stderr");
  cmd->callback([args, exit_code] { *exit_code = RunReplayCommand(*args); });
}

}  // namespace flatcake::cli
