"""FlatCake as a vLLM KV connector (``KVConnectorBase_V1``), loading layer by layer.

Start vLLM with (docs/vllm.md lists every option):

    --kv-transfer-config '{"kv_connector": "FlatCakeConnector",
        "kv_connector_module_path": "flatcake.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"ssd_dirs": ["/nvme0/flatcake"], "ssd_bytes": "512GiB"}}'

vLLM builds the class twice: ``FlatCakeConnector(vllm_config, KVConnectorRole.SCHEDULER,
kv_cache_config)`` in the scheduler and ``(..., KVConnectorRole.WORKER, ...)`` in every worker.

Scheduler side. ``get_num_new_matched_tokens`` looks the request's full blocks up in the store
(every worker's keys; the shortest leading run counts) and offers the whole blocks beyond
``num_computed_tokens``, never the request's last token (vLLM must compute one). A hit that
needs the SSD is loaded asynchronously (``async_load``): vLLM allocates its blocks, leaves the
request unscheduled and runs others until every worker reports it in ``get_finished``; a
DRAM-ready hit loads layer by layer in the step that computes the rest. ``update_state_after_alloc``
notes which of the request's blocks receive them, and ``build_connector_meta`` sends the
workers, per step, the block runs to load (keys and vLLM block ids) and to save: every block the
step fills, prompt and decode alike, in the step that computes it (so a preempted request, or
another engine on the store, finds them all). A request's blocks not yet saved when it ends are
saved in the next step: ``request_finished`` returns True (vLLM keeps the blocks,
``has_pending_block_frees`` tells it they will come back) until the workers report the save in
``get_finished``. ``requires_kv_delivery`` is False: a cache, not a hand-off.

Worker side. ``register_kv_caches`` takes vLLM's per-layer paged KV tensors: since vLLM's KV cache
layout standardization, one 4D view per layer ``[num_blocks, heads, block_size, C]`` into a
buffer the group's layers share (K and V packed in C; MLA ``[num_blocks, 1, block_size,
latent]``), in any layout whose blocks lead their heads (``LBNHC``, vLLM's default, ``LBHNC``,
``BLHNC``, ``BLNHC``); before it, MHA ``[2, num_blocks, block_size, kv_heads, head_size]``
(FlashAttention, NHD or HND; the ``[num_blocks, 2, ...]`` order of FlashInfer too) and MLA
``[num_blocks, block_size, head_size]``. One vLLM block of one worker is one FlatCake block of
``KvLayout(num_layers, num_planes, slice_bytes)``: one plane holding the block's bytes of one
layer for the 4D views and MLA, two (K, V) for the earlier MHA shapes; moved with
``slice_pointers``. ``start_load_kv`` starts one restore per run; ``wait_for_layer_load(layer)``
waits for that layer of every restore of the step (``RestoreHandle.wait_layer``), so attention on
layer l runs while later layers are still arriving. ``wait_for_save`` writes the step's blocks
once the forward has computed them; a save that fails stops the request's later saves (past the
gap no lookup could reach them). Blocks a restore did not deliver are reported by
``get_block_ids_with_load_errors`` (in the pass that reports an asynchronous load finished) and
vLLM recomputes them under ``kv_load_failure_policy: "recompute"`` (its default, "fail", fails
the request: the connector warns at start).

Data movement. CPU tensors (vLLM's CPU backend, the tests) are read and written in place: the
store's pointers go straight into the paged cache. CUDA tensors go through the store's GPU path
when it has one (CUDA in this process and an embedded store or the node daemon's, whose client
runs the path on its own mapping of the daemon's arena and pool files; ``gpu_path``): restores
land straight in vLLM's paged KV tensors at the metadata's block ids, ``wait_for_layer_load(l)``
makes the current stream wait on layer l's event (no host synchronisation), and saves are
gathered from device memory by the store's device put. Without it (a cluster member's client, no
CUDA runtime) they go through a host staging buffer (pinned when CUDA can pin it) with torch
copies on the current stream: a restore lands in the buffer and ``wait_for_layer_load`` copies
that layer to the device; ``save_kv_layer`` copies the layer's blocks out as soon as attention
has written them. The connector logs at start which path it uses and why.

Keys: ``<namespace><block hash hex>@<format><worker suffix>``. The hashes are vLLM's chained prefix-cache
block hashes (``request.block_hashes``), so a block's key names its whole prefix and a session's
chain joins its scope (each write passes the key before it as ``prefix_tail``). The namespace
defaults to ``<model>/``. The worker suffix is ``_tp<rank>of<size>`` for MHA (each TP rank holds
other heads) and nothing for MLA (the latent cache is the same on every TP rank), plus
``_pp<rank>of<size>`` under pipeline parallelism. The format (``_group_format``) names what the
block's bytes mean (model, packing, block size, dtype, heads, their order, TP split), so a block
written under another interpretation is a miss, never scrambled KV. Writes carry the request id as the session (or
``kv_transfer_params["flatcake_session"]``) and ``kv_transfer_params["flatcake_turn"]`` as the
turn.

Hybrid models (``SupportsHMA``). Under vLLM's hybrid KV cache manager the layers fall into KV
cache groups (full attention, sliding window), block ids come per group and a sliding-window
group's blocks out of the window are the null block (id 0). Each group has its own keys (the
hash of the group's block, then ``_g<idx>``, only when there is more than one group), its own
``KvLayout`` (its layers, from ``kv_cache_config.kv_cache_groups``) and its own load and save
runs; null blocks are never moved. A hit of n tokens (a multiple of the scheduler's block, the
groups' LCM) needs every block before n of a full-attention group and, of a sliding-window
group, the blocks of the window the token at n reads (the only ones vLLM allocates it). With
several groups every load is asynchronous and a load that missed blocks is reported for the
request in ``failed_recving`` (vLLM refuses block-level errors then). Groups other than paged
attention (Mamba state) are refused at start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import torch

import flatcake
from flatcake import _shared_stores

try:  # vLLM present: subclass its interface so its factory and scheduler accept the class.
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )
except ImportError:  # pragma: no cover - exercised when vLLM is absent (the test machine)
    from ._vllm_iface import KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole
try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA  # type: ignore
except ImportError:  # pragma: no cover - as above
    from ._vllm_iface import SupportsHMA
try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (  # type: ignore
        KVConnectorPromMetrics,
        KVConnectorStats,
    )
except ImportError:  # pragma: no cover - as above
    from ._vllm_iface import KVConnectorPromMetrics, KVConnectorStats
try:
    from vllm.distributed.kv_events import (  # type: ignore
        BlockRemoved,
        BlockStored,
        KVConnectorKVEvents,
        KVEventAggregator,
    )
except ImportError:  # pragma: no cover - as above
    from ._vllm_iface import BlockRemoved, BlockStored, KVConnectorKVEvents, KVEventAggregator

__all__ = [
    "CONNECTOR_OPTIONS",
    "FlatCakeConnector",
    "FlatCakeConnectorMetadata",
    "FlatCakeConnectorStats",
    "FlatCakeKVEvents",
    "FlatCakePromMetrics",
    "KVConnectorBase_V1",
    "KVConnectorMetadata",
    "KVConnectorRole",
]

logger = logging.getLogger(__name__)

# Options of the connector itself (every other key of kv_connector_extra_config is a store
# option, see flatcake.option_names()).
CONNECTOR_OPTIONS: Dict[str, str] = {
    "daemon": "address of the node's `flatcake serve` (unix:///path or a socket path): the "
              "scheduler and every worker use the daemon's store; store options then belong to "
              "the daemon and are refused here. Required when vLLM runs more than one worker "
              "process (TP x PP > 1) or data-parallel engines",
    "tenant": "with daemon: the tenant this engine's keys live under (default: the model name, "
              "characters outside [A-Za-z0-9._-] replaced by '_')",
    "namespace": "string prefixed to every key (default '<model>/'; '' shares blocks between "
                 "model names that serve the same weights)",
    "force_medium": "'dram' or 'ssd': bypass placement (testing, benchmarking)",
    "save_decode": "true (default): save the blocks decoding fills too, each in the step that "
                   "fills it (and, when a request ends, any full block not saved yet, holding its "
                   "blocks until the workers report the save); false: prompt blocks only",
    "async_load": "'ssd' (default): a hit that needs the SSD is loaded asynchronously (vLLM "
                  "schedules the request once every worker has it), a DRAM-ready hit layer by "
                  "layer in the step; 'always'; 'never' (every hit in the step)",
    "events_probe_s": "how often (seconds, default 1) take_events looks up a share of the blocks "
                      "it announced to report those the store reclaimed as BlockRemoved; 0: "
                      "every call",
    "gpu_path": "'auto' (default): with CUDA KV caches, restore into and save from them through "
                "the store's GPU path when it has one (docs/gpu.md), else stage through host "
                "memory; 'none': always stage; 'fake': the store's fake device, CPU tensors "
                "standing in for device memory (tests)",
}

# Finished request ids remembered for get_finished (vLLM names a request there in the same step
# as its save at the latest); older ones are forgotten.
_FINISHED_IDS_KEPT = 8192


# The connector's statistics, per step: each key a list of numbers, one per event (a lookup, a
# restore, a write), so that vLLM's aggregation across workers and steps is concatenation.
_STAT_KEYS = {
    "lookups": "requests looked up (scheduler)",
    "hit_blocks": "leading blocks found per lookup (scheduler)",
    "load_seconds_dram": "seconds a restore served from DRAM alone took, start to done",
    "load_seconds_ssd": "seconds a restore that read the SSD took, start to done",
    "load_bytes_dram": "bytes a restore delivered from DRAM",
    "load_bytes_ssd": "bytes a restore delivered from SSD",
    "blocks_loaded": "blocks a restore delivered",
    "load_errors": "blocks a restore did not deliver (vLLM recomputes them)",
    "blocks_saved": "blocks a write stored",
    "save_errors": "blocks a write failed to store",
}


class FlatCakeConnectorStats(KVConnectorStats):
    """FlatCake's transfer statistics (vLLM's ``KVConnectorStats``): ``data`` maps each of
    ``_STAT_KEYS`` to a list of numbers, one per event. Workers' and steps' objects aggregate by
    concatenation; ``reduce`` gives the log line's counts, bytes and latency per medium."""

    def record(self, key: str, value: float) -> None:
        self.data.setdefault(key, []).append(value)

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: "KVConnectorStats") -> "FlatCakeConnectorStats":
        for key, values in (other.data or {}).items():
            self.data.setdefault(key, []).extend(values)
        return self

    def reduce(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key in ("lookups", "hit_blocks", "blocks_loaded", "load_errors", "blocks_saved",
                    "save_errors", "load_bytes_dram", "load_bytes_ssd"):
            out[key] = int(sum(self.data.get(key, ())))
        for medium in ("dram", "ssd"):
            times = sorted(self.data.get(f"load_seconds_{medium}", ()))
            out[f"loads_{medium}"] = len(times)
            if times:
                out[f"load_ms_p50_{medium}"] = round(1e3 * times[len(times) // 2], 3)
                out[f"load_ms_p99_{medium}"] = round(1e3 * times[(len(times) * 99) // 100], 3)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


class FlatCakePromMetrics(KVConnectorPromMetrics):
    """The statistics as Prometheus counters (``vllm:flatcake_<key>_total``) and, for restore
    latency, a histogram per medium (``vllm:flatcake_load_seconds{medium=...}``)."""

    _LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                        2.5, 5.0, 10.0]

    def __init__(self, vllm_config: Any, metric_types: dict, labelnames: List[str],
                 per_engine_labelvalues: Dict[int, List[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters: Dict[str, Dict[int, Any]] = {}
        for key, doc in _STAT_KEYS.items():
            if key.startswith("load_seconds_"):
                continue
            counter = self._counter_cls(name=f"vllm:flatcake_{key}", documentation=doc,
                                        labelnames=labelnames)
            self._counters[key] = {e: counter.labels(*v)
                                   for e, v in per_engine_labelvalues.items()}
        latency = self._histogram_cls(name="vllm:flatcake_load_seconds",
                                      documentation="seconds a restore took, by the slowest "
                                      "medium it read", labelnames=labelnames + ["medium"],
                                      buckets=self._LATENCY_BUCKETS)
        self._latency = {m: {e: latency.labels(*v, m) for e, v in per_engine_labelvalues.items()}
                         for m in ("dram", "ssd")}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        for key, children in self._counters.items():
            total = sum(transfer_stats_data.get(key, ()))
            if total:
                children[engine_idx].inc(total)
        for medium, children in self._latency.items():
            for seconds in transfer_stats_data.get(f"load_seconds_{medium}", ()):
                children[engine_idx].observe(seconds)


class FlatCakeKVEvents(KVConnectorKVEvents):
    """A worker's KV events of one step (BlockStored for every run it wrote). vLLM folds the
    workers' objects into one; ``aggregate`` keeps the events every worker emitted, so a block
    is announced once it is stored for every worker (each TP rank stores its own heads)."""

    def __init__(self, num_workers: int = 1) -> None:
        self._aggregator = KVEventAggregator(num_workers)

    def add_events(self, events: list) -> None:
        self._aggregator.add_events(events)

    def aggregate(self) -> "FlatCakeKVEvents":
        common = self._aggregator.get_common_events()
        self._aggregator.clear_events()
        self._aggregator.add_events(common)
        self._aggregator.reset_workers()
        return self

    def increment_workers(self, count: int = 1) -> None:
        self._aggregator.increment_workers(count)

    def get_all_events(self) -> list:
        return self._aggregator.get_all_events()

    def get_number_of_workers(self) -> int:
        return self._aggregator.get_number_of_workers()

    def clear_events(self) -> None:
        self._aggregator.clear_events()


# BlockStored's medium: where the store placed the blocks.
_EVENT_MEDIUM = {"dram": "CPU", "ssd": "STORAGE"}


class _AnnouncedRuns:
    """The runs of blocks BlockStored announced and no BlockRemoved took back yet (at most
    MAX_RUNS, the oldest forgotten first), looked up PROBE_RUNS at a time, oldest first, at most
    every ``interval_s``. A block the store no longer serves is reported removed, and so is every
    block after it in its run: lookups are leading (vLLM's and the store's), so those can never
    be hits again."""

    MAX_RUNS = 1 << 16
    PROBE_RUNS = 64

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._next_probe = 0.0
        self._runs: "OrderedDict[int, Tuple[List[Any], Optional[str], Optional[int]]]" = \
            OrderedDict()
        self._serial = 0

    def add(self, ev: Any) -> None:
        if not ev.block_hashes:
            return
        self._serial += 1
        self._runs[self._serial] = (list(ev.block_hashes), ev.medium,
                                    getattr(ev, "group_idx", None))
        while len(self._runs) > self.MAX_RUNS:
            self._runs.popitem(last=False)

    def probe(self, present: Any) -> List[Any]:
        """BlockRemoved for the probed runs' blocks that ``present(hashes, group)`` (leading
        blocks still served; raises flatcake.Error when it cannot say) says are gone."""
        now = time.monotonic()
        if not self._runs or now < self._next_probe:
            return []
        self._next_probe = now + self._interval_s
        removed = []
        for serial in list(self._runs)[:self.PROBE_RUNS]:
            hashes, medium, group = self._runs.pop(serial)
            try:
                kept = present(hashes, group)
            except flatcake.Error:  # the store out of reach: not a removal; try again later
                self._runs[serial] = (hashes, medium, group)
                break
            if kept < len(hashes):
                extra = {"group_idx": group} if group is not None else {}
                removed.append(BlockRemoved(block_hashes=hashes[kept:], medium=medium, **extra))
            if kept > 0:
                self._runs[serial] = (hashes[:kept], medium, group)  # to the back
        return removed


@dataclass
class _BlockRun:
    """Consecutive blocks of one request moving between vLLM's paged cache and the store."""

    req_id: str
    keys: List[str]  # store keys without the worker suffix, one per block
    block_ids: List[int]  # the vLLM blocks, in the same order
    session: str = ""
    turn: int = 0
    prefix_tail: Optional[str] = None  # key of the block before keys[0], without suffix
    context_tokens: int = 0  # tokens before keys[0]
    finish: bool = False  # saved for request_finished: reported by get_finished
    # For the BlockStored event of a save: vLLM's block hashes, the one before, the tokens.
    hashes: List[Any] = field(default_factory=list)
    parent_hash: Any = None
    token_ids: List[int] = field(default_factory=list)
    asynchronous: bool = False  # a load vLLM waits for (finished_recving), not in the step
    group: int = 0  # the KV cache group whose blocks these are


@dataclass
class FlatCakeConnectorMetadata(KVConnectorMetadata):
    """One step's work for the workers: runs to load, runs to save."""

    loads: List[_BlockRun] = field(default_factory=list)
    saves: List[_BlockRun] = field(default_factory=list)


@dataclass
class _RequestState:
    """What the scheduler side tracks of a running request."""

    request: Any
    block_ids: List[List[int]]  # per KV cache group
    stored: List[int]  # per group: leading blocks the store holds (found by the lookup, or saved)
    load: Optional[Tuple[int, int]] = None  # tokens [start, end) to load in the next step
    load_async: bool = False  # that load is asynchronous (the request waits, unscheduled)

    @property
    def stored_blocks(self) -> int:  # the single-group view
        return self.stored[0]

    @stored_blocks.setter
    def stored_blocks(self, n: int) -> None:
        self.stored[0] = n


@dataclass
class _Group:
    """A KV cache group as the connector serves it: its layers, block size, and sliding window
    (None: full attention, every earlier token is read)."""

    layer_names: List[str]
    block_size: int
    sliding_window: Optional[int] = None
    spec: Any = None  # vLLM's KV cache spec (None: a vLLM without kv_cache_config)


# KV cache specs FlatCake serves (by class name, so that subclasses such as MLA's count): paged
# attention whose blocks hold the KV of block_size tokens. Anything else (Mamba state, ...) is
# refused at start.
_SERVED_SPECS = ("FullAttentionSpec", "SlidingWindowSpec")


def _groups_of(kv_cache_config: Any, block_size: int) -> List[_Group]:
    """The KV cache groups of ``kv_cache_config`` (one group of every layer when there is none:
    vLLM before the config reached connectors); refuses a group FlatCake cannot serve."""
    specs = list(getattr(kv_cache_config, "kv_cache_groups", None) or ())
    if not specs:
        return [_Group([], block_size)]
    groups = []
    for i, g in enumerate(specs):
        spec = g.kv_cache_spec
        if spec is None:  # no spec to go by: full attention of the scheduler's block
            groups.append(_Group(list(g.layer_names), block_size))
            continue
        kinds = {c.__name__ for c in type(spec).__mro__}
        if not kinds & set(_SERVED_SPECS):
            raise ValueError(
                f"FlatCakeConnector: KV cache group {i} ({type(spec).__name__}, layers "
                f"{', '.join(list(g.layer_names)[:4])}{', ...' if len(g.layer_names) > 4 else ''})"
                f" is not paged attention KV; FlatCake serves full-attention and sliding-window "
                f"groups only")
        window = getattr(spec, "sliding_window", None) if "SlidingWindowSpec" in kinds else None
        groups.append(_Group(list(g.layer_names), int(spec.block_size),
                             int(window) if window else None, spec))
    return groups


def _config_cell_order(vllm_config: Any, kv_cache_config: Any) -> str:
    """Within a block of one layer, whether tokens lead heads in memory ("NH": LBNHC, BLNHC,
    NHD, vLLM's default) or heads lead tokens ("HN": LBHNC, BLHNC, HND), as the configuration
    says: the resolved layout (vLLM since its layout standardization), else
    VLLM_KV_CACHE_LAYOUT (before it)."""
    name = (getattr(kv_cache_config, "kv_cache_layout", None) or
            getattr(getattr(vllm_config, "cache_config", None), "kv_cache_layout", None) or
            os.environ.get("VLLM_KV_CACHE_LAYOUT") or "NHD")
    name = {"NHD": "LBNHC", "HND": "LBHNC"}.get(str(name), str(name))
    if "H" not in name or "N" not in name:
        raise ValueError(f"FlatCakeConnector: unknown KV cache layout {name!r}")
    return "HN" if name.index("H") < name.index("N") else "NH"


def _tensor_cell_order(t: torch.Tensor) -> str:
    """_config_cell_order's answer for a registered KV cache tensor, from its strides; "" when
    a block has one head (MLA, or one KV head per rank), where the order is moot."""
    if t.dim() == 4:
        h, n = 1, 2  # [num_blocks, heads, block_size, C]
    elif t.dim() == 5:
        n, h = 2, 3  # [2, num_blocks, block_size, heads, D] and FlashInfer's
    else:
        return ""
    if t.shape[h] == 1:
        return ""
    return "HN" if t.stride(h) > t.stride(n) else "NH"


def _group_format(group: _Group, *, model: str, mla: bool, tp_size: int, order: str,
                  packed: bool, cache_dtype: Any) -> str:
    """What a group's block bytes mean, as 8 hex digits in its keys: the model, whether K and V
    are packed in one plane (vLLM since its layout standardization) or two, the block size,
    the dtype, the heads and head sizes of a rank, their order in memory (MHA) and the TP size
    that split them (MHA; MLA's latent cache is the same on every rank). A block written under
    another interpretation has other keys, so it is a miss, never scrambled KV."""
    spec = group.spec
    fields = [model, mla, packed, group.block_size, str(getattr(spec, "dtype", cache_dtype)),
              getattr(spec, "num_kv_heads", None), getattr(spec, "head_size", None),
              getattr(spec, "head_size_v", None), "" if mla else order, 1 if mla else tp_size]
    return hashlib.sha1(json.dumps(fields, default=str).encode()).hexdigest()[:8]


def _block_sizes(vllm_config: Any, kv_cache_config: Any) -> Tuple[int, int]:
    """(scheduler block size, hash block size) as vLLM resolves them; ``request.block_hashes``
    has one hash per hash block, which may be finer than the block. vLLM before
    ``resolve_kv_cache_block_sizes`` hashed whole blocks of ``cache_config.block_size``."""
    try:
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes  # type: ignore
    except ImportError:
        block_size = int(vllm_config.cache_config.block_size)
        return block_size, block_size
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    return int(block_size), int(hash_block_size)


def _event_hash(block_hash: Any) -> Any:
    """A block hash as vLLM's KV events carry it (bytes, or the int vLLM may be set to use)."""
    try:
        from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash  # type: ignore
    except ImportError:
        return block_hash
    return maybe_convert_block_hash(block_hash)


def _hash_hex(block_hash: Any) -> str:
    """vLLM's block hash (bytes since 2025; an int or a BlockHash tuple before) as hex."""
    if isinstance(block_hash, (bytes, bytearray)):
        return bytes(block_hash).hex()
    if isinstance(block_hash, int):
        return format(block_hash & ((1 << 256) - 1), "x")
    value = getattr(block_hash, "hash_value", None)
    return _hash_hex(value) if value is not None else str(block_hash)


def _layer_number(name: str) -> Optional[int]:
    # vLLM names attention layers by module path: "model.layers.12.self_attn.attn".
    numbers = re.findall(r"\.(\d+)\.", f".{name}.")
    return int(numbers[0]) if len(numbers) == 1 else None


def _dense_run_bytes(t: torch.Tensor, dims: List[int]) -> Optional[int]:
    """Bytes of one index of the other dimensions when ``dims`` are one dense run of memory
    (in some order, the innermost of stride 1), else None."""
    size, expected = 1, 1
    for d in sorted(dims, key=lambda d: t.stride(d)):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return None
        expected *= t.shape[d]
        size *= t.shape[d]
    return size * t.element_size()


def _paged_bytes(t: torch.Tensor, mla: bool, block_size: int) -> torch.Tensor:
    """A uint8 view [planes, num_blocks, slice_bytes] of one layer's paged KV tensor, strided as
    the tensor is (a layer's view into a buffer the group's layers share keeps the buffer's block
    stride). The forms vLLM registers:

    - since the KV cache layout standardization (vLLM main, 2026-08): one 4D view per layer,
      ``[num_blocks, heads, block_size, C]`` with K and V packed in C (MLA: heads 1, C the
      latent), one plane whose slice is a block's ``heads * block_size * C`` elements, in the
      physical order of the resolved layout (``LBNHC``, ``LBHNC``, ``BLHNC``, ...);
    - before: ``[2, num_blocks, block_size, heads, head_size]`` (FlashAttention, NHD or HND
      strides), ``[num_blocks, 2, ...]`` (FlashInfer), two planes K and V; MLA
      ``[num_blocks, block_size, head_size]``, one plane.
    Every (plane, block) slice must be one dense run of memory."""
    if t.dim() == 4 and (not mla or t.shape[1] == 1):
        plane_dim, block_dim, token_dim = None, 0, 2
    elif mla and t.dim() == 3:
        plane_dim, block_dim, token_dim = None, 0, 1
    elif not mla and t.dim() == 5 and t.shape[0] == 2:
        plane_dim, block_dim, token_dim = 0, 1, 2
    elif not mla and t.dim() == 5 and t.shape[1] == 2:
        plane_dim, block_dim, token_dim = 1, 0, 2
    else:
        legacy = (f"[num_blocks, {block_size}, head_size]" if mla else
                  f"[2, num_blocks, {block_size}, heads, head_size] or [num_blocks, 2, ...]")
        raise ValueError(f"an {'MLA' if mla else 'MHA'} layer's KV cache must be vLLM's "
                         f"[num_blocks, {1 if mla else 'heads'}, {block_size}, content] view or, "
                         f"before vLLM's layout standardization, {legacy}; got {list(t.shape)}")
    if t.shape[token_dim] != block_size:
        raise ValueError(f"KV cache of shape {list(t.shape)}: {t.shape[token_dim]} tokens per "
                         f"block, the engine's block is {block_size} (a kernel block size other "
                         "than the block size is not supported)")
    inner = [d for d in range(t.dim()) if d not in (plane_dim, block_dim)]
    slice_bytes = _dense_run_bytes(t, inner)
    if slice_bytes is None:
        raise ValueError(f"KV cache of shape {list(t.shape)} and strides {list(t.stride())}: a "
                         "block of one plane is not one dense range of memory (a layout whose "
                         "heads lead its blocks, such as LHBNC, splits it)")
    es = t.element_size()
    planes = 1 if plane_dim is None else t.shape[plane_dim]
    plane_stride = 0 if plane_dim is None else t.stride(plane_dim) * es
    if t.stride(-1) != 1:
        raise ValueError(f"KV cache of shape {list(t.shape)} and strides {list(t.stride())}: "
                         "its last dimension is not the innermost")
    # A byte view of the same storage (as_strided addresses the storage, not the view's shape).
    u8 = t.detach().view(torch.uint8)
    return torch.as_strided(u8, (planes, t.shape[block_dim], slice_bytes),
                            (plane_stride, t.stride(block_dim) * es, 1),
                            t.storage_offset() * es)


def _host_buffer(nbytes: int) -> torch.Tensor:
    """Host memory for staging, pinned when CUDA can pin it."""
    try:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # no CUDA to pin with: pageable memory (copies then block)
        return torch.empty(nbytes, dtype=torch.uint8)


class _HostStaging:
    """A grow-only host buffer (pinned when CUDA can pin it) carved into one step's runs; a carve
    waits for the device copies of the previous use to finish before the bytes are reused."""

    def __init__(self) -> None:
        self._buf: Optional[torch.Tensor] = None
        self._used = 0
        self._event: Any = None

    def reset(self) -> None:
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        self._used = 0

    def take(self, nbytes: int) -> torch.Tensor:
        if self._buf is None or self._used + nbytes > self._buf.numel():
            self.reset()  # the old buffer may still be read by queued copies: let them finish
            size = max(nbytes + self._used, 2 * (self._buf.numel() if self._buf is not None
                                                 else 0))
            self._buf = _host_buffer(size)
            self._used = 0
        out = self._buf[self._used:self._used + nbytes]
        self._used += nbytes
        return out

    def fence(self, device: torch.device) -> None:
        """Marks the end of the copies queued on ``device``'s current stream."""
        if device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(device))


def _sync(device: torch.device) -> None:
    """Waits for the copies queued on ``device``'s current stream (CPU copies are done)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


@dataclass
class _GroupCache:
    """A worker's paged KV cache of one KV cache group: its FlatCake block layout, per layer a
    [planes, num_blocks, slice_bytes] byte view, the in-place path's per layer (address, plane
    stride, block stride), and the worker's key suffix."""

    layout: flatcake.KvLayout
    views: List[torch.Tensor]
    ptr_base: torch.Tensor
    suffix: str

    def planes(self) -> Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]:
        """The GPU path's per-layer page buffers: K (or the one plane), and V or None."""
        k = [v[0] for v in self.views]
        return k, ([v[1] for v in self.views] if self.layout.num_planes == 2 else None)


class _DeviceRestore:
    """A restore through the store's GPU path, behind the host restore's interface the loads
    use: ``wait_layer(l)`` makes the current CUDA stream wait for layer l's event (no host
    synchronisation; on the fake device the host waits), ``wait`` and ``result`` once done."""

    def __init__(self, handle: Any, fake: bool) -> None:
        self._handle, self._fake, self._result = handle, fake, None

    def wait_layer(self, layer: int) -> None:
        if self._fake:
            self._handle.wait_layer(layer)
        else:
            self._handle.stream_wait_layer(layer, torch.cuda.current_stream())

    def done(self) -> bool:
        return self._handle.done()

    def wait(self) -> None:
        if self._result is None:
            self._result = self._handle.wait()

    @property
    def result(self) -> Any:
        self.wait()
        return self._result


@dataclass
class _PendingLoad:
    run: _BlockRun
    handle: Any  # flatcake.RestoreHandle
    staging: Optional[torch.Tensor] = None  # [layers, planes, blocks, slice_bytes] (CUDA path)
    started: float = field(default_factory=time.monotonic)
    copied: Set[int] = field(default_factory=set)  # layers already on the device
    failed: bool = False


class FlatCakeConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM v1 KV connector backed by a FlatCake store (embedded, or the node's daemon)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._block_size, hash_block_size = _block_sizes(vllm_config, kv_cache_config)
        if self._block_size % hash_block_size:
            raise ValueError(f"FlatCakeConnector: vLLM's block of {self._block_size} tokens is "
                             f"no multiple of its hash block of {hash_block_size}")
        # request.block_hashes has one hash per hash block; a block's key is its last one's.
        self._hashes_per_block = self._block_size // hash_block_size
        self._groups = _groups_of(kv_cache_config, self._block_size)
        for i, g in enumerate(self._groups):
            if g.block_size % hash_block_size or self._block_size % g.block_size:
                raise ValueError(f"FlatCakeConnector: KV cache group {i}'s block of "
                                 f"{g.block_size} tokens does not divide the scheduler's block of "
                                 f"{self._block_size} or is no multiple of the hash block of "
                                 f"{hash_block_size}")
        self._group_hashes = [g.block_size // hash_block_size for g in self._groups]
        model_config = getattr(vllm_config, "model_config", None)
        self._model = str(getattr(model_config, "model", "") or "")
        self._mla = bool(getattr(model_config, "use_mla", False))
        parallel = vllm_config.parallel_config
        self._tp_size = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
        self._pp_size = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
        # A group's keys carry "@<format>" (what its bytes mean: _group_format) and "_g<idx>"
        # when there is more than one group.
        self._cell_order = _config_cell_order(vllm_config, kv_cache_config)
        packed = bool(getattr(kv_cache_config, "kv_cache_layout", None) or getattr(
            getattr(vllm_config, "cache_config", None), "kv_cache_layout", None))
        cache_dtype = getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", "auto")
        self._group_suffix = []
        for i, g in enumerate(self._groups):
            fmt = _group_format(g, model=self._model, mla=self._mla, tp_size=self._tp_size,
                                order=self._cell_order, packed=packed, cache_dtype=cache_dtype)
            self._group_suffix.append(f"@{fmt}" + (f"_g{i}" if len(self._groups) > 1 else ""))
        self._parse_options(dict(self._kv_transfer_config.kv_connector_extra_config or {}))
        kv = self._kv_transfer_config
        role_name = getattr(kv, "kv_role", None)
        if role_name not in ("kv_both", "kv_producer", "kv_consumer"):
            raise ValueError(f"FlatCakeConnector: kv_role must be kv_both, kv_producer or "
                             f"kv_consumer, got {role_name!r}")
        self._saves = role_name in ("kv_both", "kv_producer")  # kv_producer: never loads
        self._loads = role_name in ("kv_both", "kv_consumer")  # kv_consumer: never saves
        self._open_store(int(getattr(parallel, "data_parallel_size", 1) or 1))

        # Scheduler side.
        self._reqs: Dict[str, _RequestState] = {}
        # The last lookup's leading stored blocks, and whether loading them needs the SSD.
        self._hits: Dict[str, Tuple[int, bool]] = {}
        self._async_starts: List[str] = []  # requests whose asynchronous load the next step starts
        self._finish_runs: List[_BlockRun] = []
        self._holding: Set[str] = set()  # finished requests whose blocks a save holds
        if role == KVConnectorRole.SCHEDULER and \
                getattr(kv, "kv_load_failure_policy", "recompute") != "recompute":
            logger.warning(
                "FlatCakeConnector: kv_load_failure_policy is %r: a block the store cannot "
                "deliver after its lookup (reclaimed meanwhile, an I/O error) then fails the "
                "request instead of being recomputed; FlatCake is a cache: set "
                "\"kv_load_failure_policy\": \"recompute\" in --kv-transfer-config",
                getattr(kv, "kv_load_failure_policy", None))
        # Worker side (register_kv_caches fills the layout).
        self._suffix = ""
        if role == KVConnectorRole.WORKER:
            tp_rank, pp_rank = self._worker_ranks(parallel)
            self._suffix = self._key_suffix(tp_rank, pp_rank)
        self._caches: List[Optional[_GroupCache]] = [None] * len(self._groups)
        self._layer_index: Dict[str, Tuple[int, int]] = {}  # layer -> (group, layer in group)
        self._device: Optional[torch.device] = None
        self._staged = False
        self._gpu: Optional[flatcake.GpuPath] = None  # the store's GPU path, when it is used
        self._load_staging = _HostStaging()
        self._save_staging = _HostStaging()
        self._pending: List[_PendingLoad] = []  # this step's loads
        self._async_pending: List[_PendingLoad] = []  # asynchronous loads not yet reported
        self._failed_recving: Set[str] = set()  # several groups: loads that missed blocks
        self._save_buffers: Dict[int, Tuple[torch.Tensor, Set[int]]] = {}  # run -> (buf, layers)
        self._load_errors: Set[int] = set()
        self._saved_finish: Set[str] = set()
        self._finished_ids: "OrderedDict[str, None]" = OrderedDict()
        self._broken_chains: Set[str] = set()  # requests a save of failed: none after it
        self._stats = FlatCakeConnectorStats()  # since the last get_kv_connector_stats
        self._kv_events: list = []  # worker: BlockStored since the last step's report
        self._events_out: list = []  # scheduler: events every worker reported, for take_events
        self.counters = {"lookups": 0, "blocks_loaded": 0, "blocks_saved": 0, "load_errors": 0,
                         "save_errors": 0, "saves_skipped": 0}

    # --- configuration ------------------------------------------------------------------------
    def _parse_options(self, extra: Dict[str, Any]) -> None:
        def fail(what: str) -> None:
            raise ValueError(f"FlatCakeConnector: kv_connector_extra_config {what}")

        self._daemon = extra.pop("daemon", None)
        if self._daemon is not None and (not isinstance(self._daemon, str) or not self._daemon):
            fail("'daemon' must be the daemon's address (unix:///path/to/socket)")
        tenant = extra.pop("tenant", None)
        if tenant is not None and self._daemon is None:
            fail("'tenant' needs 'daemon' (an embedded store has no tenants)")
        if tenant is not None and not isinstance(tenant, str):
            fail(f"'tenant' must be a string, got {type(tenant).__name__}")
        self._tenant = tenant or _shared_stores.tenant_name(self._model)
        namespace = extra.pop("namespace", None)
        if namespace is not None and not isinstance(namespace, str):
            fail(f"'namespace' must be a string, got {type(namespace).__name__}")
        self._namespace = f"{self._model or 'default'}/" if namespace is None else namespace
        self._force_medium = extra.pop("force_medium", None)
        if self._force_medium not in (None, "dram", "ssd"):
            fail(f"'force_medium' must be 'dram' or 'ssd', got {self._force_medium!r}")
        self._save_decode = extra.pop("save_decode", True)
        if not isinstance(self._save_decode, bool):
            fail("'save_decode' must be true or false")
        self._async_load = extra.pop("async_load", "ssd")
        if self._async_load not in ("ssd", "always", "never"):
            fail(f"'async_load' must be 'ssd', 'always' or 'never', got {self._async_load!r}")
        probe_s = extra.pop("events_probe_s", 1.0)
        if isinstance(probe_s, bool) or not isinstance(probe_s, (int, float)) or probe_s < 0:
            fail(f"'events_probe_s' must be a number of seconds >= 0, got {probe_s!r}")
        self._announced = _AnnouncedRuns(float(probe_s))
        self._gpu_mode = extra.pop("gpu_path", "auto")
        if self._gpu_mode not in ("auto", "none", "fake"):
            fail(f"'gpu_path' must be 'auto', 'none' or 'fake', got {self._gpu_mode!r}")
        if self._daemon is not None and extra:
            fail(f"has store options with 'daemon': they belong to the daemon's configuration "
                 f"(flatcake serve --config), not here: {', '.join(sorted(extra))}")
        try:  # names, types and ranges checked now, so that a typo fails at startup
            self._store_config = flatcake.normalize_config(extra)
        except (ValueError, TypeError) as e:
            fail(f"is bad: {e}; connector options: {', '.join(CONNECTOR_OPTIONS)}; store "
                 f"options: {', '.join(flatcake.option_names())}")
        self._user_set = set(extra)

    def _open_store(self, dp_size: int) -> None:
        if self._daemon is not None:
            self._fingerprint = json.dumps({"daemon": self._daemon, "tenant": self._tenant})
            self._store = _shared_stores.acquire(
                self._fingerprint, lambda: flatcake.connect(self._daemon, tenant=self._tenant))
            return
        # An embedded store lives in one process. vLLM runs the scheduler and a single worker in
        # one process (the engine core); with more workers, or several data-parallel engines,
        # the scheduler's lookups would not see the workers' stores.
        if self._tp_size * self._pp_size > 1 or dp_size > 1:
            raise ValueError(
                f"FlatCakeConnector: an embedded store serves one vLLM worker; this engine has "
                f"TP {self._tp_size} x PP {self._pp_size} (DP {dp_size}): run `flatcake serve` "
                f"and set \"daemon\" in kv_connector_extra_config")
        config = dict(self._store_config)
        if "tokens_per_block" not in self._user_set:
            config["tokens_per_block"] = self._block_size  # one block is one vLLM block
        self._fingerprint = json.dumps(config, sort_keys=True)
        self._store = _shared_stores.acquire(self._fingerprint, lambda: flatcake.open(config))

    def _worker_ranks(self, parallel: Any) -> Tuple[int, int]:
        try:
            from vllm.distributed import parallel_state  # type: ignore

            return (int(parallel_state.get_tensor_model_parallel_rank()),
                    int(parallel_state.get_pp_group().rank_in_group))
        except (ImportError, AssertionError, AttributeError):
            # No vLLM process groups: vLLM numbers a worker pp_rank * tp_size + tp_rank.
            rank = int(getattr(parallel, "rank", 0) or 0)
            return rank % self._tp_size, rank // self._tp_size

    def _key_suffix(self, tp_rank: int, pp_rank: int) -> str:
        suffix = "" if self._mla else f"_tp{tp_rank}of{self._tp_size}"
        return suffix + (f"_pp{pp_rank}of{self._pp_size}" if self._pp_size > 1 else "")

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        # wait_for_layer_load and save_kv_layer run between layers: not capturable.
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """False: FlatCake is a cache, not a hand-off. A preempted request's blocks come back from
        the store or are recomputed; vLLM need not drop its in-flight output to redeliver them
        (vLLM's default, the producer role, would say True for kv_both)."""
        return False

    def has_pending_block_frees(self) -> bool:
        """True while finish-time saves hold requests' blocks (request_finished returned True
        and the workers have not reported the save): vLLM then waits for those blocks rather
        than preempt a running request."""
        return bool(self._holding)

    def update_connector_output(self, connector_output: Any) -> None:
        """Forgets the held requests whose saves the workers reported (vLLM frees their
        blocks), and keeps the KV events every worker emitted for take_events."""
        for req_id in getattr(connector_output, "finished_sending", None) or ():
            self._holding.discard(req_id)
        events = getattr(connector_output, "kv_cache_events", None)
        if events is not None:
            common = events.aggregate().get_all_events()
            self._events_out.extend(common)
            for ev in common:
                if isinstance(ev, BlockStored):
                    self._announced.add(ev)

    def take_events(self) -> Iterable[Any]:
        """BlockStored for the blocks every worker stored since the last call, and BlockRemoved
        for announced blocks the store no longer serves (reclaimed), found by looking up a share
        of them every ``events_probe_s``."""
        events, self._events_out = self._events_out, []
        events.extend(self._announced.probe(self._announced_present))
        return events

    def _announced_present(self, hashes: List[Any], group: Optional[int]) -> int:
        """How many leading blocks of an announced run every worker still has; raises
        flatcake.Error when the store cannot say (then nothing is reported removed)."""
        g = group or 0
        keys = [self._namespace + _hash_hex(h) + self._group_suffix[g] for h in hashes]
        return self._present(keys)[0]

    def get_kv_connector_kv_cache_events(self) -> Optional[FlatCakeKVEvents]:
        """This worker's BlockStored events of the step (None when it stored nothing)."""
        if not self._kv_events:
            return None
        out = FlatCakeKVEvents()
        out.add_events(self._kv_events)
        self._kv_events = []
        return out

    # --- scheduler side -----------------------------------------------------------------------
    def _block_keys(self, request: Any, max_blocks: int, group: int = 0) -> List[str]:
        """Keys (without worker suffix) of the request's first full blocks of ``group``, at most
        max_blocks. A block's key is the chained hash of its last hash block, which names the
        whole prefix through the block, and its group's suffix (several groups)."""
        hashes = self._block_hashes(request, group)
        tail = self._group_suffix[group]
        return [self._namespace + _hash_hex(h) + tail for h in hashes[:max(max_blocks, 0)]]

    def _block_hashes(self, request: Any, group: int = 0) -> List[Any]:
        """vLLM's hash of each full block of ``group``: that of its last hash block."""
        k = self._group_hashes[group]
        return request.block_hashes[k - 1::k]

    def _leading_hits(self, keys: List[str]) -> Tuple[int, bool]:
        """Leading blocks every worker's keys have in the store, and whether any worker's
        lookup found some of them on SSD (the store's slowest medium among its hits)."""
        try:
            return self._present(keys)
        except flatcake.Error as e:  # the daemon restarting: a miss, not a failure
            logger.warning("FlatCakeConnector: lookup failed (%s); counting a miss", e)
            return 0, False

    def _present(self, keys: List[str]) -> Tuple[int, bool]:
        """_leading_hits, raising flatcake.Error when a lookup fails."""
        tps = [0] if self._mla else range(self._tp_size)
        on_ssd = False
        for tp in tps:
            for pp in range(self._pp_size):
                if not keys:
                    return 0, False
                suffix = self._key_suffix(tp, pp)
                found = self._store.lookup([k + suffix for k in keys])
                keys = keys[:found.leading_hits]
                on_ssd = on_ssd or (found.leading_hits > 0 and found.slowest_medium == "ssd")
        return len(keys), on_ssd

    def _window_start(self, group: int, tokens: int) -> int:
        """The first block of ``group`` a request with ``tokens`` computed tokens still holds:
        0 for full attention; for a sliding window the block of the first token the next
        token's attention reads (vLLM has replaced the blocks before it by the null block)."""
        g = self._groups[group]
        if g.sliding_window is None:
            return 0
        return max(tokens - g.sliding_window + 1, 0) // g.block_size

    def _hit_tokens(self, request: Any, limit: int) -> Tuple[int, bool]:
        """The longest prefix, in tokens (a multiple of the scheduler block, at most limit),
        whose blocks every group needs are in the store for every worker: a full-attention group
        all its blocks, a sliding-window group the blocks of the window the next token reads
        (the only ones vLLM allocates it; those before are null blocks, never loaded)."""
        bs, on_ssd = self._block_size, False
        tokens = limit
        for gi, g in enumerate(self._groups):
            if g.sliding_window is None:
                hits, ssd = self._leading_hits(self._block_keys(request, tokens // g.block_size,
                                                                gi))
                tokens = min(tokens, hits * g.block_size // bs * bs)
                on_ssd = on_ssd or ssd
        while tokens > 0:
            short = None
            for gi, g in enumerate(self._groups):
                if g.sliding_window is None:
                    continue
                end = tokens // g.block_size
                first = min(self._window_start(gi, tokens), end)
                keys = self._block_keys(request, end, gi)[first:]
                hits, ssd = self._leading_hits(keys)
                if hits < len(keys):  # a missing block: the next try ends at or before it
                    short = min((first + hits) * g.block_size // bs * bs, tokens - bs)
                    break
                on_ssd = on_ssd or ssd
            if short is None:
                break
            tokens = short
        return max(tokens, 0), on_ssd

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """Tokens FlatCake supplies beyond ``num_computed_tokens``: whole blocks of the leading
        run that every worker has, leaving the last token to compute; and whether vLLM is to load
        them asynchronously: by default when some of them are on SSD (the request then waits,
        unscheduled, until every worker has its blocks, and other requests run meanwhile), while
        DRAM-ready hits load layer by layer in the step that computes the rest. With several KV
        cache groups every load is asynchronous (vLLM takes a failed load of a hybrid model
        only as a whole request, in failed_recving)."""
        self.counters["lookups"] += 1
        bs = self._block_size
        tokens, on_ssd = self._hit_tokens(request, (request.num_tokens - 1) // bs * bs)
        self._stats.record("lookups", 1)
        self._stats.record("hit_blocks", tokens // bs)
        self._hits[request.request_id] = (tokens, on_ssd)
        if not self._loads or getattr(request, "skip_reading_prefix_cache", False):
            return 0, False
        tokens = max(tokens - num_computed_tokens, 0)
        return tokens, tokens > 0 and self._load_async(on_ssd)

    def _load_async(self, on_ssd: bool) -> bool:
        return (len(self._groups) > 1 or self._async_load == "always" or
                (self._async_load == "ssd" and on_ssd))

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        block_ids = self._per_group(blocks.get_block_ids() if blocks is not None else None)
        req_id = request.request_id
        if req_id not in self._hits and req_id in self._reqs:
            # vLLM calls again, with no external tokens, once an asynchronous load is done:
            # the request keeps what it knows (the blocks the store holds).
            self._reqs[req_id].block_ids = block_ids
            return
        hits, on_ssd = self._hits.pop(req_id, (0, False))
        state = _RequestState(request, block_ids,
                              stored=[hits // g.block_size for g in self._groups])
        if num_external_tokens > 0:
            if num_external_tokens % self._block_size:
                raise ValueError(f"FlatCakeConnector: {num_external_tokens} external tokens for "
                                 f"{req_id} are not whole {self._block_size}-token blocks")
            state.load = (hits - num_external_tokens, hits)
            state.load_async = self._load_async(on_ssd)
            if state.load_async:  # not scheduled this step: build_connector_meta starts it
                self._async_starts.append(req_id)
        self._reqs[req_id] = state

    def _per_group(self, block_ids: Any) -> List[List[int]]:
        """vLLM's block ids (one list per group) as lists, every group present."""
        out = [list(ids) for ids in (block_ids or ())]
        return out + [[] for _ in range(len(self._groups) - len(out))]

    def _hints(self, request: Any) -> Tuple[str, int]:
        params = getattr(request, "kv_transfer_params", None) or {}
        session = params.get("flatcake_session") or request.request_id
        return str(session), int(params.get("flatcake_turn", 0) or 0)

    def _save_runs(self, state: _RequestState, full_tokens: int, finish: bool
                   ) -> List[_BlockRun]:
        """Per group, the run of its full blocks not yet in the store (through full_tokens);
        advances stored. Null blocks (out of a sliding window) are skipped: they hold nothing."""
        if not self._saves:
            return []
        request = state.request
        session, turn = self._hints(request)
        runs = []
        for gi, g in enumerate(self._groups):
            table = state.block_ids[gi]
            keys = self._block_keys(request, min(full_tokens // g.block_size, len(table)), gi)
            start = state.stored[gi]
            if len(keys) <= start:
                continue
            state.stored[gi] = len(keys)
            hashes = self._block_hashes(request, gi)
            bs = g.block_size
            live = [i for i in range(start, len(keys)) if table[i] != 0]
            if not live:
                continue
            first = live[0]
            if live != list(range(first, len(keys))):  # a null inside: save the tail only
                first = max(i for i in range(start, len(keys)) if table[i] == 0) + 1
                live = list(range(first, len(keys)))
            runs.append(_BlockRun(
                request.request_id, [keys[i] for i in live], [table[i] for i in live],
                session=session, turn=turn,
                prefix_tail=keys[first - 1] if first > 0 else None,
                context_tokens=first * bs, finish=finish, group=gi,
                hashes=[_event_hash(hashes[i]) for i in live],
                parent_hash=_event_hash(hashes[first - 1]) if first > 0 else None,
                token_ids=list(request.all_token_ids[first * bs:len(keys) * bs])))
        return runs

    def _plan_load(self, meta: FlatCakeConnectorMetadata, state: _RequestState) -> None:
        if state.load is None:
            return
        start, end = state.load
        state.load = None
        for gi, g in enumerate(self._groups):
            table = state.block_ids[gi]
            last = min(end // g.block_size, len(table))
            keys = self._block_keys(state.request, last, gi)
            live = [i for i in range(start // g.block_size, last) if table[i] != 0]
            if live:
                meta.loads.append(_BlockRun(state.request.request_id, [keys[i] for i in live],
                                            [table[i] for i in live],
                                            asynchronous=state.load_async, group=gi))

    def _plan_step(self, meta: FlatCakeConnectorMetadata, state: _RequestState,
                   computed_after_step: int) -> None:
        request = state.request
        self._plan_load(meta, state)
        # Every block is saved in the step that completes it, prompt and decode alike (unless
        # save_decode is off), so that a preempted request (or another engine) finds them all.
        full = min(computed_after_step, request.num_tokens if self._save_decode
                   else request.num_prompt_tokens)
        meta.saves.extend(self._save_runs(state, full, finish=False))

    def build_connector_meta(self, scheduler_output: Any) -> FlatCakeConnectorMetadata:
        meta = FlatCakeConnectorMetadata()
        # Asynchronous loads start in the step that allocated their blocks (the request itself
        # is not scheduled until every worker reported it in finished_recving).
        for req_id in self._async_starts:
            state = self._reqs.get(req_id)
            if state is not None:
                self._plan_load(meta, state)
        self._async_starts = []
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            state = self._reqs.get(new.req_id)
            if state is not None:
                state.block_ids = self._per_group(new.block_ids)
                self._plan_step(meta, state, new.num_computed_tokens + scheduled[new.req_id])
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", set())
        for i, req_id in enumerate(cached.req_ids):
            state = self._reqs.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in resumed:  # after a preemption: the request's whole new block table
                state.block_ids = self._per_group(new_ids)
            elif new_ids is not None:
                for table, more in zip(state.block_ids, new_ids):
                    table.extend(more)
            self._plan_step(meta, state, cached.num_computed_tokens[i] + scheduled[req_id])
        meta.saves.extend(self._finish_runs)
        self._finish_runs = []
        return meta

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Optional[dict]]:
        """The single-group form of request_finished_all_groups (vLLM without its hybrid KV
        cache manager)."""
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(self, request: Any, block_ids: Tuple[List[int], ...]
                                    ) -> Tuple[bool, Optional[dict]]:
        """Saves the request's full blocks not yet stored (those decoding filled), every group,
        in the next step; returns True while that save holds the blocks."""
        state = self._reqs.pop(request.request_id, None)
        self._hits.pop(request.request_id, None)
        if state is None or not self._save_decode:
            return False, None
        state.block_ids = self._per_group(block_ids)
        runs = self._save_runs(state, request.num_computed_tokens, finish=True)
        if not runs:
            return False, None
        self._finish_runs.extend(runs)
        self._holding.add(request.request_id)
        return True, None

    # --- worker side: registration ------------------------------------------------------------
    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]) -> None:
        """Takes every layer of every KV cache group; one FlatCake KvLayout per group."""
        if not kv_caches:
            raise ValueError("FlatCakeConnector.register_kv_caches: no KV cache tensors")
        by_group: List[List[str]] = [[] for _ in self._groups]
        group_of = {n: gi for gi, g in enumerate(self._groups) for n in g.layer_names}
        for name in kv_caches:
            if len(self._groups) > 1 and name not in group_of:
                raise ValueError(f"FlatCakeConnector: layer {name} is in no KV cache group of "
                                 "kv_cache_config")
            by_group[group_of.get(name, 0)].append(name)
        first_tensor = next(iter(kv_caches.values()))
        self._device = first_tensor.device
        self._staged = first_tensor.device.type != "cpu"
        self._gpu = self._open_gpu_path(first_tensor.device)
        if self._gpu is not None:
            self._staged = False
        for gi, names in enumerate(by_group):
            if names:
                self._caches[gi] = self._register_group(gi, names, kv_caches)

    def _open_gpu_path(self, device: torch.device) -> Optional[flatcake.GpuPath]:
        """The store's GPU path for CUDA caches (or the fake device, asked for), or None: then
        CUDA caches are staged through host memory. Logs which path and why."""
        fake = self._gpu_mode == "fake"
        if fake and device.type != "cpu":
            raise ValueError("FlatCakeConnector: gpu_path 'fake' takes CPU tensors")
        if not fake and (device.type != "cuda" or self._gpu_mode == "none"):
            if device.type == "cuda":
                logger.info("FlatCakeConnector: CUDA KV caches staged through host memory "
                            "(gpu_path 'none')")
            return None
        try:  # a store without one (a cluster member's client) says why
            gpu = self._store.gpu("fake" if fake else "auto")
        except flatcake.Error as e:
            logger.info("FlatCakeConnector: KV caches %s: the store has no GPU path here (%s)",
                        "read and written in place" if fake else "staged through host memory",
                        e)
            return None
        logger.info("FlatCakeConnector: loads and saves through the store's GPU path (%s)",
                    "the fake device, gpu_path 'fake'" if fake else gpu.info().get("mode"))
        return gpu

    def _register_group(self, gi: int, names: List[str], kv_caches: Dict[str, torch.Tensor]
                        ) -> "_GroupCache":
        numbers = [_layer_number(n) for n in names]
        if all(n is not None for n in numbers):
            names = [n for _, n in sorted(zip(numbers, names))]
        first = kv_caches[names[0]]
        views = []
        for name in names:
            t = kv_caches[name]
            if t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
                raise ValueError(f"FlatCakeConnector: layer {name} has KV cache {list(t.shape)} "
                                 f"{t.dtype} on {t.device}, layer {names[0]} {list(first.shape)} "
                                 f"{first.dtype} on {first.device}: FlatCake needs uniform layers"
                                 f"{f' within a KV cache group (group {gi})' if gi else ''}")
            views.append(_paged_bytes(t, self._mla, self._groups[gi].block_size))
        order = _tensor_cell_order(first)
        if order and order != self._cell_order:
            raise ValueError(
                f"FlatCakeConnector: layer {names[0]}'s KV cache puts "
                f"{'heads before tokens' if order == 'HN' else 'tokens before heads'} in a block, "
                f"but the configuration says {self._cell_order} (kv_cache_layout, or "
                f"VLLM_KV_CACHE_LAYOUT before vLLM's layout standardization): keys name the "
                f"configured order, so blocks would be read back scrambled. Set the layout the "
                f"attention backend uses")
        planes, num_blocks, slice_bytes = views[0].shape
        layout = flatcake.KvLayout(len(names), planes, slice_bytes)
        layout.validate()
        for i, name in enumerate(names):
            self._layer_index[name] = (gi, i)
        suffix = self._suffix  # (the scheduler's keys end in the group's part already)
        path = ("the store's GPU path" if self._gpu is not None else
                "staged through host memory" if self._staged else "in place")
        logger.info("FlatCakeConnector: group %d: %d layers, block %r, %s, key suffix %r, "
                    "store %s", gi, len(names), layout, path, self._group_suffix[gi] + suffix,
                    self._store.info())
        # For the in-place path: per layer (address, plane stride, block stride) in bytes.
        return _GroupCache(layout, views, torch.tensor(
            [[v.data_ptr(), v.stride(0), v.stride(1)] for v in views], dtype=torch.int64),
            suffix)

    @property
    def _layout(self) -> Optional[flatcake.KvLayout]:
        """The first group's KvLayout (the only one without a hybrid model)."""
        return self._caches[0].layout if self._caches[0] is not None else None

    def TEST_stage_through_host(self) -> None:  # noqa: N802 - a test hook
        """Moves CPU tensors through the host staging buffers as CUDA tensors are, so that the
        tests, which have no GPU, run the staging code."""
        self._staged = True

    def _paged_pointers(self, cache: "_GroupCache", block_ids: List[int]) -> List[int]:
        """slice_pointers into the paged cache: [(b * layers + l) * planes + p]."""
        blocks = torch.tensor(block_ids, dtype=torch.int64).view(-1, 1, 1)
        planes = torch.arange(cache.layout.num_planes, dtype=torch.int64).view(1, 1, -1)
        base = cache.ptr_base
        ptrs = (base[:, 0].view(1, -1, 1) + planes * base[:, 1].view(1, -1, 1) +
                blocks * base[:, 2].view(1, -1, 1))
        return ptrs.flatten().tolist()

    @staticmethod
    def _staging_pointers(lay: flatcake.KvLayout, buf: torch.Tensor, n: int) -> List[int]:
        """slice_pointers into a host buffer laid out [layer][plane][block][slice_bytes]."""
        idx = (torch.arange(lay.num_layers, dtype=torch.int64).view(1, -1, 1) * lay.num_planes +
               torch.arange(lay.num_planes, dtype=torch.int64).view(1, 1, -1)) * n + \
            torch.arange(n, dtype=torch.int64).view(-1, 1, 1)
        return (buf.data_ptr() + idx * lay.slice_bytes).flatten().tolist()

    @staticmethod
    def _staging_view(lay: flatcake.KvLayout, buf: torch.Tensor, n: int) -> torch.Tensor:
        return buf.view(lay.num_layers, lay.num_planes, n, lay.slice_bytes)

    def _cache(self, run: _BlockRun, op: str) -> "_GroupCache":
        cache = self._caches[run.group] if run.group < len(self._caches) else None
        if cache is None:
            raise RuntimeError(f"FlatCakeConnector.{op}: no KV caches registered for KV cache "
                               f"group {run.group}; vLLM calls register_kv_caches() first")
        return cache

    # --- worker side: loads -------------------------------------------------------------------
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Writes the finished requests' blocks, then starts this step's restores."""
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if not meta.loads and not meta.saves:
            return
        # (No reset of the save staging here: vLLM starts a step's loads after its forward when
        # none is synchronous, and save_kv_layer has then staged this step's blocks in it.)
        for run in meta.saves:
            if run.finish:
                self._write(run, self._gather_all(run))
                self._saved_finish.add(run.req_id)
        self._load_staging.reset()
        for run in meta.loads:
            cache = self._cache(run, "start_load_kv")
            layout = cache.layout
            keys = [k + cache.suffix for k in run.keys]
            staging = None
            if self._gpu is not None:
                ptrs = None
            elif self._staged:
                nbytes = len(keys) * layout.block_bytes
                # An asynchronous load outlives the step: a buffer of its own.
                staging = (_host_buffer(nbytes) if run.asynchronous
                           else self._load_staging.take(nbytes))
                ptrs = self._staging_pointers(layout, staging, len(keys))
            else:
                ptrs = self._paged_pointers(cache, run.block_ids)
            pending = self._async_pending if run.asynchronous else self._pending
            try:
                if ptrs is None:  # straight into the paged KV tensors, one event per layer
                    k, v = cache.planes()
                    handle = _DeviceRestore(self._gpu.restore(keys, layout, k, v,
                                                              pages=run.block_ids),
                                            self._gpu_mode == "fake")
                else:
                    handle = self._store.restore(keys, layout, ptrs, kind="slice_pointers")
            except (flatcake.Error, ValueError) as e:
                logger.warning("FlatCakeConnector: restore of %d blocks of %s failed: %s",
                               len(keys), run.req_id, e)
                handle = None
            load = _PendingLoad(run, handle, staging, failed=handle is None)
            if handle is None and not run.asynchronous:
                self._load_errors.update(run.block_ids)
                continue
            pending.append(load)

    def _copy_layer_in(self, load: _PendingLoad, layer: int) -> None:
        """CUDA path: one layer (of the run's group) of a staged restore onto the device."""
        if load.staging is None or layer in load.copied:
            return
        load.copied.add(layer)
        cache = self._caches[load.run.group]
        src = self._staging_view(cache.layout, load.staging, len(load.run.block_ids))[layer]
        ids = torch.tensor(load.run.block_ids, dtype=torch.int64, device=self._device)
        for p in range(cache.layout.num_planes):
            cache.views[layer][p].index_copy_(0, ids, src[p].to(self._device, non_blocking=True))

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Blocks until layer ``layer_name`` of every restore of this step is in place."""
        where = self._layer_index.get(layer_name)
        if where is None:
            return
        group, layer = where
        for load in self._pending:
            if load.failed or load.run.group != group:
                continue
            try:
                load.handle.wait_layer(layer)
            except flatcake.Error as e:
                logger.warning("FlatCakeConnector: restore for %s failed: %s", load.run.req_id, e)
                load.failed = True
                continue
            self._copy_layer_in(load, layer)

    def _complete(self, load: _PendingLoad) -> int:
        """Waits for a restore, copies what the CUDA path staged onto the device, and turns the
        blocks it did not deliver into load errors (one group; several report the request in
        failed_recving instead). Returns how many blocks it missed."""
        delivered = [False] * len(load.run.block_ids)
        if not load.failed:
            load.handle.wait()
            try:
                delivered = [bool(f) for f in load.handle.result.found]
            except flatcake.Error as e:
                logger.warning("FlatCakeConnector: restore for %s failed: %s", load.run.req_id, e)
        if not load.failed:  # layers no wait_for_layer_load asked for (CUDA path)
            for layer in range(self._caches[load.run.group].layout.num_layers):
                self._copy_layer_in(load, layer)
        missed = [b for b, ok in zip(load.run.block_ids, delivered) if not ok]
        if len(self._groups) == 1:
            self._load_errors.update(missed)
        self.counters["load_errors"] += len(missed)
        self.counters["blocks_loaded"] += len(delivered) - len(missed)
        self._stats.record("blocks_loaded", len(delivered) - len(missed))
        if missed:
            self._stats.record("load_errors", len(missed))
        if not load.failed and len(missed) < len(delivered):
            result = load.handle.result
            medium = "ssd" if result.bytes_from_ssd else "dram"
            self._stats.record(f"load_seconds_{medium}", time.monotonic() - load.started)
            self._stats.record("load_bytes_dram", result.bytes_from_dram)
            self._stats.record("load_bytes_ssd", result.bytes_from_ssd)
        return len(missed)

    def _finish_loads(self) -> None:
        """Completes this step's restores; blocks they did not deliver become load errors."""
        for load in self._pending:
            self._complete(load)
        if self._pending and self._staged:
            self._load_staging.fence(self._device)
        self._pending = []

    def _finished_async_loads(self) -> Set[str]:
        """The requests whose asynchronous loads (one per group) are all done, completed (their
        blocks in vLLM's cache; the undelivered ones load errors reported in the same pass, as
        vLLM asks, or with several groups the request in failed_recving)."""
        done = [load for load in self._async_pending if load.failed or load.handle.done()]
        if not done:
            return set()
        waiting = {load.run.req_id for load in self._async_pending if load not in done}
        done = [load for load in done if load.run.req_id not in waiting]
        self._async_pending = [load for load in self._async_pending if load not in done]
        for load in done:
            if self._complete(load) and len(self._groups) > 1:
                self._failed_recving.add(load.run.req_id)
        if done and self._staged:
            _sync(self._device)  # on the device before vLLM schedules the request
        return {load.run.req_id for load in done}

    def get_block_ids_with_load_errors(self) -> Set[int]:
        self._finish_loads()
        errors, self._load_errors = self._load_errors, set()
        return errors

    # --- worker side: saves -------------------------------------------------------------------
    def _gather_layer(self, run: _BlockRun, buf: torch.Tensor, layer: int) -> None:
        """CUDA path: copies one layer of the run's blocks into its host buffer."""
        cache = self._caches[run.group]
        dst = self._staging_view(cache.layout, buf, len(run.block_ids))[layer]
        ids = torch.tensor(run.block_ids, dtype=torch.int64, device=self._device)
        for p in range(cache.layout.num_planes):
            dst[p].copy_(cache.views[layer][p].index_select(0, ids), non_blocking=True)

    def _gather_all(self, run: _BlockRun) -> List[int]:
        """Pointers to the run's bytes: the paged cache itself, or (CUDA) a filled host copy."""
        cache = self._cache(run, "start_load_kv")
        if self._gpu is not None:
            return None  # _write gathers from device memory through the GPU path
        if not self._staged:
            return self._paged_pointers(cache, run.block_ids)
        buf = _host_buffer(len(run.block_ids) * cache.layout.block_bytes)
        for layer in range(cache.layout.num_layers):
            self._gather_layer(run, buf, layer)
        _sync(self._device)
        return self._staging_pointers(cache.layout, buf, len(run.block_ids))

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        """CUDA path: copies this layer of the step's saves (of its group) out as soon as
        attention wrote it. In place (CPU) there is nothing to do until wait_for_save."""
        where = self._layer_index.get(layer_name)
        if not self._staged or where is None or not self.has_connector_metadata():
            return
        group, layer = where
        for i, run in enumerate(self._get_connector_metadata().saves):
            if run.finish or run.group != group:
                continue
            if i not in self._save_buffers:
                if not self._save_buffers:
                    self._save_staging.reset()
                nbytes = len(run.block_ids) * self._caches[group].layout.block_bytes
                self._save_buffers[i] = (self._save_staging.take(nbytes), set())
            buf, done = self._save_buffers[i]
            self._gather_layer(run, buf, layer)
            done.add(layer)

    def wait_for_save(self) -> None:
        """Writes this step's prompt blocks (the forward has computed them all by now)."""
        if not self.has_connector_metadata():
            return
        self._finish_loads()
        runs = [(i, r) for i, r in enumerate(self._get_connector_metadata().saves)
                if not r.finish]
        if not runs:
            return
        for _, run in runs:
            self._cache(run, "wait_for_save")
        if self._gpu is not None:
            _sync(self._device)  # attention's writes of the step before the GPU path reads them
            for _, run in runs:
                self._write(run, None)
            return
        if not self._staged:
            for _, run in runs:
                self._write(run, self._paged_pointers(self._caches[run.group], run.block_ids))
            return
        for i, run in runs:  # layers whose save_kv_layer did not come (not through attention)
            layout = self._caches[run.group].layout
            buf, done = self._save_buffers.setdefault(
                i, (self._save_staging.take(len(run.block_ids) * layout.block_bytes), set()))
            for layer in set(range(layout.num_layers)) - done:
                self._gather_layer(run, buf, layer)
        _sync(self._device)
        for i, run in runs:
            self._write(run, self._staging_pointers(self._caches[run.group].layout,
                                                    self._save_buffers[i][0],
                                                    len(run.block_ids)))
        self._save_buffers = {}

    def _write(self, run: _BlockRun, ptrs: Optional[List[int]]) -> None:
        """One put, from ``ptrs`` (host memory), or with None from the paged KV tensors through
        the store's GPU path; a failure is logged (a dropped save is a later miss, not an error),
        and the request's later blocks are not written: past the gap no lookup, which counts
        leading blocks, could ever reach them."""
        cache = self._caches[run.group]
        keys = [k + cache.suffix for k in run.keys]
        if run.req_id in self._broken_chains:
            self.counters["saves_skipped"] += len(keys)
            return
        tail = run.prefix_tail + cache.suffix if run.prefix_tail is not None else None
        try:
            if ptrs is None:  # the GPU path's put takes the chain (prefix_tail), no other hints
                k, v = cache.planes()
                put = self._gpu.put(keys, cache.layout, k, v, pages=run.block_ids,
                                    prefix_tail=tail, force_medium=self._force_medium)
            else:
                put = self._store.put(keys, cache.layout, ptrs, kind="slice_pointers",
                                      session=run.session, prefix_tail=tail, turn=run.turn,
                                      context_tokens=run.context_tokens,
                                      force_medium=self._force_medium)
            self.counters["blocks_saved"] += put.written
            self._stats.record("blocks_saved", put.written)
            if put.written and run.hashes:
                # group_idx only for a hybrid model (vLLMs before it have no such field).
                group = {"group_idx": run.group} if len(self._groups) > 1 else {}
                self._kv_events.append(BlockStored(
                    block_hashes=list(run.hashes), parent_block_hash=run.parent_hash,
                    token_ids=list(run.token_ids), block_size=self._groups[run.group].block_size,
                    lora_id=None, medium=_EVENT_MEDIUM.get(put.medium, put.medium),
                    lora_name=None, **group))
        except (flatcake.Error, ValueError) as e:
            self.counters["save_errors"] += len(keys)
            self._stats.record("save_errors", len(keys))
            self._broken_chains.add(run.req_id)
            logger.warning("FlatCakeConnector: saving %d blocks of %s failed: %s; its later "
                           "blocks are not saved", len(keys), run.req_id, e)

    def get_finished(self, finished_req_ids: Set[str]
                     ) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """Requests whose end-of-request save is written (vLLM may now free their blocks), and
        requests whose asynchronous load is done (every worker reports each once)."""
        for req_id in finished_req_ids:
            self._finished_ids[req_id] = None
            self._broken_chains.discard(req_id)
        while len(self._finished_ids) > _FINISHED_IDS_KEPT:
            self._finished_ids.popitem(last=False)
        done = {r for r in self._saved_finish if r in self._finished_ids}
        for req_id in done:
            self._saved_finish.discard(req_id)
            del self._finished_ids[req_id]
        loaded = self._finished_async_loads()
        return (done or None), (loaded or None)

    def get_transfer_results(self, finished_req_ids: Set[str]) -> Any:
        """get_finished's sets, and with several KV cache groups the asynchronous loads that
        missed blocks in failed_recving (vLLM recomputes such a request from its start; it
        refuses block-level errors for a hybrid model)."""
        results = super().get_transfer_results(finished_req_ids)
        if self._failed_recving:
            results.failed_recving = set(self._failed_recving)
            self._failed_recving = set()
        return results

    # --- statistics (both sides) ----------------------------------------------------------------
    def get_kv_connector_stats(self) -> Optional[FlatCakeConnectorStats]:
        """This side's statistics since the last call (vLLM aggregates the workers' and the
        scheduler's every step), or None when nothing happened."""
        if self._stats.is_empty():
            return None
        stats, self._stats = self._stats, FlatCakeConnectorStats()
        return stats

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None
                                 ) -> FlatCakeConnectorStats:
        """The statistics object from its ``to_dict()`` (vLLM's logger and metrics process), with
        lists of its own: aggregating it must not grow the dict vLLM also hands to Prometheus."""
        return FlatCakeConnectorStats(data={k: list(v) for k, v in (data or {}).items()})

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict, labelnames: List[str],
                           per_engine_labelvalues: Dict[int, List[object]]
                           ) -> FlatCakePromMetrics:
        return FlatCakePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        """Finishes the restores in flight and returns the store (the last user closes it)."""
        if self._pending:
            self._finish_loads()
        for load in self._async_pending:
            if not load.failed:
                load.handle.wait()
        self._async_pending = []
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None
        if self._fingerprint is not None:
            _shared_stores.release(self._fingerprint)
            self._fingerprint = None
