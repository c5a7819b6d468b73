"""Replays a workload through flatcake.sglang the way SGLang's cache controller drives it (the
stand-in of SGLang 8905cbd's HiCacheController: prefetch = batch_exists + batch_get_v1 at a
request's arrival, write_storage = batch_set_v1 with prefix keys once it is prefilled), with
FlatCake's placement and again with every page forced to SSD, and reports per run: hits by
medium, bytes placed per medium, restore latency P50/P99 by medium, and the DRAM medium's use.

Workloads:
  conversation  the Mooncake conversation trace (../shared/traces, 512-token blocks, shared
                system prompts, multi-turn sessions), its first --requests requests in time order;
  agentic       --sessions sessions of --turns turns, each turn adding --turn-blocks blocks of
                tool output to its context (contexts grow past l_agent_tokens), all sessions
                sharing one block of tool definitions.

A request's tokens are its blocks' (block b: 512 tokens derived from b), so requests sharing
blocks share SGLang's chained page keys. It arrives at its timestamp (prefetch) and writes its
new pages after its prefill (input tokens / --prefill-tokens-per-s later), so requests close in
time look pages up before others store them, as on a server. SGLang's host pool is page_first
(its default) with --page-size tokens per page; prefix keys are passed
("hicache_storage_pass_prefix_keys": true).

    python3 python/tests/sglang_replay.py --workload conversation --requests 400 --json
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "sglang_standin"))

from host_pool import EmulatedHostPool  # noqa: E402
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str  # noqa: E402

BLOCK_TOKENS = 512  # the Mooncake traces' block
DEFAULT_TRACE = os.path.join(HERE, "..", "..", "..", "shared", "traces",
                             "mooncake_conversation_trace.jsonl")
LOADER = {"backend_name": "flatcake", "module_path": "flatcake.sglang",
          "class_name": "FlatCakeStorage", "interface_v1": 1,
          "hicache_storage_pass_prefix_keys": True}


def conversation(path: str, n: int) -> List[dict]:
    out = []
    with open(path) as f:
        for line in f:
            if len(out) == n:
                break
            r = json.loads(line)
            if not isinstance(r.get("hash_ids"), list) or "timestamp" not in r:
                raise ValueError(f"{path}: line {len(out) + 1} is no trace request")
            out.append({"t": float(r["timestamp"]) / 1e3, "blocks": list(r["hash_ids"])})
    return sorted(out, key=lambda r: r["t"])


def agentic(sessions: int, turns: int, turn_blocks: int, gap_s: float) -> List[dict]:
    """Each session: the shared tool block 0, then its own blocks, turn_blocks more per turn."""
    out, next_block = [], 1
    for s in range(sessions):
        blocks = [0]
        for k in range(turns):
            blocks = blocks + list(range(next_block, next_block + turn_blocks))
            next_block += turn_blocks
            out.append({"t": k * gap_s + s * gap_s / sessions, "blocks": list(blocks)})
    return sorted(out, key=lambda r: r["t"])


def tokens_of(blocks: List[int]) -> List[int]:
    return [b * BLOCK_TOKENS + j for b in blocks for j in range(BLOCK_TOKENS)]


def _percentile(values: List[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def replay(requests: List[dict], ssd_dir: str, *, force_ssd: bool, page_size: int,
           dram_bytes: str, ssd_bytes: str, prefill_tokens_per_s: float) -> Dict:
    max_pages = max(len(r["blocks"]) for r in requests) * BLOCK_TOKENS // page_size
    pool = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=page_size,
                            page_num=max_pages + 1, heads=1, head_dim=8)
    pool.fill_random(1)
    extra = dict(LOADER, ssd_dirs=[ssd_dir], ssd_bytes=ssd_bytes, ssd_file_bytes="64MiB",
                 dram_bytes=dram_bytes)
    if force_ssd:
        extra["force_medium"] = "ssd"
    ctrl = HiCacheController(pool, page_size, storage_backend="dynamic",
                             storage_backend_extra_config=extra, model_name="replay/model",
                             prefetch_threshold=page_size)
    backend = ctrl.storage_backend
    store = backend._store
    page_bytes = backend._layout.block_bytes
    events = [(r["t"], 0, i) for i, r in enumerate(requests)]  # (time, 0 arrive / 1 write, req)
    heapq.heapify(events)
    latency: Dict[str, List[float]] = {"dram": [], "ssd": []}
    hit_pages = {"dram": 0, "ssd": 0}
    dram_peak = 0
    keys_of: Dict[int, List[str]] = {}
    while events:
        t, kind, i = heapq.heappop(events)
        r = requests[i]
        tokens = tokens_of(r["blocks"])
        if kind == 0:
            before = store.stats()
            start = time.perf_counter()
            op = ctrl.prefetch(f"r{i}", tokens, host_indices=pool.page_indices(
                range(len(tokens) // page_size)))
            seconds = time.perf_counter() - start
            after = store.stats()
            got = {m: after[m]["delivered_bytes"] - before[m]["delivered_bytes"]
                   for m in ("dram", "ssd")}
            for m in got:
                hit_pages[m] += got[m] // page_bytes
            if op.completed_tokens:
                latency["ssd" if got["ssd"] else "dram"].append(seconds)
            heapq.heappush(events, (t + len(tokens) / prefill_tokens_per_s, 1, i))
            continue
        keys = get_hash_str(tokens, None, page_size=page_size)
        keys_of[i] = keys
        present = store.exists([backend._store_key(k) for k in keys])
        if present < len(keys):
            ctrl.write_storage(pool.page_indices(range(present, len(keys))), tokens,
                               hash_value=keys[present:], prefix_keys=list(keys[:present]))
        dram_peak = max(dram_peak, store.stats()["dram"]["used_bytes"])
    stats = store.stats()
    out = {
        "requests": len(requests), "page_bytes": page_bytes,
        "hit_pages": hit_pages,
        "placed_bytes": {m: stats[m]["written_bytes"] for m in ("dram", "ssd")},
        "restore_ms": {m: {"count": len(v), "p50": round(1e3 * _percentile(v, 0.5), 3),
                           "p99": round(1e3 * _percentile(v, 0.99), 3)}
                       for m, v in latency.items()},
        "dram_capacity_bytes": stats["dram"]["capacity_bytes"],
        "dram_used_bytes": stats["dram"]["used_bytes"], "dram_peak_bytes": dram_peak,
    }
    out["_keys"] = keys_of  # for the tests' per-page checks; dropped from the report
    out["_backend"] = backend
    return out


def one_shot_pages_in_dram(requests: List[dict], result: Dict, page_size: int) -> int:
    """Pages of blocks that only one request holds (never reused) now in DRAM."""
    count: Dict[int, int] = {}
    for r in requests:
        for b in set(r["blocks"]):
            count[b] = count.get(b, 0) + 1
    backend = result["_backend"]
    per_block = BLOCK_TOKENS // page_size
    in_dram = 0
    for i, r in enumerate(requests):
        keys = result["_keys"].get(i, [])
        for j, b in enumerate(r["blocks"]):
            if count[b] != 1:
                continue
            for k in keys[j * per_block:(j + 1) * per_block]:
                if backend._store.lookup([backend._store_key(k)]).dram_bytes:
                    in_dram += 1
    return in_dram


def run(a: argparse.Namespace, requests: List[dict]) -> Dict:
    report: Dict = {"workload": a.workload, "page_size": a.page_size}
    for name, force in (("placed", False), ("forced_ssd", True)):
        with tempfile.TemporaryDirectory(prefix="flatcake-sglang-replay-") as d:
            r = replay(requests, d, force_ssd=force, page_size=a.page_size,
                       dram_bytes=a.dram_bytes, ssd_bytes=a.ssd_bytes,
                       prefill_tokens_per_s=a.prefill_tokens_per_s)
            r["one_shot_pages_in_dram"] = one_shot_pages_in_dram(requests, r, a.page_size)
            r.pop("_keys")
            r.pop("_backend").close()
            report[name] = r
    return report


def _print(report: Dict) -> None:
    print(f"sglang replay: {report['workload']}, {report['placed']['requests']} requests, "
          f"page {report['placed']['page_bytes']} B ({report['page_size']} tokens)")
    print(f"{'run':<11}{'hits dram':>10}{'hits ssd':>10}{'placed dram':>13}{'placed ssd':>13}"
          f"{'p50 dram ms':>12}{'p99 dram':>10}{'p50 ssd ms':>11}{'p99 ssd':>9}{'dram peak':>11}")
    for name in ("placed", "forced_ssd"):
        r = report[name]
        ms = r["restore_ms"]
        print(f"{name:<11}{r['hit_pages']['dram']:>10}{r['hit_pages']['ssd']:>10}"
              f"{r['placed_bytes']['dram']:>13}{r['placed_bytes']['ssd']:>13}"
              f"{ms['dram']['p50']:>12}{ms['dram']['p99']:>10}{ms['ssd']['p50']:>11}"
              f"{ms['ssd']['p99']:>9}{r['dram_peak_bytes']:>11}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("conversation", "agentic"), default="conversation")
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--turn-blocks", type=int, default=8)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--dram-bytes", default="256MiB")
    ap.add_argument("--ssd-bytes", default="2GiB")
    ap.add_argument("--prefill-tokens-per-s", type=float, default=20000.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.page_size < 1 or BLOCK_TOKENS % a.page_size:
        ap.error(f"--page-size must divide {BLOCK_TOKENS}")
    if a.workload == "conversation":
        requests = conversation(a.trace, a.requests)
    else:
        requests = agentic(a.sessions, a.turns, a.turn_blocks, gap_s=5.0)
    report = run(a, requests)
    _print(report)
    if a.json:
        print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
