// `flatcake trace stats` and `flatcake trace gen`: Table 1 statistics of request traces, and the
// synthetic agentic / conversation / API workload generators.
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "trace/trace.h"
#include "trace/trace_stats.h"
#include "trace/workload_gen.h"

namespace flatcake::cli {
namespace {

using trace::WorkloadKind;
using trace::WorkloadOptions;

struct StatsArgs {
  std::vector<std::string> files;
  bool json = false;
  std::string format = "auto";
  uint32_t block_tokens = 0;
  bool skip_bad = false;
};

int RunStats(const StatsArgs& a) {
  auto fmt = trace::ParseTraceFormat(a.format);
  if (!fmt.ok()) return ReportArgError("trace stats", fmt.status());
  trace::ReaderOptions options;
  options.format = *fmt;
  options.block_tokens = a.block_tokens;
  options.skip_bad = a.skip_bad;
  if (!a.json) {
    std::printf("%-40s %9s %10s %7s %9s %7s %7s %7s %9s %8s %9s\n", "file", "requests", "unique",
                "once%", "reuse_avg", "p99", "hit%", "top10%", "blk/req", "sessions", "read_s");
  }
  int rc = 0;
  for (const std::string& file : a.files) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t bad = 0;
    auto stats = trace::ComputeTraceStats(file, options, &bad);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats.ok()) {
      std::fprintf(stderr, "flatcake trace stats: %s\n", stats.status().ToString().c_str());
      rc = 1;
      continue;
    }
    const trace::TraceStats& s = *stats;
    if (a.json) {
      std::printf("%s\n", trace::TraceStatsJson(s, file, bad).c_str());
    } else {
      std::string sessions = s.sessions ? std::to_string(s.sessions) : "-";
      std::printf(
          "%-40s %9" PRIu64 " %10" PRIu64 " %7.2f %9.2f %7" PRIu64 " %7.2f %7.2f %9.2f %8s %9.3f\n",
          file.c_str(), s.requests, s.unique_blocks, s.once_access_pct, s.reuse_mean, s.reuse_p99,
          s.hit_rate_pct, s.top10_share_pct, s.mean_blocks_per_request, sessions.c_str(), secs);
      if (bad > 0) std::printf("  (%" PRIu64 " malformed lines skipped)\n", bad);
    }
  }
  return rc;
}

// A generator knob: its flag, what it means, and the WorkloadOptions field it sets.
struct Knob {
  const char* flag;
  const char* help;
  double WorkloadOptions::*dfield = nullptr;
  uint32_t WorkloadOptions::*ufield = nullptr;
};

