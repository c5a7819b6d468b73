#include "trace/workload_gen.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <numeric>
#include <queue>
#include <unordered_map>

namespace flatcake::trace {
namespace {

constexpr uint64_t kNoId = UINT64_MAX;
constexpr double kPi = 3.14159265358979323846;
// Shared prompt of agentic side calls (title and summary helpers), tokens at scale 1.
constexpr double kSideCallPromptTokens = 2000;

// xoshiro256** seeded through splitmix64: fast, and identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double UniformOpen() { return 1.0 - Uniform(); }                            // (0, 1]
  uint64_t Below(uint64_t n) { return n <= 1 ? 0 : Next() % n; }
  double Exp(double mean) { return mean <= 0 ? 0 : -mean * std::log(UniformOpen()); }
  double Normal() {
    return std::sqrt(-2.0 * std::log(UniformOpen())) * std::cos(2.0 * kPi * Uniform());
  }
  // Lognormal with the given mean (not median).
  double LogNormal(double mean, double sigma) {
    if (mean <= 0) return 0;
    return std::exp(std::log(mean) - sigma * sigma / 2 + sigma * Normal());
  }
  // Geometric on {1, 2, ...} with the given mean.
  uint64_t Geometric(double mean) {
    if (mean <= 1.0) return 1;
    double p = 1.0 / mean;
    return 1 + static_cast<uint64_t>(std::floor(std::log(UniformOpen()) / std::log1p(-p)));
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

class Zipf {
 public:
  Zipf(uint32_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(i + 1.0, s);
    for (double& c : cdf_) c /= sum;
  }
  uint32_t Sample(Rng& rng) const {
    double u = rng.Uniform();
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<uint32_t>(std::min<size_t>(it - cdf_.begin(), cdf_.size() - 1));
  }

 private:
  std::vector<double> cdf_;
};

// A prompt under construction: ids of its full blocks plus the fill of its last partial block.
struct Context {
  std::vector<uint64_t> full;
  uint64_t tokens = 0;
  uint64_t partial = 0;      // tokens in the trailing partial block
  uint64_t tail_id = kNoId;  // id of that partial block in exactly this state, once emitted
};

struct GenRequest {
  double t = 0;
  TraceRequest r;  // parent holds a GenRequest index; session_id a generator session number
};

class Generator {
 public:
  Generator(WorkloadKind kind, const WorkloadOptions& o)
      : kind_(kind), o_(o), rng_(o.seed), zipf_(o.system_prompts, o.prompt_zipf) {
    // Prompt variants are drawn first so that they do not depend on session order.
    for (uint32_t i = 0; i < o.system_prompts; ++i) {
      Context c;
      Append(&c, Tokens(o.system_tokens, 0.3));
      system_.push_back(std::move(c));
    }
    if (kind == WorkloadKind::kAgentic) Append(&side_prompt_, Tokens(kSideCallPromptTokens, 0));
  }

  std::vector<GenRequest> Run() {
    // Emit sessions in start order until every request earlier than the N-th earliest one so far
    // has been generated: no later session can start before that time.
    double cutoff = INFINITY;
    uint64_t checked_at = 0;
    std::priority_queue<double, std::vector<double>, std::greater<>> slots;
    for (uint32_t i = 0; i < o_.concurrency; ++i) slots.push(0.0);
    double next_arrival = 0;
    const double session_rate = o_.rate / std::max(1.0, o_.turns);
    for (;;) {
      double start;
      if (kind_ == WorkloadKind::kAgentic) {
        start = slots.top();
        slots.pop();
      } else {
        start = next_arrival;
        next_arrival += rng_.Exp(1.0 / session_rate);
      }
      if (out_.size() >= o_.requests) {
        if (out_.size() >= 2 * checked_at || !std::isfinite(cutoff)) {
          cutoff = NthTime(o_.requests);
          checked_at = out_.size();
        }
        if (start > cutoff) break;
      }
      double end = kind_ == WorkloadKind::kAgentic ? AgenticSession(start) : ChatSession(start);
      if (kind_ == WorkloadKind::kAgentic) slots.push(end + rng_.Exp(o_.think_s));
    }
    return std::move(out_);
  }

 private:
  uint64_t Tokens(double mean, double sigma) {
    double v = sigma > 0 ? rng_.LogNormal(mean * o_.scale, sigma) : mean * o_.scale;
    return static_cast<uint64_t>(std::llround(v));
  }
  uint64_t ExpTokens(double mean) {
    return static_cast<uint64_t>(std::llround(rng_.Exp(mean * o_.scale)));
  }
  // Serving time of one request: a fixed overhead plus decode at 60 tokens/s. Only spacing
  // within a chain depends on it.
  static double ApiTime(uint64_t output) { return 1.0 + static_cast<double>(output) / 60.0; }

  void Append(Context* c, uint64_t n) {
    if (n == 0) return;
    const uint64_t b = o_.block_tokens;
    c->tokens += n;
    c->tail_id = kNoId;
    uint64_t total = c->partial + n;
    for (uint64_t i = 0; i < total / b; ++i) c->full.push_back(next_id_++);
    c->partial = total % b;
  }

  // Emits a request whose prompt is `c` plus `ephemeral` tokens that are not kept afterwards.
  size_t Emit(Context* c, uint64_t ephemeral, double t, int64_t session, int32_t turn,
              int64_t parent, uint64_t output) {
    GenRequest g;
    g.t = t;
    TraceRequest& r = g.r;
    r.input_tokens = c->tokens + ephemeral;
    r.output_tokens = output;
    r.session_id = session;
    r.turn = turn;
    r.parent = parent;
    r.block_tokens = o_.block_tokens;
    r.block_ids.reserve(c->full.size() + 1 + ephemeral / o_.block_tokens);
    r.block_ids.assign(c->full.begin(), c->full.end());
    uint64_t rest = c->partial + ephemeral;
    if (ephemeral == 0 && c->partial > 0) {
      // The same prompt state sent twice shares its last block.
      if (c->tail_id == kNoId) c->tail_id = next_id_++;
      r.block_ids.push_back(c->tail_id);
    } else {
      for (uint64_t i = 0; i < (rest + o_.block_tokens - 1) / o_.block_tokens; ++i) {
        r.block_ids.push_back(next_id_++);
      }
    }
    out_.push_back(std::move(g));
    return out_.size() - 1;
  }

  // Multi-turn chat or API traffic: a system prompt, new content, then alternating replies and
  // user turns separated by think time.
  double ChatSession(double start) {
    const int64_t session = next_session_++;
    Context c = system_[zipf_.Sample(rng_)];
    Append(&c, Tokens(o_.first_tokens, 1.0));
    double t = start;
    int64_t parent = -1;
    const uint64_t turns = rng_.Geometric(o_.turns);
    for (uint64_t u = 0; u < turns; ++u) {
      if (u > 0) {
        t += rng_.Exp(o_.think_s);
        Append(&c, Tokens(o_.turn_tokens, 1.0));
      }
      uint64_t output = Tokens(o_.output_tokens, 0.8);
      parent = static_cast<int64_t>(
          Emit(&c, 0, t, session, static_cast<int32_t>(u + 1), parent, output));
      t += ApiTime(output);
      Append(&c, output);
    }
    return t;
  }

  // One agent chain (the main loop of a turn or a sub-agent): `steps` requests, each appending
  // its reply and a tool result. Returns the time the chain ends.
  double AgentChain(Context* c, uint64_t steps, double t, int64_t session, int32_t* turn,
                    int64_t* parent) {
    const double side_prob = o_.one_shot / (1.0 - o_.one_shot);
    for (uint64_t s = 0; s < steps; ++s) {
      uint64_t output = Tokens(o_.output_tokens, 0.8);
      *parent = static_cast<int64_t>(
          Emit(c, ExpTokens(o_.ephemeral_tokens), t, session, ++*turn, *parent, output));
      if (rng_.Uniform() < side_prob) {
        Context side = side_prompt_;
        Append(&side, Tokens(o_.one_shot_tokens, 1.0));
        Emit(&side, 0, t + rng_.Uniform(), next_session_++, 1, -1,
             Tokens(o_.output_tokens, 0.8) / 4);
      }
      t += ApiTime(output) + rng_.Exp(o_.step_think_s);
      Append(c, output + Tokens(o_.tool_tokens, 1.2));
      if (o_.max_context > 0 && static_cast<double>(c->tokens) > o_.max_context * o_.scale) {
        *c = system_[prompt_];
        Append(c, Tokens(o_.summary_tokens, 0.3));
      }
    }
    return t;
  }

  double AgenticSession(double start) {
    const int64_t session = next_session_++;
    prompt_ = zipf_.Sample(rng_);
    Context c = system_[prompt_];
    Append(&c, Tokens(o_.first_tokens, 1.0));
    double t = start;
    int32_t turn = 0;
    int64_t parent = -1;
    const uint64_t turns = rng_.Geometric(o_.turns);
    for (uint64_t u = 0; u < turns; ++u) {
      if (u > 0) {
        t += rng_.Exp(o_.think_s);
        Append(&c, Tokens(o_.turn_tokens, 1.0));
      }
      t = AgentChain(&c, rng_.Geometric(o_.steps), t, session, &turn, &parent);
      if (o_.max_subagents > 0 && rng_.Uniform() < o_.subagent_prob) {
        // Sub-agents replay the session prefix in parallel, each with its own task; the main
        // agent resumes when the last one returns, with their results appended.
        const uint64_t k = 1 + rng_.Below(o_.max_subagents);
        double end = t;
        uint64_t results = 0;
        for (uint64_t i = 0; i < k; ++i) {
          // A replaying sub-agent continues from the whole session context; the others start
          // from the system prompt with only their task.
          Context sub = rng_.Uniform() < o_.subagent_replay ? c : system_[prompt_];
          Append(&sub, Tokens(o_.subagent_task_tokens, 0.5));
          int32_t sub_turn = turn;
          int64_t sub_parent = parent;
          double sub_end = AgentChain(&sub, rng_.Geometric(o_.subagent_steps),
                                      t + 0.5 * rng_.Uniform(), session, &sub_turn, &sub_parent);
          end = std::max(end, sub_end);
          results += Tokens(o_.subagent_result_tokens, 0.5);
        }
        t = end;
        Append(&c, results);
      }
    }
    return t;
  }

  double NthTime(uint64_t n) {
    std::vector<double> times(out_.size());
    for (size_t i = 0; i < out_.size(); ++i) times[i] = out_[i].t;
    std::nth_element(times.begin(), times.begin() + (n - 1), times.end());
    return times[n - 1];
  }

  WorkloadKind kind_;
  WorkloadOptions o_;
  Rng rng_;
  Zipf zipf_;
  std::vector<Context> system_;
  Context side_prompt_;
  std::vector<GenRequest> out_;
  uint64_t next_id_ = 0;
  int64_t next_session_ = 0;
  uint32_t prompt_ = 0;  // system prompt of the agentic session being generated
};

}  // namespace

std::string_view WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kAgentic: return "agentic";
    case WorkloadKind::kConversation: return "conversation";
    case WorkloadKind::kApi: return "api";
  }
  return "unknown";
}

