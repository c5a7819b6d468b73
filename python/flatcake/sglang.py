"""FlatCake as SGLang's HiCache L3 storage backend (``--hicache-storage-backend dynamic``).

Start SGLang with:

    --enable-hierarchical-cache --hicache-mem-layout page_first_direct \\
    --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "flatcake",
        "module_path": "flatcake.sglang", "class_name": "FlatCakeStorage", "interface_v1": 1,
        "ssd_dirs": ["/nvme0/flatcake"], "ssd_bytes": "512GiB", "dram_bytes": "32GiB"}'

(docs/sglang.md lists every option.) SGLang builds the backend as
``FlatCakeStorage(storage_config, kwargs)``, calls ``register_mem_pool_host(host_pool)``, and with
``interface_v1`` set moves pages through ``batch_get_v1``/``batch_set_v1``: FlatCake reads and
writes the host pool in place through the pool's ``get_page_buffer_meta`` pointers.

Mapping (include/flatcake/layout.h): one SGLang page of one worker is one FlatCake block of
KvLayout(num_layers=layer_num, num_planes=2 for MHA (K, V) or 1 for MLA, slice_bytes=page_size x
bytes per token per layer of one plane).
  page_first, page_first_direct -> plane_pointers: one pointer per (page, plane), covering all
      layers of that plane. In page_first_direct the bytes are layer-major; in page_first they are
      token-major, so the store's "layer" slices are equal byte ranges of the page, not model
      layers (round trips are exact; layer-by-layer delivery is meaningful only for
      page_first_direct).
  layer_first -> slice_pointers: one pointer per (page, layer, plane).
The copy-based get/set interface moves flat pages (``get_data_page``), which in every layout are
the plane-major concatenation of the same slices, so both interfaces read each other's data.

Keys: SGLang names pages by 64-hex chained hashes. A block's store key is the page hash, the
page's format ``@<order><8 hex>`` and the worker suffix SGLang's own backends use. The format
names what the bytes mean: the order is ``t`` for page_first (token-major) and ``l`` for
page_first_direct and layer_first (layer-major, the same bytes in the same order); the hex digits
hash the model, KV dtype, page size, block shape, MLA or MHA and (MHA) the TP size and head
split. A page stored under another format is a miss, except one of the other order with the same
digits (a server restarted with another --hicache-mem-layout): the same bytes permuted, which a
read converts into this layout's order. The worker suffix: ``<hash>_<tp_rank>`` for MHA (each rank holds different
heads), ``<hash>`` for MLA (the latent cache is identical on every rank, so ranks share it), plus
``_pp<rank>`` under pipeline parallelism and ``_cp<rank>`` under attention context parallelism,
and an optional ``namespace`` prefix.

Hybrid models (v2 interface): SGLang's HybridCacheController registers a HostPoolGroup (its
anchor pool holds the KV pages, moved by batch_get_v1/batch_set_v1 as above; a logical anchor
with no KV bytes, as DeepSeek-V4's, stores nothing) and then each named pool with
``register_mem_host_pool_v2``. An auxiliary pool's page (Mamba states, SWA window pages, DSA
indexer, DeepSeek-V4 compressed pools, a draft model's KV) is the buffers its
get_page_buffer_meta gives for one page; it is stored as one block under
``<namespace><hash>:<pool><suffix>`` (the rank suffix, or only the ``_pp``/``_cp`` part for pools
that are the same on every TP rank), in place when the buffers are of one size and gathered
into one slice when they differ. ``batch_exists_v2`` applies the hit policies (all_pages,
trailing_pages) to shrink the KV prefix; ``batch_get_v2`` / ``batch_set_v2`` report per pool.

Placement (paper Table 2, from what the storage interface carries; ``_placed_runs``): pages
that several requests looked up before anyone stored them are a shared prefix (DRAM); with
``prefix_keys`` (``"hicache_storage_pass_prefix_keys": true`` in the extra config) the last
prefix key becomes the write's ``prefix_tail`` and the prefix length its ``context_tokens``, so a
request's pages join its session's scope, a write continuing a chain's end is a later turn (short
ones DRAM), and long contexts go to SSD laid out flat; anything else is a first turn (SSD).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch

import flatcake
from flatcake import _shared_stores

try:  # SGLang present: subclass the real interface so its factory's issubclass check passes.
    from sglang.srt.mem_cache.hicache_storage import (  # type: ignore
        HiCacheStorage,
        HiCacheStorageConfig,
        HiCacheStorageExtraInfo,
    )
except ImportError:  # pragma: no cover - exercised when SGLang is absent (the test machine)
    from ._hicache_iface import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

try:  # the v2 interface of hybrid models (SGLang 2026)
    from sglang.srt.mem_cache.hicache_storage import (  # type: ignore
        PoolHitPolicy,
        PoolName,
        PoolTransfer,
        PoolTransferResult,
    )
except ImportError:  # pragma: no cover - SGLang absent or older
    from ._hicache_iface import PoolHitPolicy, PoolName, PoolTransfer, PoolTransferResult

# SGLang's log_storage_metrics asserts that get_stats() returns its own StorageMetrics class, which
# moved from sglang.srt.metrics.collector to sglang.srt.observability.metrics_collector in
# February 2026: return whichever this SGLang has.
try:
    from sglang.srt.observability.metrics_collector import StorageMetrics  # type: ignore
except ImportError:
    try:
        from sglang.srt.metrics.collector import StorageMetrics  # type: ignore  # before 2026-02
    except ImportError:  # pragma: no cover - SGLang absent
        from ._hicache_iface import StorageMetrics

# SGLang's key suffix of draft-model pages (PoolName.DRAFT; `{hash}.draft`).
DRAFT_SUFFIX = ".draft"

# Worker directory slots a process tries before giving up (each held by another live store).
MAX_WORKER_SLOTS = 256

# Auxiliary pools whose pages are the same on every TP rank (an MLA model's DSA indexer and
# DeepSeek-V4 compressed pools), so ranks share one copy, as the MLA KV pages do; every other
# pool (Mamba states, MHA SWA windows) is per rank.
_RANK_SHARED_POOLS = frozenset((
    "indexer", "deepseek_v4_c4", "deepseek_v4_c4_indexer", "deepseek_v4_c128",
    "deepseek_v4_c4_state", "deepseek_v4_c4_indexer_state", "deepseek_v4_c128_state"))

# Auxiliary-pool pages are grouped into store sessions of about this many bytes, in write order:
# a few large scopes per pool rather than one per call, reclaimed oldest first like any other.
SIDE_SESSION_BYTES = 64 << 20

# Keys remembered for placement (pages looked up but not stored; ends of chains written): the
# newest this many of each. A burst of requests sharing a prompt looks it up within seconds.
SIGNAL_KEYS = 1 << 16

# Per-call figures kept between two get_stats() calls, per list; the oldest go first. SGLang asks
# once per scheduler step, so this only bounds a caller that records but never asks.
METRICS_MAX_ENTRIES = 1024

__all__ = [
    "ADAPTER_OPTIONS",
    "FlatCakeStorage",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "PoolHitPolicy",
    "PoolName",
    "PoolTransfer",
    "PoolTransferResult",
    "SUPPORTED_LAYOUTS",
]

logger = logging.getLogger(__name__)

SUPPORTED_LAYOUTS = ("page_first", "page_first_direct", "layer_first")

# Keys SGLang's dynamic loader reads from the same extra_config; FlatCake ignores them.
# (SGLang's UnifiedRadixCache leaves prefetch_timeout_max in it, unlike HiRadixCache.)
_LOADER_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size",
                "prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token",
                "prefetch_timeout_max", "hicache_storage_pass_prefix_keys")

# Options of this adapter (everything else in extra_config is a StoreOptions field).
ADAPTER_OPTIONS: Dict[str, str] = {
    "namespace": "string prefixed to every key, to keep several models apart in one store",
    "per_worker_subdir": "true (default): each worker process stores under <ssd_dir>/<worker>, "
                         "the next free slot when another live worker holds it",
    "force_medium": "'dram' or 'ssd': bypass placement (testing, benchmarking)",
    "daemon": "address of the node's `flatcake serve` (unix:///path or a socket path): every "
              "worker of the node shares the daemon's store instead of opening its own; store "
              "options then belong to the daemon and are refused here",
    "tenant": "with daemon: the tenant this engine's keys live under (default: the model name "
              "with characters outside [A-Za-z0-9._-] replaced by '_')",
}


def _cfg(config: Any, name: str, default: Any) -> Any:
    # Older SGLang releases lack some fields (pp, cp, dp); they mean "not used".
    value = getattr(config, name, default)
    return default if value is None else value


def _enum_value(value: Any) -> str:
    """'mamba' for PoolName.MAMBA or 'mamba'; the same for hit policies."""
    return str(getattr(value, "value", value))


def _count(indices: Any) -> int:
    if indices is None:
        return 0
    return int(indices.numel()) if hasattr(indices, "numel") else len(indices)


def _flat_meta(meta: Any) -> Tuple[List[int], List[int]]:
    """(pointers, sizes) of a get_page_buffer_meta answer, nested lists (pools with several
    buffers per object) flattened and empty buffers dropped; None (a pool with no bytes) -> []."""
    if meta is None:
        return [], []
    ptrs, sizes = meta
    out_p: List[int] = []
    out_s: List[int] = []
    for p, n in zip(ptrs, sizes):
        pairs = zip(p, n) if isinstance(p, (list, tuple)) else ((p, n),)
        for pp, nn in pairs:
            if int(nn) > 0:
                out_p.append(int(pp))
                out_s.append(int(nn))
    if len(ptrs) != len(sizes):
        raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} pointers but {len(sizes)} sizes")
    return out_p, out_s


class _SidePool:
    """An auxiliary host pool of a hybrid model (v2 interface) and how its pages are stored.

    A page is what the pool's get_page_buffer_meta gives for page_size slots: one or more
    buffers. Pages whose buffers are of one size are stored in place, one block per page with one
    slice per buffer (layout (1 x n x size), plane pointers; or (n x 1 x size), slice pointers,
    past 16 buffers). Pages of unequal buffers (Mamba: a temporal state and conv states) are
    gathered into one contiguous slice per page and scattered back after a restore. A pool whose
    pages hold no bytes (a logical pool) stores nothing and always succeeds.
    """

    def __init__(self, name: str, pool: Any, page_size: int, sizes: List[int], shared: bool):
        self.name = name
        self.pool = pool
        self.page_size = page_size
        self.sizes = sizes
        self.shared = shared
        self.page_bytes = sum(sizes)
        self.gather = False
        self.layout: Optional[flatcake.KvLayout] = None
        self.kind = "block_contiguous"
        self.session_serial = 0
        self.session_bytes = 0
        n = len(sizes)
        if n == 0:
            return
        if all(x == sizes[0] for x in sizes):
            if n <= 16:
                self.layout, self.kind = flatcake.KvLayout(1, n, sizes[0]), "plane_pointers"
            elif n <= 4096:
                self.layout, self.kind = flatcake.KvLayout(n, 1, sizes[0]), "slice_pointers"
        if self.layout is None:
            self.layout, self.gather = flatcake.KvLayout(1, 1, self.page_bytes), True
        self.layout.validate()

    def describe(self) -> str:
        if self.layout is None:
            return f"{self.name}: no bytes (logical)"
        how = "gathered" if self.gather else self.kind
        return f"{self.name}: page {self.page_bytes} B in {len(self.sizes)} buffers, {how}"

    def pointers(self, host_indices: Any, n: int) -> List[int]:
        """The buffers of n pages, checked against the shape seen at registration."""
        ptrs, sizes = _flat_meta(self.pool.get_page_buffer_meta(host_indices))
        if len(ptrs) != n * len(self.sizes) or sizes != self.sizes * n:
            raise ValueError(f"pool '{self.name}' gave {len(ptrs)} buffers for {n} pages; "
                             f"registered pages have {len(self.sizes)} of {self.sizes} bytes")
        return ptrs

    def gather_into(self, base: int, ptrs: List[int]) -> None:
        per = len(self.sizes)
        for i in range(0, len(ptrs), per):
            dst = base + (i // per) * self.page_bytes
            for p, size in zip(ptrs[i:i + per], self.sizes):
                ctypes.memmove(dst, p, size)
                dst += size

    def scatter_from(self, base: int, ptrs: List[int], found: List[bool]) -> None:
        per = len(self.sizes)
        for page, ok in enumerate(found):
            if not ok:
                continue
            src = base + page * self.page_bytes
            for p, size in zip(ptrs[page * per:(page + 1) * per], self.sizes):
                ctypes.memmove(p, src, size)
                src += size

    def next_session(self, nbytes: int) -> str:
        """The store session of the next write: pages in write order, SIDE_SESSION_BYTES each."""
        if self.session_bytes >= SIDE_SESSION_BYTES:
            self.session_serial += 1
            self.session_bytes = 0
        self.session_bytes += nbytes
        return f"sglang-{self.name}-{self.session_serial}"


class FlatCakeStorage(HiCacheStorage):
    """SGLang HiCache storage backed by a FlatCake store. Thread-safe: SGLang's prefetch, I/O and
    backup threads call it concurrently; the store releases the GIL during copies and I/O."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        if storage_config is None:
            raise ValueError("FlatCakeStorage needs SGLang's HiCacheStorageConfig")
        self.storage_config = storage_config
        self.mem_pool_host = None
        self.tp_rank = int(_cfg(storage_config, "tp_rank", 0))
        self.tp_size = int(_cfg(storage_config, "tp_size", 1))
        self.pp_rank = int(_cfg(storage_config, "pp_rank", 0))
        self.pp_size = int(_cfg(storage_config, "pp_size", 1))
        self.cp_rank = int(_cfg(storage_config, "attn_cp_rank", 0))
        self.cp_size = int(_cfg(storage_config, "attn_cp_size", 1))
        self.is_mla = bool(_cfg(storage_config, "is_mla_model", False))

        extra = dict(_cfg(storage_config, "extra_config", {}) or {})
        for key in _LOADER_KEYS:
            extra.pop(key, None)
        self.namespace = str(extra.pop("namespace", "") or "")
        per_worker = extra.pop("per_worker_subdir", True)
        if not isinstance(per_worker, bool):
            raise TypeError("extra_config 'per_worker_subdir' must be true or false")
        self.per_worker_subdir = per_worker
        self.daemon = extra.pop("daemon", None)
        if self.daemon is not None and (not isinstance(self.daemon, str) or not self.daemon):
            raise TypeError("extra_config 'daemon' must be the daemon's address "
                            "(unix:///path/to/socket)")
        tenant = extra.pop("tenant", None)
        if tenant is not None and self.daemon is None:
            raise ValueError("extra_config 'tenant' needs 'daemon' (an embedded store has no "
                             "tenants)")
        if tenant is None:
            tenant = _shared_stores.tenant_name(str(_cfg(storage_config, "model_name", "") or ""))
        self.tenant = str(tenant)
        self.force_medium = extra.pop("force_medium", None)
        if self.force_medium not in (None, "dram", "ssd"):
            raise ValueError(f"extra_config 'force_medium' must be 'dram' or 'ssd', "
                             f"got {self.force_medium!r}")
        if self.daemon is not None and extra:
            raise ValueError(f"FlatCakeStorage: with 'daemon', store options belong to the "
                             f"daemon's configuration (flatcake serve --config), not here: "
                             f"{', '.join(sorted(extra))}")
        try:
            # Validates names, types and ranges now, so a typo fails at startup; the store itself
            # opens in register_mem_pool_host, once the page size is known.
            self._store_config = flatcake.normalize_config(extra)
        except ValueError as e:
            raise ValueError(f"FlatCakeStorage: bad --hicache-storage-backend-extra-config: {e}; "
                             f"adapter options: {', '.join(ADAPTER_OPTIONS)}") from e
        self._user_set = set(extra)

        # Context-parallel ranks each hold their own slice of every page, MLA included, so the
        # CP rank is always part of the key (shared keys would keep one rank's slice for all).
        shared = f"_pp{self.pp_rank}" if self.pp_size > 1 else ""
        if self.cp_size > 1:
            shared += f"_cp{self.cp_rank}"
        self._shared_suffix = shared  # pages identical on every TP rank
        self._rank_suffix = f"_{self.tp_rank}{shared}"  # pages of this TP rank's heads
        self._key_suffix = shared if self.is_mla else self._rank_suffix

        self._store: Optional[flatcake.Store] = None
        self._fingerprint: Optional[str] = None
        self._kv_pool: Any = None  # the host pool of the KV pages (a HostPoolGroup's anchor)
        self._logical_kv = False  # the KV anchor holds no bytes (DeepSeek-V4): nothing to store
        self._side_pools: Dict[str, _SidePool] = {}  # v2 auxiliary pools by name
        self._side_lock = threading.Lock()
        self._layout: Optional[flatcake.KvLayout] = None
        self._kind: Optional[str] = None
        self._order = "l"  # the host layout's byte order (_set_format)
        self._format = ""  # in every key; set at register_mem_pool_host
        self._other_format: Optional[str] = None  # the same bytes in the other order
        self._page_size = 0
        self._pool_extent: Tuple[int, int] = (0, 0)
        # Placement signals (_placed_runs): lookups of pages not yet stored, and chain ends.
        self._signals_lock = threading.Lock()
        self._looked_up: "OrderedDict[str, int]" = OrderedDict()
        self._chain_tails: "OrderedDict[str, None]" = OrderedDict()
        self._metrics_enabled = bool(_cfg(storage_config, "enable_storage_metrics", False))
        self._metrics_lock = threading.Lock()
        self._metrics = StorageMetrics()

    # --- setup ----------------------------------------------------------------------------------
    def _worker_tag(self) -> str:
        tag = f"tp{self.tp_rank}"
        if self.pp_size > 1:
            tag += f"_pp{self.pp_rank}"
        if self.cp_size > 1:
            tag += f"_cp{self.cp_rank}"
        return tag

    def _worker_dirs(self, dirs: List[str], workers: int, slot: int) -> List[str]:
        """The pool directories of worker slot `slot`: <dir>/<worker tag> with several workers,
        <dir> alone with one; slot k > 0 appends ``_w<k>`` (or uses ``w<k>``)."""
        base = self._worker_tag() if workers > 1 else ""
        if slot > 0:
            base = f"{base}_w{slot}" if base else f"w{slot}"
        out = []
        for d in dirs:
            if not os.path.isdir(d):
                raise ValueError(f"FlatCakeStorage: ssd_dirs entry {d!r} is not a directory")
            sub = os.path.join(d, base) if base else d
            os.makedirs(sub, mode=0o700, exist_ok=True)  # the pool holds prompts: ours only
            out.append(sub)
        return out

    def _open_store(self, page_size: int) -> None:
        if self.daemon is not None:
            # The node's daemon owns the store: every worker process shares it, so an MLA
            # model's ranks 1..N find the pages rank 0 backed up.
            self._acquire(json.dumps({"daemon": self.daemon, "tenant": self.tenant}),
                          lambda: flatcake.connect(self.daemon, tenant=self.tenant))
            return
        config = dict(self._store_config)
        if "tokens_per_block" not in self._user_set:
            config["tokens_per_block"] = page_size  # one block is one SGLang page
        workers = self.tp_size * self.pp_size * self.cp_size

        def open_fn() -> flatcake.Store:
            cfg = dict(config)
            if not (cfg.get("ssd_dirs") and self.per_worker_subdir):
                return flatcake.open(cfg)
            # Worker processes cannot share pool files; each gets its own directories. SGLang's
            # storage config does not tell DP-attention workers apart (it has no dp rank: each DP
            # worker gets the same one), so a worker that finds its directories held by another
            # live store takes the next free slot rather than failing to start.
            busy = None
            for slot in range(MAX_WORKER_SLOTS):
                cfg["ssd_dirs"] = self._worker_dirs(list(config["ssd_dirs"]), workers, slot)
                try:
                    store = flatcake.open(cfg)
                except flatcake.Error as e:
                    if e.code != "Busy":
                        raise
                    busy = e
                    continue
                if slot > 0:
                    logger.info("FlatCake: worker %s uses %s (slot %d; the earlier ones are held "
                                "by other live workers)", self._worker_tag(), cfg["ssd_dirs"],
                                slot)
                return store
            raise busy

        self._acquire(json.dumps(config, sort_keys=True), open_fn)

    def _acquire(self, fingerprint: str, open_fn) -> None:
        self._store = _shared_stores.acquire(fingerprint, open_fn)
        self._fingerprint = fingerprint

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Checks the host pool, derives the block layout and opens (or joins) the store.

        A hybrid model's HostPoolGroup is accepted: its anchor entry's pool holds the KV pages
        (host indices are the anchor's), and its other pools arrive through
        register_mem_host_pool_v2. A logical anchor (no KV bytes, as DeepSeek-V4's) stores
        nothing for the KV pages; their auxiliary pools carry the data."""
        if mem_pool_host is None:
            raise ValueError("FlatCakeStorage.register_mem_pool_host: the host pool is None")
        anchor = getattr(mem_pool_host, "anchor_entry", None)
        kv_pool = anchor.host_pool if anchor is not None else mem_pool_host
        if not hasattr(kv_pool, "page_size"):
            raise ValueError(f"FlatCakeStorage: host pool {type(kv_pool).__name__} lacks "
                             "'page_size'")
        page_size = int(kv_pool.page_size)
        if getattr(kv_pool, "kv_buffer", True) is None or getattr(kv_pool, "layer_num", 1) == 0:
            super().register_mem_pool_host(mem_pool_host)
            self._set_format(kv_pool, page_size, "logical", None)
            self._kv_pool, self._logical_kv, self._page_size = kv_pool, True, page_size
            if self._store is None:
                self._open_store(page_size)
            logger.info("FlatCake HiCache backend: logical KV anchor %s (page_size %d): KV pages "
                        "hold no bytes; store=%s", type(kv_pool).__name__, page_size,
                        self._store.info())
            return
        layout_name = getattr(kv_pool, "layout", None)
        if layout_name not in SUPPORTED_LAYOUTS:
            raise ValueError(f"FlatCakeStorage: unsupported host memory layout {layout_name!r}; "
                             f"use --hicache-mem-layout {' or '.join(SUPPORTED_LAYOUTS)}")
        for attr in ("layer_num", "get_page_buffer_meta"):
            if not hasattr(kv_pool, attr):
                raise ValueError(f"FlatCakeStorage: host pool {type(kv_pool).__name__} "
                                 f"lacks '{attr}'")
        layers = int(kv_pool.layer_num)
        planes = 1 if self.is_mla else 2
        ptrs, sizes = kv_pool.get_page_buffer_meta(torch.arange(page_size, dtype=torch.int64))
        ptrs, sizes = list(ptrs), list(sizes)
        model = "MLA" if self.is_mla else "MHA"
        if layout_name == "layer_first":
            kind, want, slice_bytes = "slice_pointers", layers * planes, sizes[0] if sizes else 0
        else:
            kind, want = "plane_pointers", planes
            slice_bytes = sizes[0] // layers if sizes and sizes[0] % layers == 0 else 0
        if len(ptrs) != want or len(sizes) != want:
            raise ValueError(f"FlatCakeStorage: the {layout_name} host pool gives {len(ptrs)} "
                             f"buffers per page; an {model} pool with {layers} layers should give "
                             f"{want} (is_mla_model={self.is_mla})")
        if slice_bytes <= 0 or any(s != sizes[0] for s in sizes):
            raise ValueError(f"FlatCakeStorage: host pool page buffers have sizes {sorted(set(sizes))}"
                             f"; FlatCake needs equal planes that split evenly into {layers} layers")
        layout = flatcake.KvLayout(layers, planes, slice_bytes)
        layout.validate()
        super().register_mem_pool_host(mem_pool_host)
        self._set_format(kv_pool, page_size, layout_name, layout)
        self._kv_pool, self._logical_kv = kv_pool, False
        self._layout, self._kind, self._page_size = layout, kind, page_size
        self._pool_extent = self._host_extent(kv_pool)
        if self._store is None:
            self._open_store(page_size)
        logger.info("FlatCake HiCache backend: layout=%s block=%r kind=%s format=%s "
                    "key_suffix=%r store=%s", layout_name, layout, kind, self._format,
                    self._key_suffix, self._store.info())

    def _set_format(self, pool: Any, page_size: int, layout_name: str,
                    layout: Optional[Any]) -> None:
        """What a page's bytes mean, in every key: ``@<order><8 hex>``. The hex digits name the
        model, the KV dtype, the page size, the block shape (layers, planes, bytes per layer:
        heads and head size), MLA or MHA and, for MHA, the TP size and head split that chose
        this rank's heads. The order is "t" for page_first (a plane's bytes token-major) and
        "l" for page_first_direct and layer_first (layer-major: the same bytes in the same
        order). A page of another format is a miss, except one of the other order and the same
        hex digits: the same bytes permuted, which reads convert (_get_reordered)."""
        device_pool = getattr(pool, "device_pool", None)
        dtype = getattr(device_pool, "dtype", None) or getattr(pool, "dtype", None)
        split = bool(_cfg(self.storage_config, "should_split_heads", False))
        fields = [str(_cfg(self.storage_config, "model_name", "") or ""), self.is_mla, str(dtype),
                  page_size, repr(layout), 1 if self.is_mla else self.tp_size, split]
        digest = hashlib.sha1(json.dumps(fields).encode()).hexdigest()[:8]
        self._order = "t" if layout_name == "page_first" else "l"
        self._format = f"{self._order}{digest}"
        self._other_format = (None if layout is None else
                              f"{'l' if self._order == 't' else 't'}{digest}")

    @staticmethod
    def _host_extent(pool: Any) -> Tuple[int, int]:
        """[lo, hi) spanning the pool's buffers, to reject pointers outside them."""
        tensors: List[Any] = []
        for name in ("kv_buffer", "k_buffer", "v_buffer"):
            obj = getattr(pool, name, None)
            if isinstance(obj, torch.Tensor):
                tensors.append(obj)
            elif isinstance(obj, (list, tuple)):
                tensors.extend(t for t in obj if isinstance(t, torch.Tensor))
        if not tensors:
            return (0, 0)  # unknown: bounds are not checked
        lo = min(t.data_ptr() for t in tensors)
        hi = max(t.data_ptr() + t.numel() * t.element_size() for t in tensors)
        return (lo, hi)

    # --- helpers --------------------------------------------------------------------------------
    def _require_pool(self, op: str) -> None:
        if self.mem_pool_host is None or self._store is None or (
                self._layout is None and not self._logical_kv):
            raise RuntimeError(f"FlatCakeStorage.{op}: no host pool registered; SGLang calls "
                               "register_mem_pool_host() first")

    def _store_key(self, page_hash: str, fmt: Optional[str] = None) -> str:
        if not isinstance(page_hash, str):
            raise TypeError(f"FlatCakeStorage: page keys must be str, got {type(page_hash).__name__}")
        return f"{self.namespace}{page_hash}@{fmt or self._format}{self._key_suffix}"

    def _placed_runs(self, store_keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo]) -> List[Tuple[int, int, dict]]:
        """The puts of a batch of pages (their store keys), [(first, end, hints)], with the
        placement signals the HiCache storage interface carries (docs/sglang.md, "Where pages
        go"):

        - leading pages that two or more requests looked up (batch_exists) before they were
          stored are a prefix those requests share (a system prompt in a burst): the store's
          shared prefix, DRAM (paper Table 2);
        - the rest of a batch that continues a chain this backend wrote to its end (the last
          prefix key ended an earlier write: the next turn of a conversation) is a later turn,
          its new tokens standing in for the prior reply's length: short turns go to DRAM, long
          ones and long contexts (l_agent_tokens) to SSD;
        - anything else (a chain head, a branch off a shared prefix: a request of its own) is a
          first turn: SSD.
        Without prefix keys (``hicache_storage_pass_prefix_keys`` off) only the first rule
        applies: chains are unknown."""
        ps = self._page_size
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        tail = self._store_key(prefix[-1]) if prefix else None
        context = len(prefix) * ps if prefix else 0
        n = len(store_keys)
        with self._signals_lock:
            shared = 0
            while shared < n and self._looked_up.get(store_keys[shared], 0) >= 2:
                shared += 1
            continues = tail is not None and tail in self._chain_tails
            for k in store_keys:
                self._looked_up.pop(k, None)
            if tail is not None:
                self._chain_tails.pop(tail, None)
            self._chain_tails[store_keys[-1]] = None
            while len(self._chain_tails) > SIGNAL_KEYS:
                self._chain_tails.popitem(last=False)
        base = {"force_medium": self.force_medium}
        runs = []
        if shared:
            runs.append((0, shared, dict(base, shared_prefix=True, prefix_tail=tail,
                                         context_tokens=context)))
            tail, context = store_keys[shared - 1], context + shared * ps
        if shared < n:
            rest = (n - shared) * ps
            turn = {"turn": 2, "prior_reply_tokens": rest} if continues else {"turn": 1}
            runs.append((shared, n, dict(base, prefix_tail=tail, context_tokens=context,
                                         **turn)))
        return runs

    def _note_lookups(self, store_keys: List[str]) -> None:
        """Counts a lookup of pages not stored (batch_exists's misses): a page several requests
        looked for before anyone stored it is shared (_placed_runs)."""
        with self._signals_lock:
            for k in store_keys:
                self._looked_up[k] = self._looked_up.get(k, 0) + 1
                self._looked_up.move_to_end(k)
            while len(self._looked_up) > SIGNAL_KEYS:
                self._looked_up.popitem(last=False)

    def _page_buffers(self, keys: List[str], host_indices: Any) -> List[int]:
        """The pool's pointers for the pages at host_indices, checked against the layout."""
        n = len(keys)
        count = int(host_indices.numel()) if hasattr(host_indices, "numel") else len(host_indices)
        if count != n * self._page_size:
            raise ValueError(f"FlatCakeStorage: {n} keys need {n * self._page_size} host indices "
                             f"(page_size {self._page_size}), got {count}")
        ptrs, sizes = self._kv_pool.get_page_buffer_meta(host_indices)
        ptrs = [int(p) for p in ptrs]
        want = flatcake._core.pointers_per_block(self._kind, self._layout) * n
        if len(ptrs) != want:
            raise ValueError(f"FlatCakeStorage: host pool returned {len(ptrs)} buffers for {n} "
                             f"pages, expected {want}")
        size = (self._layout.slice_bytes if self._kind == "slice_pointers"
                else self._layout.num_layers * self._layout.slice_bytes)
        if any(int(s) != size for s in sizes):
            raise ValueError(f"FlatCakeStorage: host pool buffer sizes {sorted(set(map(int, sizes)))}"
                             f" differ from the registered {size} bytes")
        lo, hi = self._pool_extent
        if hi > lo and ptrs and (min(ptrs) < lo or max(ptrs) + size > hi):
            raise ValueError("FlatCakeStorage: host indices point outside the host pool buffers")
        return ptrs

    def _record(self, kind: str, pages: int, nbytes: int, seconds: float) -> None:
        # With --enable-metrics off SGLang never calls get_stats(): record nothing.
        if not self._metrics_enabled:
            return
        with self._metrics_lock:
            figures = [(getattr(self._metrics, f"{kind}_pgs"), pages)]
            if seconds > 0:
                figures.append((getattr(self._metrics, f"{kind}_bandwidth"), nbytes / seconds / 1e9))
            for values, value in figures:
                values.append(value)
                if len(values) > METRICS_MAX_ENTRIES:
                    del values[: len(values) - METRICS_MAX_ENTRIES]

    # --- zero-copy interface (interface_v1) -----------------------------------------------------
    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Stores pages from the host pool in place. A key already stored counts as success
        (write-once). Store failures (no space, I/O) are logged and reported as False."""
        self._require_pool("batch_set_v1")
        keys = list(keys)
        if not keys:
            return []
        if self._logical_kv:
            return self._logical_pages(keys, host_indices)
        ptrs = self._page_buffers(keys, host_indices)
        store_keys = [self._store_key(k) for k in keys]
        per = len(ptrs) // len(keys)
        start = time.perf_counter()
        written = 0
        for first, end, hints in self._placed_runs(store_keys, extra_info):
            try:
                result = self._store.put(store_keys[first:end], self._layout,
                                         ptrs[first * per:end * per], kind=self._kind, **hints)
            except (flatcake.Error, ValueError) as e:
                logger.warning("FlatCake: storing %d pages failed: %s", end - first, e)
                return [True] * first + [False] * (len(keys) - first)
            written += result.written
        self._record("backup", written, written * self._layout.block_bytes,
                     time.perf_counter() - start)
        return [True] * len(keys)

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Loads pages into the host pool in place; False for a page that is absent or failed
        its checksum. Store failures are logged and reported as all False."""
        self._require_pool("batch_get_v1")
        keys = list(keys)
        if not keys:
            return []
        if self._logical_kv:
            return self._logical_pages(keys, host_indices)
        ptrs = self._page_buffers(keys, host_indices)
        store_keys = [self._store_key(k) for k in keys]
        start = time.perf_counter()
        try:
            result = self._restore(store_keys, ptrs, self._kind)
            found = [bool(f) for f in result.found]
            hits = result.hits
            if not all(found):  # stored under the other host layout: the same bytes permuted
                per = len(ptrs) // len(keys)
                missing = [i for i, f in enumerate(found) if not f]
                planes = self._get_reordered([keys[i] for i in missing])
                for j, i in enumerate(missing):
                    if planes[j] is not None:
                        self._write_page(planes[j], ptrs[i * per:(i + 1) * per])
                        found[i] = True
                        hits += 1
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: loading %d pages failed: %s", len(keys), e)
            return [False] * len(keys)
        self._record("prefetch", hits, hits * self._layout.block_bytes,
                     time.perf_counter() - start)
        return found

    def _get_reordered(self, keys: List[str]) -> List[Optional[torch.Tensor]]:
        """Pages stored under the other byte order of the same format (a server restarted with
        another --hicache-mem-layout), read and converted to this host layout's order: per key,
        its planes as a uint8 tensor [planes, layers * slice_bytes], or None when absent."""
        if self._other_format is None or not keys:
            return [None] * len(keys)
        layout = self._layout
        n, planes_n = len(keys), layout.num_planes
        plane_bytes = layout.num_layers * layout.slice_bytes
        staging = torch.empty((n, planes_n, plane_bytes), dtype=torch.uint8)
        other = [self._store_key(k, self._other_format) for k in keys]
        result = self._restore(other, [staging[i].data_ptr() for i in range(n)],
                               "block_plane_major")
        if not result.hits:
            return [None] * n
        # A plane of the stored order, (page_size, layers, cell) token-major or (layers,
        # page_size, cell) layer-major, becomes the other by swapping its two outer axes.
        ps, layers = self._page_size, layout.num_layers
        cell = plane_bytes // (ps * layers)
        outer = (layers, ps) if self._order == "t" else (ps, layers)
        converted = staging.view(n, planes_n, *outer, cell).transpose(2, 3).contiguous()
        converted = converted.view(n, planes_n, plane_bytes)
        return [converted[i] if f else None for i, f in enumerate(result.found)]

    def _write_page(self, planes: torch.Tensor, ptrs: List[int]) -> None:
        """One page's planes ([planes, layers * slice_bytes], this layout's order) into its host
        buffers: one per plane (plane pointers) or one per (layer, plane) (layer_first)."""
        if self._kind == "plane_pointers":
            for p, dst in enumerate(ptrs):
                ctypes.memmove(dst, planes[p].data_ptr(), planes.shape[1])
            return
        slice_bytes, planes_n = self._layout.slice_bytes, self._layout.num_planes
        for idx, dst in enumerate(ptrs):  # [(layer * planes) + plane]
            layer, p = divmod(idx, planes_n)
            ctypes.memmove(dst, planes[p].data_ptr() + layer * slice_bytes, slice_bytes)

    def _restore(self, store_keys: List[str], ptrs: List[int], kind: str,
                 layout: Optional[Any] = None) -> flatcake.GetResult:
        """One restore request, scheduled by the store's FC-MAS with the other workers' (a page
        set whose hits are all in DRAM is served at once; one that needs SSD waits its turn for
        the read window); blocks until it is done, with the GIL released."""
        handle = self._store.restore(store_keys, layout or self._layout, ptrs, kind=kind)
        handle.wait()
        return handle.result

    def _logical_pages(self, keys: List[str], host_indices: Any) -> List[bool]:
        # A logical KV anchor's pages hold no bytes: every page "moves" (SGLang's own backends
        # do the same); batch_exists_v2 finds the usable prefix in the auxiliary pools.
        if _count(host_indices) != len(keys) * self._page_size:
            raise ValueError(f"FlatCakeStorage: {len(keys)} keys need "
                             f"{len(keys) * self._page_size} host indices (page_size "
                             f"{self._page_size}), got {_count(host_indices)}")
        return [True] * len(keys)

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Number of leading keys stored (0 for a logical KV anchor, which stores nothing: its
        hits are counted by batch_exists_v2 from the auxiliary pools)."""
        if self._store is None or self._logical_kv:
            return 0  # nothing can have been stored before the pool was registered
        keys = list(keys)
        store_keys = [self._store_key(k) for k in keys]
        n = self._store.exists(store_keys)
        if n < len(keys) and self._other_format is not None:
            # The rest stored under the other host layout: batch_get_v1 converts them.
            n += self._store.exists([self._store_key(k, self._other_format) for k in keys[n:]])
        if n < len(keys):
            self._note_lookups(store_keys[n:])
        return n

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # --- v2 interface (hybrid models: named auxiliary pools) ------------------------------------
    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Registers one named host pool of a hybrid model (SGLang's HybridCacheController calls
        this for every entry of its HostPoolGroup, after register_mem_pool_host). The KV pool is
        the one already registered (or is registered now); any other pool's page shape is read
        from its get_page_buffer_meta and fixed from here on."""
        name = _enum_value(host_pool_name)
        if host_pool is None:
            raise ValueError(f"FlatCakeStorage.register_mem_host_pool_v2: pool '{name}' is None")
        if name == PoolName.KV.value:
            if self.mem_pool_host is None:
                self.register_mem_pool_host(host_pool)
            super().register_mem_host_pool_v2(host_pool, host_pool_name)
            return
        if self._store is None:
            raise RuntimeError(f"FlatCakeStorage.register_mem_host_pool_v2('{name}'): register "
                               "the KV pool first (register_mem_pool_host)")
        meta_fn = getattr(host_pool, "get_page_buffer_meta", None)
        if meta_fn is None:
            raise ValueError(f"FlatCakeStorage: pool '{name}' ({type(host_pool).__name__}) lacks "
                             "'get_page_buffer_meta'")
        page_size = int(getattr(host_pool, "page_size", 1) or 1)
        try:
            _, sizes = _flat_meta(meta_fn(torch.arange(page_size, dtype=torch.int64)))
        except Exception as e:
            raise ValueError(f"FlatCakeStorage: pool '{name}' ({type(host_pool).__name__}) cannot "
                             f"describe its pages: {e}") from e
        side = _SidePool(name, host_pool, page_size, sizes, self._pool_is_shared(name, host_pool))
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        self._side_pools[name] = side
        logger.info("FlatCake HiCache backend: pool %s (%s keys)", side.describe(),
                    "rank-shared" if side.shared else "per-rank")

    def _pool_is_shared(self, name: str, pool: Any) -> bool:
        if name in _RANK_SHARED_POOLS:
            return True
        if name == PoolName.SWA.value:
            return self.is_mla
        if name == PoolName.DRAFT.value:  # the draft model's own attention kind decides
            return "MLA" in type(pool).__name__ or bool(getattr(pool, "is_mla", False))
        return False  # Mamba states and unknown pools: per rank (never wrongly shared)

    def _side_key(self, side: _SidePool, page_hash: str) -> str:
        if not isinstance(page_hash, str):
            raise TypeError(f"FlatCakeStorage: page keys must be str, got {type(page_hash).__name__}")
        suffix = self._shared_suffix if side.shared else self._rank_suffix
        return f"{self.namespace}{page_hash}:{side.name}@{self._format}{suffix}"

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Any:
        """The usable prefix: the leading KV pages stored, shrunk by each pool's hit policy.

        all_pages: the pool must hold every page of the KV prefix. trailing_pages: only the last
        len(transfer.keys) pages before the prefix end must be there; the prefix ends at the
        longest length for which they are. Returns a PoolTransferResult whose kv_hit_pages is the
        minimum over the pools and whose extra_pool_hit_pages gives each pool's own boundary
        (pools with none are left out, as is KV with no hit)."""
        keys = list(keys)
        if self._store is None or not keys:
            return PoolTransferResult(0, {})
        kv_pages = len(keys) if self._logical_kv else self.batch_exists(keys, extra_info)
        hits: Dict[Any, int] = {PoolName.KV: kv_pages} if kv_pages else {}
        final = kv_pages
        for transfer in pool_transfers or []:
            if final == 0:
                break
            name = _enum_value(transfer.name)
            if name == PoolName.KV.value:
                continue  # counted above
            side = self._side_pools.get(name)
            if side is None:
                logger.error("FlatCake: batch_exists_v2 names pool '%s', which was never "
                             "registered (register_mem_host_pool_v2); counting no hit", name)
                boundary = 0
            else:
                boundary = self._pool_boundary(side, keys, kv_pages, transfer)
            if boundary:
                hits[transfer.name] = boundary
            final = min(final, boundary)
        return PoolTransferResult(final, hits)

    def _pool_boundary(self, side: _SidePool, keys: List[str], kv_pages: int,
                       transfer: Any) -> int:
        if side.layout is None:
            return kv_pages  # a pool without bytes holds every page
        policy = _enum_value(transfer.hit_policy)
        if policy == PoolHitPolicy.ALL_PAGES.value:
            return self._store.exists([self._side_key(side, k) for k in keys[:kv_pages]])
        if policy != PoolHitPolicy.TRAILING_PAGES.value:
            logger.error("FlatCake: unknown hit policy %r for pool '%s'; counting no hit",
                         policy, side.name)
            return 0
        window = max(1, len(transfer.keys) if transfer.keys else 1)
        present: Dict[int, bool] = {}

        def has(i: int) -> bool:
            if i not in present:
                present[i] = self._store.exists([self._side_key(side, keys[i])]) == 1
            return present[i]

        for end in range(kv_pages, 0, -1):
            if all(has(i) for i in range(max(0, end - window), end)):
                return end
        return 0

    def batch_set_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[Any, List[bool]]:
        """Stores each transfer's pages (transfer.keys, page_size host slots per key) from its
        pool in place; {pool name: [True per page stored or already present]}. A failing pool
        (bad indices, unregistered, no space) is logged and reported all False; the others
        proceed."""
        return self._batch_v2("batch_set_v2", transfers, extra_info, write=True)

    def batch_get_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[Any, List[bool]]:
        """Loads each transfer's pages into its pool in place; {pool name: [found per page]}."""
        return self._batch_v2("batch_get_v2", transfers, extra_info, write=False)

    def _batch_v2(self, op: str, transfers: List[Any], extra_info: Any,
                  write: bool) -> Dict[Any, List[bool]]:
        self._require_pool(op)
        results: Dict[Any, List[bool]] = {}
        for transfer in transfers or []:
            keys = list(transfer.keys or [])
            name = _enum_value(transfer.name)
            try:
                if name == PoolName.KV.value:
                    io = self.batch_set_v1 if write else self.batch_get_v1
                    ok = io(keys, transfer.host_indices, extra_info) if keys else []
                else:
                    side = self._side_pools.get(name)
                    if side is None:
                        raise ValueError("the pool was never registered (register_mem_host_pool_v2)")
                    ok = self._side_io(side, keys, transfer.host_indices, write)
            except (flatcake.Error, ValueError, TypeError) as e:
                logger.error("FlatCake: %s of %d '%s' pages failed: %s", op, len(keys), name, e)
                ok = [False] * len(keys)
            results[transfer.name] = ok
        return results

    def _side_io(self, side: _SidePool, keys: List[str], host_indices: Any,
                 write: bool) -> List[bool]:
        n = len(keys)
        if n == 0:
            return []
        if _count(host_indices) != n * side.page_size:
            raise ValueError(f"{n} keys need {n * side.page_size} host indices (page_size "
                             f"{side.page_size}), got {_count(host_indices)}")
        if side.layout is None:
            return [True] * n
        ptrs = side.pointers(host_indices, n)
        store_keys = [self._side_key(side, k) for k in keys]
        bounce = torch.empty(n * side.page_bytes, dtype=torch.uint8) if side.gather else None
        if write:
            if bounce is not None:
                side.gather_into(bounce.data_ptr(), ptrs)
            with self._side_lock:
                session = side.next_session(n * side.page_bytes)
            self._store.put(store_keys, side.layout, bounce if bounce is not None else ptrs,
                            kind=side.kind, session=session, force_medium=self.force_medium)
            return [True] * n
        if bounce is None:
            return [bool(f) for f in self._restore(store_keys, ptrs, side.kind, side.layout).found]
        base = bounce.data_ptr()
        result = self._restore(store_keys, [base + i * side.page_bytes for i in range(n)],
                               "block_contiguous", side.layout)
        found = [bool(f) for f in result.found]
        side.scatter_from(base, ptrs, found)
        return found

    # --- copy-based interface (flat pages) ------------------------------------------------------
    def _flat_buffers(self, n: int, values: Optional[List[Any]], locations: Optional[Any],
                      sizes: Optional[Any], op: str, layout: Optional[Any] = None) -> List[Any]:
        """One buffer (tensor or address) of `layout`'s block bytes (default: a target page) per
        key."""
        layout = layout or self._layout
        block = layout.block_bytes
        if values is not None:
            buffers = list(values)
        elif locations is not None:
            buffers = list(locations) if isinstance(locations, (list, tuple)) else [locations]
            if sizes is not None:
                sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
                if len(sizes) != len(buffers) or any(int(s) != block for s in sizes):
                    raise ValueError(f"FlatCakeStorage.{op}: target sizes {sizes} do not match "
                                     f"the page size of {block} bytes")
        else:
            raise ValueError(f"FlatCakeStorage.{op}: no values or target locations given")
        if len(buffers) != n:
            raise ValueError(f"FlatCakeStorage.{op}: {n} keys but {len(buffers)} buffers")
        for i, b in enumerate(buffers):
            if isinstance(b, torch.Tensor):
                nbytes = b.numel() * b.element_size()
                if nbytes != block:
                    raise ValueError(f"FlatCakeStorage.{op}: buffer {i} has {nbytes} bytes; a page "
                                     f"of {layout!r} has {block}")
                if not b.is_contiguous() or b.device.type != "cpu":
                    raise ValueError(f"FlatCakeStorage.{op}: buffer {i} must be a contiguous "
                                     "CPU tensor")
            elif not isinstance(b, int) or isinstance(b, bool):
                raise TypeError(f"FlatCakeStorage.{op}: buffer {i} must be a tensor or an int "
                                f"address, got {type(b).__name__}")
        return buffers

    def _copy_layout(self, op: str, keys: List[str], buffers: Optional[Any]) -> Tuple[Any, str]:
        """The block layout and buffer kind of a copy-based batch. Target pages have the host
        pool's layout. Draft-model pages (speculative decoding: SGLang's generic path stores them
        under ``<hash>.draft`` keys as flat pages of the draft pool, whose shape differs) are kept
        whole, as one slice of the page's size: a layout of their own, apart by key."""
        draft = [k.endswith(DRAFT_SUFFIX) for k in keys]
        if not any(draft):
            return self._layout, "block_plane_major"
        if not all(draft):
            raise ValueError(f"FlatCakeStorage.{op}: a batch mixes draft ({DRAFT_SUFFIX}) and "
                             "target pages")
        items = list(buffers) if isinstance(buffers, (list, tuple)) else [buffers]
        if not items or not all(isinstance(b, torch.Tensor) for b in items):
            raise ValueError(f"FlatCakeStorage.{op}: draft pages need tensors (their size is "
                             "the draft pool's page size)")
        nbytes = items[0].numel() * items[0].element_size()
        return flatcake.KvLayout(num_layers=1, num_planes=1, slice_bytes=nbytes), "block_contiguous"

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None) -> bool:
        self._require_pool("batch_set")
        keys = list(keys)
        if not keys:
            return True
        if self._logical_kv and not any(k.endswith(DRAFT_SUFFIX) for k in keys):
            return True  # a logical KV anchor's flat pages are empty: nothing to store
        layout, kind = self._copy_layout("batch_set", keys,
                                         values if values is not None else target_locations)
        buffers = self._flat_buffers(len(keys), values, target_locations, target_sizes,
                                     "batch_set", layout)
        try:
            self._store.put([self._store_key(k) for k in keys], layout,
                            [b.data_ptr() if isinstance(b, torch.Tensor) else b for b in buffers],
                            kind=kind, force_medium=self.force_medium)
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: storing %d pages failed: %s", len(keys), e)
            return False
        return True

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], None if value is None else [value],
                              None if target_location is None else [target_location],
                              None if target_sizes is None else [target_sizes])

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[Any]]:
        """One filled buffer (the given tensor, or a new one) or None per key."""
        self._require_pool("batch_get")
        keys = list(keys)
        if not keys:
            return []
        if self._logical_kv and not any(k.endswith(DRAFT_SUFFIX) for k in keys):
            # Empty pages, as batch_get_v1 reports for a logical anchor.
            if target_locations is None:
                return [torch.empty(0, dtype=torch.uint8) for _ in keys]
            return (list(target_locations) if isinstance(target_locations, (list, tuple))
                    else [target_locations])
        if target_locations is None:
            make = getattr(self.mem_pool_host, "get_dummy_flat_data_page", None)
            target_locations = [make() if make else
                                torch.empty(self._layout.block_bytes, dtype=torch.uint8)
                                for _ in keys]
        layout, kind = self._copy_layout("batch_get", keys, target_locations)
        buffers = self._flat_buffers(len(keys), None, target_locations, target_sizes,
                                     "batch_get", layout)
        addrs = [b.data_ptr() if isinstance(b, torch.Tensor) else b for b in buffers]
        try:
            result = self._restore([self._store_key(k) for k in keys], addrs, kind, layout)
            found = [bool(f) for f in result.found]
            if layout is self._layout and not all(found):  # target pages: the other order
                missing = [i for i, f in enumerate(found) if not f]
                for i, planes in zip(missing, self._get_reordered([keys[i] for i in missing])):
                    if planes is not None:  # a flat page: its planes back to back
                        ctypes.memmove(addrs[i], planes.data_ptr(), layout.block_bytes)
                        found[i] = True
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: loading %d pages failed: %s", len(keys), e)
            return [None] * len(keys)
        return [b if f else None for b, f in zip(buffers, found)]

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[Any]:
        return self.batch_get([key], None if target_location is None else [target_location],
                              None if target_sizes is None else [target_sizes])[0]

    # --- management -----------------------------------------------------------------------------
    def clear(self) -> None:
        """Drops every stored page (of every worker sharing this store)."""
        if self._store is not None:
            self._store.clear()

    def get_stats(self) -> StorageMetrics:
        """Pages and GB/s per backup/prefetch call since the previous call (SGLang's metrics)."""
        with self._metrics_lock:
            metrics, self._metrics = self._metrics, StorageMetrics()
        return metrics

    def store_stats(self) -> dict:
        """FlatCake's own counters: per-medium usage, hits, misses, checksum mismatches, ..."""
        return self._store.stats() if self._store is not None else {}

    def close(self) -> None:
        """Detaches from the store; the last worker of the process closes it."""
        if self._fingerprint is not None:
            _shared_stores.release(self._fingerprint)
        self._store = None
        self._fingerprint = None