const std::vector<Knob>& Knobs() {
  static const std::vector<Knob> knobs = {
      {"--system-tokens", "System prompt tokens (each variant lognormal around it)",
       &WorkloadOptions::system_tokens},
      {"--system-prompts", "Distinct system prompts, picked with Zipf popularity", nullptr,
       &WorkloadOptions::system_prompts},
      {"--prompt-zipf", "Zipf exponent of system prompt popularity", &WorkloadOptions::prompt_zipf},
      {"--turns", "Mean user turns per session (geometric, >= 1)", &WorkloadOptions::turns},
      {"--first-tokens", "New tokens in a session's first request (task, document, query)",
       &WorkloadOptions::first_tokens},
      {"--turn-tokens", "New user tokens in each later turn", &WorkloadOptions::turn_tokens},
      {"--output-tokens", "Mean reply tokens", &WorkloadOptions::output_tokens},
      {"--think-s", "Mean seconds from a reply to the next user turn (exponential)",
       &WorkloadOptions::think_s},
      {"--rate", "conversation/api: mean request arrivals per second", &WorkloadOptions::rate},
      {"--concurrency", "agentic: sessions in flight at once", nullptr,
       &WorkloadOptions::concurrency},
      {"--steps", "agentic: mean agent steps (requests) per user turn", &WorkloadOptions::steps},
      {"--tool-tokens", "agentic: tool-result tokens kept in the context per step",
       &WorkloadOptions::tool_tokens},
      {"--ephemeral-tokens", "agentic: mean per-request suffix not kept in later requests",
       &WorkloadOptions::ephemeral_tokens},
      {"--max-context", "agentic: context size that triggers compaction (0 = never)",
       &WorkloadOptions::max_context},
      {"--summary-tokens", "agentic: summary that replaces the history on compaction",
       &WorkloadOptions::summary_tokens},
      {"--subagent-prob", "agentic: chance that a user turn fans out sub-agents",
       &WorkloadOptions::subagent_prob},
      {"--subagents", "agentic: most sub-agents per fan-out (uniform from 1)", nullptr,
       &WorkloadOptions::max_subagents},
      {"--subagent-steps", "agentic: mean steps of one sub-agent",
       &WorkloadOptions::subagent_steps},
      {"--subagent-replay",
       "agentic: chance that a sub-agent replays the whole session context (else it starts "
       "from the system prompt)",
       &WorkloadOptions::subagent_replay},
      {"--subagent-task-tokens", "agentic: task prompt a sub-agent adds to the replayed prefix",
       &WorkloadOptions::subagent_task_tokens},
      {"--subagent-result-tokens", "agentic: result tokens each sub-agent returns",
       &WorkloadOptions::subagent_result_tokens},
      {"--one-shot", "agentic: fraction of requests that are one-shot side calls",
       &WorkloadOptions::one_shot},
      {"--one-shot-tokens", "agentic: unique tokens of a side call",
       &WorkloadOptions::one_shot_tokens},
      {"--step-think-s", "agentic: mean seconds between an agent reply and its next step",
       &WorkloadOptions::step_think_s},
  };
  return knobs;
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string KnobDefaults(const Knob& k) {
  // Show defaults only for the kinds a knob applies to (its help says so in a prefix).
  const std::string_view help = k.help;
  std::vector<WorkloadKind> kinds = {WorkloadKind::kAgentic, WorkloadKind::kConversation,
                                     WorkloadKind::kApi};
  if (help.starts_with("agentic:")) kinds = {WorkloadKind::kAgentic};
  if (help.starts_with("conversation/api:"))
    kinds = {WorkloadKind::kConversation, WorkloadKind::kApi};
  std::string s = " [default:";
  for (WorkloadKind kind : kinds) {
    WorkloadOptions d = trace::DefaultWorkloadOptions(kind);
    double v = k.dfield ? d.*k.dfield : static_cast<double>(d.*k.ufield);
    s += " ";
    s += trace::WorkloadKindName(kind);
    s += "=" + FormatNumber(v);
  }
  return s + "]";
}

struct GenArgs {
  std::string kind;
  uint64_t requests = 0;
  uint64_t seed = 1;
  double scale = 0;
  uint32_t block_tokens = 0;
  std::string output;
  bool plain = false;
  std::vector<double> knob_values;
  std::vector<CLI::Option*> knob_options;
  CLI::Option* requests_opt = nullptr;
  CLI::Option* scale_opt = nullptr;
  CLI::Option* block_opt = nullptr;
};

int RunGen(const GenArgs& a) {
  auto kind = trace::ParseWorkloadKind(a.kind);
  if (!kind.ok()) return ReportArgError("trace gen", kind.status());
  WorkloadOptions o = trace::DefaultWorkloadOptions(*kind);
  o.seed = a.seed;
  if (a.requests_opt->count()) o.requests = a.requests;
  if (a.scale_opt->count()) o.scale = a.scale;
  if (a.block_opt->count()) o.block_tokens = a.block_tokens;
  const auto& knobs = Knobs();
  for (size_t i = 0; i < knobs.size(); ++i) {
    if (!a.knob_options[i]->count()) continue;
    double v = a.knob_values[i];
    if (knobs[i].dfield) {
      o.*knobs[i].dfield = v;
    } else {
      if (!(v >= 0 && v <= 4e9) || v != static_cast<double>(static_cast<uint32_t>(v))) {
        std::fprintf(stderr, "flatcake trace gen: %s must be a non-negative integer\n",
                     knobs[i].flag);
        return 2;
      }
      o.*knobs[i].ufield = static_cast<uint32_t>(v);
    }
  }
  auto requests = trace::GenerateWorkload(*kind, o);
  if (!requests.ok()) return ReportArgError("trace gen", requests.status());
  std::FILE* out = stdout;
  if (!a.output.empty() && a.output != "-") {
    out = std::fopen(a.output.c_str(), "wb");
    if (out == nullptr) {
      std::fprintf(stderr, "flatcake trace gen: %s\n",
                   Status::FromErrno(errno, "open " + a.output).ToString().c_str());
      return 1;
    }
  }
  Status s = trace::WriteMooncakeJsonl(*requests, !a.plain, out);
  if (out != stdout && std::fclose(out) != 0 && s.ok()) {
    s = Status::FromErrno(errno, "close " + a.output);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "flatcake trace gen: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterTraceCommands(CLI::App& app, int* exit_code) {
  CLI::App* tr = app.add_subcommand(
      "trace", "Request traces: Table 1 statistics and synthetic workload generators");
  tr->require_subcommand(1);

  auto stats_args = std::make_shared<StatsArgs>();
  CLI::App* stats = tr->add_subcommand(
      "stats",
      "Print KV-block reuse statistics of traces under an infinite cache (the paper's Table 1).\n"
      "Formats: Mooncake JSONL {timestamp(ms), input_length, output_length, hash_ids},\n"
      "Qwen Bailian JSONL {chat_id, parent_chat_id, timestamp(s), ..., turn, hash_ids} and the\n"
      "per-session agentic layout {id, block_size, hash_id_scope, requests:[{t, in, out,\n"
      "hash_ids, ...}]}; plain, gzip or zstd (by magic bytes). Requests are taken in file order\n"
      "(agentic: sorted by t). Columns: requests; unique blocks; once% = unique blocks used by\n"
      "exactly one request; reuse_avg / p99 = reuse distance j - i in requests over all hits\n"
      "(P99 nearest-rank); hit% = accesses whose block an earlier request used, each request\n"
      "counting each distinct block once; top10% = access share of the 10% most-used blocks;\n"
      "blk/req = distinct blocks per request; sessions when the trace carries them.");
  stats->add_option("files", stats_args->files, "Trace files (JSON lines; .gz/.zst detected)")
      ->required();
  stats->add_flag("--json", stats_args->json,
                  "One JSON object per file: requests, unique_blocks, once_access_pct, "
                  "reuse_mean, reuse_p99, hit_rate_pct and more");
  stats
      ->add_option("--format", stats_args->format,
                   "auto (detect from the first line), mooncake, qwen or agentic")
      ->capture_default_str();
  stats->add_option("--block-tokens", stats_args->block_tokens,
                    "Tokens per block where the file does not say (default: mooncake 512, "
                    "qwen 16, agentic 64)");
  stats->add_flag("--skip-bad", stats_args->skip_bad,
                  "Count and skip malformed lines instead of stopping at the first one");
  stats->callback([stats_args, exit_code] { *exit_code = RunStats(*stats_args); });

  auto g = std::make_shared<GenArgs>();
  CLI::App* gen = tr->add_subcommand(
      "gen",
      "Generate a synthetic workload as Mooncake-schema JSON lines (timestamp ms, input_length,\n"
      "output_length, hash_ids, plus session_id, turn, parent = index of the request this one\n"
      "continues, block_tokens). Same options and seed give the same bytes. Token knobs are at\n"
      "--scale 1.\n"
      "  agentic: coding-agent sessions; each user turn runs an agent loop whose steps append\n"
      "    the reply and a tool result (tens of thousands of tokens per turn), sub-agents\n"
      "    replay the session prefix in parallel, compaction at --max-context, one-shot side\n"
      "    calls. At --scale 1, 64-token blocks: ~3,400 blocks/request, ~98% hit rate.\n"
      "  conversation: chat sessions over shared system prompts with long first documents and\n"
      "    think times of minutes (near the Mooncake conversation trace).\n"
      "  api: mostly one-shot requests over many shared system prompts (once-access > 90%).");
  gen->add_option("--kind", g->kind, "agentic, conversation or api")->required();
  g->requests_opt = gen->add_option("--requests", g->requests,
                                    "Requests to emit [default: agentic=1500 "
                                    "conversation=12000 api=5000]");
  gen->add_option("--seed", g->seed, "PRNG seed")->capture_default_str();
  g->scale_opt = gen->add_option("--scale", g->scale,
                                 "Multiplies every token count; < 1 shrinks contexts [default: 1]");
  g->block_opt = gen->add_option("--block-tokens", g->block_tokens,
                                 "Tokens per block [default: agentic=64 conversation=512 "
                                 "api=16]");
  gen->add_option("-o,--output", g->output, "Output file (default: stdout)");
  gen->add_flag("--plain", g->plain, "Omit the session_id, turn, parent and block_tokens fields");
  const auto& knobs = Knobs();
  g->knob_values.assign(knobs.size(), 0.0);
  for (size_t i = 0; i < knobs.size(); ++i) {
    g->knob_options.push_back(gen->add_option(knobs[i].flag, g->knob_values[i],
                                              std::string(knobs[i].help) + KnobDefaults(knobs[i])));
  }
  gen->callback([g, exit_code] { *exit_code = RunGen(*g); });
}

}  // namespace flatcake::cli