Result<WorkloadKind> ParseWorkloadKind(std::string_view name) {
  if (name == "agentic") return WorkloadKind::kAgentic;
  if (name == "conversation") return WorkloadKind::kConversation;
  if (name == "api") return WorkloadKind::kApi;
  return Status::InvalidArgument("unknown workload kind \"" + std::string(name) +
                                 "\" (agentic, conversation, api)");
}

WorkloadOptions DefaultWorkloadOptions(WorkloadKind kind) {
  WorkloadOptions o;
  switch (kind) {
    case WorkloadKind::kAgentic:
      // Tuned so that `trace stats` lands near the production Claude Code trace (Table 1).
      o.requests = 1500;
      o.scale = 1.0;
      o.block_tokens = 64;
      o.system_tokens = 20000;
      o.system_prompts = 1;
      o.turns = 30;
      o.first_tokens = 20000;
      o.turn_tokens = 600;
      o.output_tokens = 400;
      o.think_s = 30;
      o.concurrency = 1;
      o.steps = 8;
      o.tool_tokens = 2000;
      o.ephemeral_tokens = 150;
      o.max_context = 800000;
      o.summary_tokens = 8000;
      o.subagent_prob = 0.2;
      o.max_subagents = 8;
      o.subagent_steps = 6;
      o.subagent_replay = 0.2;
      o.subagent_task_tokens = 1500;
      o.subagent_result_tokens = 1500;
      o.one_shot = 0.04;
      o.one_shot_tokens = 3000;
      o.step_think_s = 2;
      break;
    case WorkloadKind::kConversation:
      // Near the Mooncake conversation trace at 512-token blocks.
      o.requests = 12000;
      o.block_tokens = 512;
      o.system_tokens = 2600;
      o.system_prompts = 20;
      o.prompt_zipf = 1.0;
      o.turns = 1.4;
      o.first_tokens = 9000;
      o.turn_tokens = 1500;
      o.output_tokens = 350;
      o.think_s = 400;
      o.rate = 3.4;
      break;
    case WorkloadKind::kApi:
      // Near the Qwen to-B API trace at 16-token blocks: mostly one-shot.
      o.requests = 5000;
      o.block_tokens = 16;
      o.system_tokens = 1600;
      o.system_prompts = 150;
      o.prompt_zipf = 1.2;
      o.turns = 1.03;
      o.first_tokens = 1000;
      o.turn_tokens = 300;
      o.output_tokens = 200;
      o.think_s = 60;
      o.rate = 10;
      break;
  }
  return o;
}

