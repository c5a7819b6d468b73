// flatcake simulate: the discrete-event simulator (src/sim/) at the paper's scale.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "eval/replay.h"
#include "sim/profile.h"
#include "sim/simulator.h"
#include "sim/workloads.h"
#include "trace/trace_stats.h"
#include "trace/workload_gen.h"

namespace flatcake::cli {
namespace {

struct SimArgs {
  int figure = 0;
  std::string profile;
  std::vector<std::string> policies;
  std::vector<double> qps;
  std::string workload;
  std::string trace_path;
  uint64_t requests = 0;
  uint64_t max_requests = 0;
  std::vector<uint64_t> contexts;  // fixed workload: tokens per request
  uint32_t sessions = 0;     // fixed workload; 0 = sized to the profile's budgets (FixedSetup)
  uint32_t turns = 0;        // fixed workload; 0 = at least 4, and 256 requests in all
  uint32_t concurrency = 0;  // agentic sessions in flight; 0 = the profile's
  uint64_t seed = 1;
  double hbm_cache_gb = -1;  // < 0: the profile's pool alone limits the GPU prefix cache
  bool json = false;
  std::string plot;
};

// One simulated run's place in a sweep.
struct Row {
  sim::SimReport r;
  uint64_t context_tokens = 0;  // fixed-length sweep only
};

// The paper's Claude Code row of Table 1 (64-token blocks, infinite cache).
void PrintTable1Comparison(const trace::TraceStats& s, uint32_t block_tokens, std::FILE* out) {
  std::fprintf(out,
               "# workload vs the paper's Table 1 Claude Code row (paper: 98,827 requests, 393 "
               "sessions, 5,717,185 unique 64-token blocks, once-access 16.6%%, reuse distance "
               "mean 0.85 / P99 14, hit rate 98.31%%, 218,922 tokens per request)\n");
  std::fprintf(out,
               "# generated (%u-token blocks): %llu requests, %llu sessions, %llu unique blocks, "
               "once-access %.1f%%, reuse distance mean %.2f / P99 %llu, hit rate %.2f%%, %.0f "
               "tokens per request\n",
               block_tokens, static_cast<unsigned long long>(s.requests),
               static_cast<unsigned long long>(s.sessions),
               static_cast<unsigned long long>(s.unique_blocks), s.once_access_pct,
               s.reuse_mean_between, static_cast<unsigned long long>(s.reuse_p99), s.hit_rate_pct,
               s.mean_input_tokens);
}

void PrintRows(const std::vector<Row>& rows, bool by_context) {
  std::printf("%-10s %7s %6s %6s %6s %6s %12s %8s %8s %8s %9s %7s %8s %6s %6s %8s %8s %6s\n",
              "policy", by_context ? "context" : "qps", "hit%", "hbm%", "dram%", "ssd%",
              "recomputed", "ttft_avg", "ttft_p50", "ttft_p99", "tok/s", "rd_GB/s", "pref_s",
              "r_amp", "w_amp", "revoked", "rst_p50", "wall_s");
  for (const Row& row : rows) {
    const sim::SimReport& r = row.r;
    char load[32];
    if (by_context) {
      std::snprintf(load, sizeof load, "%lluK",
                    static_cast<unsigned long long>(row.context_tokens / 1024));
    } else {
      std::snprintf(load, sizeof load, "%.2f", r.qps);
    }
    std::printf(
        "%-10s %7s %6.1f %6.1f %6.1f %6.1f %12llu %7.2fs %7.2fs %7.2fs %9.0f %7.2f %7.2fs %6.2f "
        "%6.3f %8llu %7.3fs %6.1f\n",
        r.policy.c_str(), load, r.hit_rate_pct(), r.hit_hbm_pct(), r.hit_dram_pct(),
        r.hit_ssd_pct(), static_cast<unsigned long long>(r.recomputed_tokens), r.ttft_mean_s,
        r.ttft_p50_s, r.ttft_p99_s, r.throughput_tok_s, r.ssd_read_gbps, r.prefetch_latency_s,
        r.read_amp, r.write_amp, static_cast<unsigned long long>(r.revoked_blocks), r.restore_p50_s,
        r.wall_s);
  }
}

nlohmann::json ToJson(const Row& row, const std::string& workload) {
  const sim::SimReport& r = row.r;
  nlohmann::json j;
  j["policy"] = r.policy;
  j["profile"] = r.profile;
  j["workload"] = workload;
  j["qps"] = r.qps;
  if (row.context_tokens) j["context_tokens"] = row.context_tokens;
  j["requests"] = r.requests;
  j["block_tokens"] = r.block_tokens;
  j["block_bytes"] = r.block_bytes;
  j["hit_rate_pct"] = r.hit_rate_pct();
  j["hit_hbm_pct"] = r.hit_hbm_pct();
  j["hit_dram_pct"] = r.hit_dram_pct();
  j["hit_ssd_pct"] = r.hit_ssd_pct();
  j["input_tokens"] = r.input_tokens;
  j["output_tokens"] = r.output_tokens;
  j["recomputed_tokens"] = r.recomputed_tokens;
  j["ttft_mean_s"] = r.ttft_mean_s;
  j["ttft_p50_s"] = r.ttft_p50_s;
  j["ttft_p99_s"] = r.ttft_p99_s;
  j["throughput_tok_s"] = r.throughput_tok_s;
  j["ssd_read_gbps"] = r.ssd_read_gbps;
  j["ssd_read_gbps_per_worker"] = r.ssd_read_gbps_per_worker;
  j["prefetch_latency_s"] = r.prefetch_latency_s;
  j["read_amp"] = r.read_amp;
  j["write_amp"] = r.write_amp;
  j["restore_p50_s"] = r.restore_p50_s;
  j["restore_p99_s"] = r.restore_p99_s;
  j["revocations"] = r.revocations;
  j["revoked_blocks"] = r.revoked_blocks;
  j["ssd_bytes_read"] = r.ssd_bytes_read;
  j["ssd_read_commands"] = r.ssd_read_commands;
  j["ssd_bytes_delivered"] = r.ssd_bytes_delivered;
  j["ssd_bytes_written"] = r.ssd_bytes_written;
  j["dram_bytes_written"] = r.dram_bytes_written;
  j["bytes_admitted"] = r.bytes_admitted;
  j["promotions"] = r.promotions;
  j["evictions"] = r.evictions;
  j["buckets_dropped"] = r.buckets_dropped;
  j["scopes_reclaimed"] = r.scopes_reclaimed;
  j["makespan_s"] = r.makespan_s;
  j["wall_s"] = r.wall_s;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  return j;
}

// One line chart: `value` of every policy against the load (qps, or context in K tokens).
struct Panel {
  std::string file, title, ylabel;
  double (*value)(const sim::SimReport&);
};

Status PlotPanels(const std::string& dir, const std::vector<Row>& rows,
                  const std::vector<std::string>& policies, bool by_context,
                  const std::vector<Panel>& panels) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  for (const Panel& p : panels) {
    const std::string data = dir + "/" + p.file + ".dat", png = dir + "/" + p.file + ".png";
    std::FILE* d = std::fopen(data.c_str(), "w");
    if (!d) return Status::IOError("cannot write " + data);
    for (const std::string& pol : policies) {
      std::fprintf(d, "# %s\n", pol.c_str());
      for (const Row& row : rows) {
        if (row.r.policy != pol) continue;
        std::fprintf(d, "%g %g\n", by_context ? row.context_tokens / 1024.0 : row.r.qps,
                     p.value(row.r));
      }
      std::fprintf(d, "\n\n");
    }
    std::fclose(d);
    std::ostringstream gp;
    gp << "set terminal pngcairo size 800,500\nset output '" << png << "'\nset grid\n"
       << "set key outside bottom center horizontal\nset title '" << p.title << "'\n"
       << "set xlabel '" << (by_context ? "input length (K tokens)" : "QPS") << "'\n"
       << "set ylabel '" << p.ylabel << "'\n"
       << (by_context ? "set logscale x 2\n" : "") << "plot ";
    for (size_t i = 0; i < policies.size(); ++i) {
      gp << (i ? ", " : "") << "'" << data << "' index " << i
         << " using 1:2 with linespoints lw 2 title '" << policies[i] << "'";
    }
    gp << "\n";
    const std::string script = dir + "/" + p.file + ".gp";
    std::FILE* s = std::fopen(script.c_str(), "w");
    if (!s) return Status::IOError("cannot write " + script);
    std::fputs(gp.str().c_str(), s);
    std::fclose(s);
    const int rc = std::system(("gnuplot '" + script + "' 2>&1").c_str());
    if (rc != 0) return Status::IOError("gnuplot failed on " + script);
  }
  return Status::OK();
}

std::vector<Panel> PanelsFor(int figure) {
  using R = sim::SimReport;
  std::vector<Panel> all = {
      {"fig6a_ttft_mean", "Fig. 6a: mean TTFT", "seconds",
       [](const R& r) { return r.ttft_mean_s; }},
      {"fig6b_ttft_p50", "Fig. 6b: P50 TTFT", "seconds", [](const R& r) { return r.ttft_p50_s; }},
      {"fig6c_throughput", "Fig. 6c: total token throughput", "tokens/s",
       [](const R& r) { return r.throughput_tok_s; }},
      {"fig6d_hit_rate", "Fig. 6d: delivered hit rate", "%",
       [](const R& r) { return r.hit_rate_pct(); }},
      {"fig7_hit_hbm", "Fig. 7: hits from GPU HBM", "% of input tokens",
       [](const R& r) { return r.hit_hbm_pct(); }},
      {"fig7_hit_dram", "Fig. 7: hits from host DRAM", "% of input tokens",
       [](const R& r) { return r.hit_dram_pct(); }},
      {"fig7_hit_ssd", "Fig. 7: hits from NVMe SSD", "% of input tokens",
       [](const R& r) { return r.hit_ssd_pct(); }},
      {"fig8a_ssd_gbps", "Fig. 8a: SSD read bandwidth per worker", "GB/s",
       [](const R& r) { return r.ssd_read_gbps_per_worker; }},
      {"fig8b_prefetch", "Fig. 8b: mean SSD prefetch latency", "seconds",
       [](const R& r) { return r.prefetch_latency_s; }},
      {"fig9a_read_amp", "Fig. 9a: SSD read amplification", "bytes read / delivered",
       [](const R& r) { return r.read_amp; }},
      {"fig9b_write_amp", "Fig. 9b: write amplification", "bytes written / admitted",
       [](const R& r) { return r.write_amp; }},
      {"fig10a_ttft_mean", "Fig. 10a: mean TTFT", "seconds",
       [](const R& r) { return r.ttft_mean_s; }},
      {"fig10b_throughput", "Fig. 10b: token throughput", "tokens/s",
       [](const R& r) { return r.throughput_tok_s; }},
  };
  std::vector<Panel> out;
  for (const Panel& p : all) {
    const bool fig10 = p.file.starts_with("fig10");
    if (figure == 10 ? fig10 : !fig10) out.push_back(p);
  }
  return out;
}

Result<std::vector<sim::SimPolicy>> ParsePolicies(const std::vector<std::string>& names) {
  if (names.empty()) return sim::AllSimPolicies();
  std::vector<sim::SimPolicy> policies;
  for (const std::string& n : names) {
    FC_ASSIGN_OR_RETURN(sim::SimPolicy pol, sim::ParseSimPolicy(n));
    policies.push_back(pol);
  }
  return policies;
}

// What a run simulates: one request list per context length for the fixed sweep, else one.
struct Workloads {
  std::vector<std::pair<uint64_t, std::vector<trace::TraceRequest>>> sets;
  std::string name;
  uint32_t block_tokens = 0;  // a trace's own block size; 0 = the profile's
};

Result<Workloads> LoadWorkloads(const SimArgs& a, const sim::SimProfile& p, bool fixed,
                                bool short_default) {
  Workloads w;
  if (!a.trace_path.empty()) {
    FC_ASSIGN_OR_RETURN(auto reqs, trace::ReadTrace(a.trace_path, trace::ReaderOptions{}));
    if (a.max_requests && reqs.size() > a.max_requests) reqs.resize(a.max_requests);
    if (reqs.empty()) return Status::InvalidArgument("trace " + a.trace_path + " has no requests");
    w.block_tokens = reqs.front().block_tokens;
    w.name = a.trace_path;
    w.sets.emplace_back(0, std::move(reqs));
    return w;
  }
  if (fixed) {
    const uint32_t bt = p.page_tokens ? p.page_tokens : 256;
    for (uint64_t ctx : a.contexts) {
      // Unless told otherwise, the sessions' KV is twice the DRAM budget (so DRAM cannot hold it
      // and the SSD path is what is compared) and well inside the SSD budget.
      const uint64_t session_bytes = std::max<uint64_t>(1, ctx * p.kv_bytes_per_token);
      const uint32_t sessions =
          a.sessions ? a.sessions
                     : static_cast<uint32_t>(std::clamp<uint64_t>(
                           (2 * p.dram_bytes + session_bytes - 1) / session_bytes, 4, 1024));
      const uint32_t turns =
          a.turns ? a.turns : std::max<uint32_t>(4, (256 + sessions - 1) / sessions);
      FC_ASSIGN_OR_RETURN(auto reqs,
                          sim::FixedLengthSessions(ctx, bt, sessions, turns,
                                                   std::min<uint64_t>(512, ctx / 4), 256));
      if (!a.json) {
        std::printf("# %llu-token sessions: %u sessions x %u turns, %.1f GB of KV per rank\n",
                    static_cast<unsigned long long>(ctx), sessions, turns,
                    sessions * static_cast<double>(session_bytes) / 1e9);
      }
      w.sets.emplace_back(ctx, std::move(reqs));
    }
    w.name = "fixed-length sessions";
    return w;
  }
  const std::string kind = a.workload.empty() ? "agentic" : a.workload;
  auto k = trace::ParseWorkloadKind(kind);
  if (!k.ok()) return Status::InvalidArgument(std::string(k.status().message()) + " (or 'fixed')");
  const bool agentic = *k == trace::WorkloadKind::kAgentic;
  trace::WorkloadOptions wo =
      agentic ? sim::ProfileWorkloadOptions(p, a.requests ? a.requests : (short_default ? 4000 : 0))
              : trace::DefaultWorkloadOptions(*k);
  if (!agentic) {
    if (p.page_tokens) wo.block_tokens = p.page_tokens;
    if (a.requests) wo.requests = a.requests;
  }
  if (a.max_requests) wo.requests = std::min(wo.requests, a.max_requests);
  if (a.concurrency) wo.concurrency = a.concurrency;
  wo.seed = a.seed;
  FC_RETURN_IF_ERROR(trace::ValidateWorkloadOptions(wo));
  FC_ASSIGN_OR_RETURN(auto reqs, trace::GenerateWorkload(*k, wo));
  w.name = p.workload == "replay-default" && a.workload.empty() ? "replay-default" : kind;
  if (!a.json && agentic) {
    PrintTable1Comparison(trace::ComputeTraceStats(reqs), wo.block_tokens, stdout);
  }
  w.sets.emplace_back(0, std::move(reqs));
  return w;
}

Status Simulate(SimArgs& a) {
  if (a.figure && (a.figure < 6 || a.figure > 10)) {
    return Status::InvalidArgument("--figure must be 6, 7, 8, 9 or 10");
  }
  // Checked before anything runs: a sweep can take minutes.
  if (!a.plot.empty() && std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return Status::Unsupported("--plot needs gnuplot, which is not on PATH");
  }
  const bool fixed = a.figure == 10 || a.workload == "fixed";
  // Setups: each figure's profile, workload and loads unless flags say otherwise.
  if (a.profile.empty()) a.profile = a.figure == 10 ? "a100-llama70b" : "b200-dsv4flash";
  FC_ASSIGN_OR_RETURN(const sim::SimProfile p, sim::LoadProfile(a.profile));
  const bool short_default = a.figure == 0 && a.workload.empty() && a.trace_path.empty() &&
                             a.profile == "b200-dsv4flash" && a.requests == 0;
  if (a.figure == 10 && a.contexts.empty()) a.contexts = {8192, 16384, 32768, 65536, 131072};
  if (fixed && a.contexts.empty()) a.contexts = {32768};
  FC_ASSIGN_OR_RETURN(const std::vector<sim::SimPolicy> policies, ParsePolicies(a.policies));
  std::vector<std::string> policy_names;
  for (sim::SimPolicy pol : policies) policy_names.emplace_back(sim::SimPolicyName(pol));
  FC_ASSIGN_OR_RETURN(const Workloads w, LoadWorkloads(a, p, fixed, short_default));
  if (a.qps.empty()) {
    a.qps = w.name == "replay-default" ? std::vector<double>{eval::kDefaultReplayQps}
            : short_default            ? std::vector<double>{0.5}
                                       : p.qps;
  }

  if (!a.json) {
    std::printf("# profile %s: %s\n# workload %s; policies", p.name.c_str(), p.description.c_str(),
                w.name.c_str());
    for (const std::string& n : policy_names) std::printf(" %s", n.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  sim::SimOptions so;
  so.block_tokens = w.block_tokens;
  so.hbm_cache_bytes = a.hbm_cache_gb < 0 ? -1 : static_cast<int64_t>(a.hbm_cache_gb * 1e9);
  std::vector<Row> rows;
  for (const auto& [ctx, reqs] : w.sets) {
    for (double q : a.qps) {
      for (sim::SimPolicy pol : policies) {
        so.policy = pol;
        so.qps = q;
        FC_ASSIGN_OR_RETURN(sim::SimReport r, sim::RunSimulation(reqs, p, so));
        Row row{std::move(r), ctx};
        if (a.json) {
          std::printf("%s\n", ToJson(row, w.name).dump().c_str());
          std::fflush(stdout);
        }
        rows.push_back(std::move(row));
      }
    }
  }
  if (!a.json) PrintRows(rows, fixed);
  if (!a.plot.empty()) {
    FC_RETURN_IF_ERROR(
        PlotPanels(a.plot, rows, policy_names, fixed, PanelsFor(fixed ? 10 : a.figure)));
    if (!a.json) std::printf("# plots written to %s\n", a.plot.c_str());
  }
  return Status::OK();
}

int Run(SimArgs& a) {
  Status st = Simulate(a);
  if (st.ok()) return 0;
  std::fprintf(stderr, "flatcake simulate: %s\n", st.ToString().c_str());
  return 2;
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SimArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Discrete-event simulation, in virtual time and with no data, of a serving engine whose KV "
      "cache is kept by each policy (the library's own placement, allocation, coalescing, FC-MAS "
      "and tiered-baseline code on modelled devices): the paper's Figures 6-10 at full scale. No "
      "arguments: a short default (B200 profile, the first 4,000 agentic requests, 0.5 QPS, every "
      "policy). See docs/simulate.md.");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--figure", a->figure,
                  "Run one figure's setup: 6-9 (B200 + DeepSeek-V4-Flash, the full agentic "
                  "workload, 0.1-1.0 QPS), 10 (A100 + Llama-3.1-70B, fixed-length sessions "
                  "8K-128K)");
  cmd->add_option("--profile", a->profile,
                  "Profile name (profiles/NAME.json: b200-dsv4flash, a100-llama70b, local) or a "
                  "JSON file; default: the figure's, else b200-dsv4flash");
  cmd->add_option("--policy", a->policies,
                  "Policies, comma separated: recompute, dram-only, tiered, tiered-gds, flat, "
                  "flat-fcfs (default: all)")
      ->delimiter(',');
  cmd->add_option("--qps", a->qps, "Loads (mean requests/s), comma separated; default: profile's")
      ->delimiter(',');
  cmd->add_option("--workload", a->workload,
                  "Generated workload: agentic (at the profile's scale), conversation, api, or "
                  "fixed (fixed-length sessions, see --context)");
  cmd->add_option("--trace", a->trace_path, "Simulate a trace file (Mooncake/Qwen/agentic JSONL)");
  cmd->add_option("--requests", a->requests, "Requests of a generated workload (0 = default)");
  cmd->add_option("--max-requests", a->max_requests, "Simulate at most this many requests");
  cmd->add_option("--context", a->contexts,
                  "fixed workload: tokens per request, comma separated (default 32768; figure 10: "
                  "8K..128K)")
      ->delimiter(',');
  cmd->add_option("--sessions", a->sessions,
                  "fixed workload: sessions (0: as many as make twice the DRAM budget of KV)");
  cmd->add_option("--turns", a->turns,
                  "fixed workload: requests per session (0: at least 4 and 256 requests in all)");
  cmd->add_option("--concurrency", a->concurrency,
                  "agentic workload: sessions in flight at once (0: the profile's; more sessions "
                  "interleave, lengthening reuse distances)");
  cmd->add_option("--seed", a->seed, "Seed of a generated workload");
  cmd->add_option("--hbm-cache-gb", a->hbm_cache_gb,
                  "Sensitivity: cap, in GB per rank, on the GPU prefix cache's pages that no "
                  "running request holds (0: HBM keeps only what running requests hold; default "
                  "-1: only the profile's hbm_kv_bytes pool limits it)");
  cmd->add_flag("--json", a->json, "One JSON object per policy and load, one per line");
  cmd->add_option("--plot", a->plot, "Directory for the figures' PNG charts (needs gnuplot)");
  cmd->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace flatcake::cli
