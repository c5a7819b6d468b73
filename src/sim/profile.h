// Simulation profiles: the hardware, model, engine and store budgets one `flatcake simulate` run
// models, read from a documented JSON file under profiles/ (docs/simulate.md).
//
// Every number in a profile file is either a plain number or {"value": x, "source": "..."}; the
// profiles shipped in profiles/ give a source for each (ValidateProfileSources checks it), so a
// reader can trace every figure the simulator produces back to a stated hardware or model fact or
// to a measurement on this machine. Nothing in a profile is fitted to a result.
//
// All quantities are per tensor-parallel rank: ranks of one TP group are symmetric (each holds
// its own slice of every KV page and restores it over its own GPU's link and its share of the
// drives), so the simulator runs one rank's store and one rank's devices, and an engine whose
// times are those of the whole TP group.
//
// Thread safety: plain values; the functions are reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::sim {

// The SSD array as one rank sees it. Reads and writes share it: a batch of commands issued at t
// is served after the ones before it (FIFO), in
//   max(bytes / bandwidth, commands / max_iops, commands * cmd_cpu_s / workers,
//       commands * cmd_latency_s / (workers * queue_depth)) + cmd_latency_s
// so many small commands cost more than few large ones through their count (IOPS, CPU submission
// and queue depth), not through a penalty factor.
struct SsdProfile {
  double read_gbps = 0;      // sequential read bandwidth (GB/s = 1e9 B/s)
  double write_gbps = 0;     // sequential write bandwidth
  double cmd_latency_s = 0;  // device latency of one command
  double max_iops = 0;       // small-read commands per second the array completes
  double cmd_cpu_s = 0;      // CPU time to prepare and submit one command, per worker
  uint32_t workers = 1;      // I/O workers (threads / cuFile handles), each with its own queue
  uint32_t queue_depth = 1;  // commands in flight per worker
  double gds_gbps_per_worker = 0;  // GPUDirect Storage read bandwidth one worker reaches
};

struct SimProfile {
  std::string name;
  std::string description;

  // --- model (per rank) ---
  uint32_t layers = 0;
  uint32_t planes = 0;              // 2 for K and V; 1 for an MLA latent
  uint32_t page_tokens = 0;         // tokens per KV page (block); 0 = the trace's
  uint64_t kv_bytes_per_token = 0;  // per rank, all layers and planes

  // --- engine (the TP group) ---
  uint32_t max_running = 1;         // requests in flight in the server
  double prefill_tokens_per_s = 0;  // uncached tokens per second with no cached context
  double prefill_attn_s_per_mtok =
      0;                           // extra seconds per uncached token per million context tokens
  double decode_tokens_per_s = 0;  // output tokens per second of GPU time (0 = decode not modelled)
  uint64_t hbm_kv_bytes = 0;       // GPU prefix cache per rank (0 = none)
  // The request's slot is held until its new blocks are written (the replay's workers write
  // synchronously); otherwise writes go on in the background and the slot is released after
  // decode.
  bool writes_hold_slot = false;

  // --- host, links ---
  double h2d_gbps = 0;        // pinned host DRAM -> GPU (or, on the local profile, host memcpy)
  double host_copy_gbps = 0;  // host memcpy (admissions into the DRAM tier, staging copies)
  double scatter_gbps = 0;    // window -> paged KV slots (scatter kernel; local: memcpy)
  // Whether a restore's scatter of layer l overlaps the reads of layer l + 1 (a GPU's separate
  // I/O and copy streams); otherwise the copy follows the reads (a CPU copy on cores busy with
  // the reads' completions and the other requests).
  bool scatter_pipelined = true;

  SsdProfile ssd;

  // --- budgets (per rank) ---
  uint64_t dram_bytes = 0;
  uint64_t ssd_bytes = 0;
  uint64_t staging_bytes = 0;     // tiered: host staging pool
  uint64_t gpu_window_bytes = 0;  // flat: read window (FC-MAS admits SSD restores into it)

  // --- store knobs ---
  uint64_t flat_file_bytes = 0;  // SSD pool file size (a segment never spans two)
  uint64_t max_gap_bytes = 0;    // flat: Δgap
  uint64_t max_io_bytes = 0;     // largest read command
  uint64_t tau_tokens = 0;       // Table 2 τ
  uint64_t l_agent_tokens = 0;   // Table 2 L_agent
  uint64_t bucket_bytes = 0;     // tiered bucket limits
  uint32_t bucket_keys = 0;
  double prefetch_timeout_base_s = 0;  // tiered prefetch deadline: base + per Ki-token, capped
  double prefetch_timeout_per_ki_token_s = 0;
  double prefetch_timeout_max_s = 0;
  uint32_t prefetch_batch_objects = 0;
  bool promotion_rereads = true;

  // --- workload defaults ---
  std::string workload;               // "agentic" (generated) or "replay-default"
  uint64_t workload_requests = 0;     // requests of the default workload
  double workload_scale = 1;          // token scale of the generated workload
  uint32_t workload_concurrency = 1;  // agentic sessions in flight
  std::vector<double> qps;            // default load points

  uint64_t block_bytes(uint32_t block_tokens) const { return kv_bytes_per_token * block_tokens; }
  Status Validate() const;
};

// Loads a profile by name (profiles/NAME.json, searched in $FLATCAKE_PROFILES, next to the
// executable's ../profiles and profiles/, in an install's ../share/flatcake/profiles and a wheel's
// ../lib/flatcake/profiles, in the working directory's profiles/, and the source tree's profiles/)
// or by path (a name containing '/' or ending in .json). Corruption names the file and field on a
// malformed one.
Result<SimProfile> LoadProfile(std::string_view name_or_path);
// Parses a profile from JSON text; `origin` names it in errors. With `require_sources`, every
// number must carry a non-empty "source".
Result<SimProfile> ParseProfile(std::string_view json_text, std::string_view origin,
                                bool require_sources);
// The file LoadProfile reads for `name_or_path`; NotFound (listing the known names) when none.
Result<std::string> FindProfilePath(std::string_view name_or_path);
// The profile names found in the search path.
std::vector<std::string> ListProfiles();

}  // namespace flatcake::sim