Status ValidateWorkloadOptions(const WorkloadOptions& o) {
  auto bad = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (o.requests == 0 || o.requests > 100'000'000) return bad("requests must be in [1, 1e8]");
  if (!(o.scale > 0 && o.scale <= 100)) return bad("scale must be in (0, 100]");
  if (o.block_tokens == 0 || o.block_tokens > (1u << 20)) {
    return bad("block-tokens must be in [1, 1048576]");
  }
  if (o.system_prompts == 0 || o.system_prompts > 1'000'000) {
    return bad("system-prompts must be in [1, 1e6]");
  }
  for (double v :
       {o.system_tokens, o.first_tokens, o.turn_tokens, o.output_tokens, o.think_s, o.tool_tokens,
        o.ephemeral_tokens, o.max_context, o.summary_tokens, o.subagent_task_tokens,
        o.subagent_result_tokens, o.one_shot_tokens, o.step_think_s, o.prompt_zipf, o.rate}) {
    if (!(v >= 0 && v <= 1e9)) return bad("token counts, times and rates must be in [0, 1e9]");
  }
  if (!(o.turns >= 1 && o.turns <= 1e6) || !(o.steps >= 1 && o.steps <= 1e6) ||
      !(o.subagent_steps >= 1 && o.subagent_steps <= 1e6)) {
    return bad("turns, steps and subagent-steps must be means in [1, 1e6]");
  }
  if (!(o.subagent_prob >= 0 && o.subagent_prob <= 1) ||
      !(o.subagent_replay >= 0 && o.subagent_replay <= 1)) {
    return bad("subagent-prob and subagent-replay must be in [0, 1]");
  }
  if (!(o.one_shot >= 0 && o.one_shot < 1)) return bad("one-shot must be in [0, 1)");
  if (o.max_subagents > 1024) return bad("subagents must be at most 1024");
  if (o.concurrency == 0 || o.concurrency > 100'000) return bad("concurrency must be in [1, 1e5]");
  if (o.max_context > 0 && o.max_context <= o.system_tokens + o.summary_tokens) {
    return bad("max-context must exceed system-tokens + summary-tokens (or be 0: no compaction)");
  }
  return Status::OK();
}

Result<std::vector<TraceRequest>> GenerateWorkload(WorkloadKind kind,
                                                   const WorkloadOptions& options) {
  FC_RETURN_IF_ERROR(ValidateWorkloadOptions(options));
  if (kind != WorkloadKind::kAgentic && !(options.rate > 0)) {
    return Status::InvalidArgument("rate must be positive");
  }
  std::vector<GenRequest> gen = Generator(kind, options).Run();
  // Arrival order at ms resolution; ties keep generation order, which puts parents first.
  std::vector<int64_t> ms(gen.size());
  for (size_t i = 0; i < gen.size(); ++i) ms[i] = std::llround(gen[i].t * 1000.0);
  std::vector<size_t> order(gen.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  order.resize(std::min<size_t>(order.size(), options.requests));

  std::vector<int64_t> position(gen.size(), -1);
  std::unordered_map<uint64_t, uint64_t> dense_block;
  std::unordered_map<int64_t, int64_t> dense_session;
  std::vector<TraceRequest> out;
  out.reserve(order.size());
  for (size_t idx : order) {
    TraceRequest r = std::move(gen[idx].r);
    position[idx] = static_cast<int64_t>(out.size());
    r.time_s = static_cast<double>(ms[idx]) / 1000.0;
    r.parent = r.parent >= 0 ? position[r.parent] : -1;
    auto [sit, s_new] = dense_session.try_emplace(r.session_id, dense_session.size());
    r.session_id = sit->second;
    for (uint64_t& id : r.block_ids) {
      auto [it, b_new] = dense_block.try_emplace(id, dense_block.size());
      id = it->second;
    }
    out.push_back(std::move(r));
  }
  return out;
}

Status WriteMooncakeJsonl(const std::vector<TraceRequest>& requests, bool extra_fields,
                          std::FILE* out) {
  std::string line;
  char num[32];
  for (const TraceRequest& r : requests) {
    line.clear();
    std::snprintf(num, sizeof(num), "%" PRId64,
                  static_cast<int64_t>(std::llround(r.time_s * 1000.0)));
    line += "{\"timestamp\": ";
    line += num;
    line += ", \"input_length\": " + std::to_string(r.input_tokens);
    line += ", \"output_length\": " + std::to_string(r.output_tokens);
    line += ", \"hash_ids\": [";
    for (size_t i = 0; i < r.block_ids.size(); ++i) {
      if (i) line += ", ";
      line += std::to_string(r.block_ids[i]);
    }
    line += ']';
    if (extra_fields) {
      line += ", \"session_id\": " + std::to_string(r.session_id);
      line += ", \"turn\": " + std::to_string(r.turn);
      line += ", \"parent\": " + std::to_string(r.parent);
      line += ", \"block_tokens\": " + std::to_string(r.block_tokens);
    }
    line += "}\n";
    if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) {
      return Status::FromErrno(errno, "write trace");
    }
  }
  if (std::fflush(out) != 0) return Status::FromErrno(errno, "write trace");
  return Status::OK();
}

}  // namespace flatcake::trace
