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

Keys: SGLang names pages by 64-hex chained hashes. A block's store key is the page hash with the
worker suffix SGLang's own backends use: ``<hash>_<tp_rank>`` for MHA (each rank holds different
heads), ``<hash>`` for MLA (the latent cache is identical on every rank, so ranks share it), plus
``_pp<rank>`` under pipeline parallelism and ``_cp<rank>`` under attention context parallelism,
and an optional ``namespace`` prefix.

Placement: when SGLang passes ``prefix_keys`` (``"hicache_storage_pass_prefix_keys": true`` in
the extra config), the last prefix key becomes the write's ``prefix_tail`` and the prefix length
its ``context_tokens``, so a request's pages join its session's scope and long contexts go to SSD
laid out flat.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

import flatcake

try:  # SGLang present: subclass the real interface so its factory's issubclass check passes.
    from sglang.srt.mem_cache.hicache_storage import (  # type: ignore
        HiCacheStorage,
        HiCacheStorageConfig,
        HiCacheStorageExtraInfo,
    )
except ImportError:  # pragma: no cover - exercised when SGLang is absent (the test machine)
    from ._hicache_iface import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

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

# Per-call figures kept between two get_stats() calls, per list; the oldest go first. SGLang asks
# once per scheduler step, so this only bounds a caller that records but never asks.
METRICS_MAX_ENTRIES = 1024

__all__ = [
    "ADAPTER_OPTIONS",
    "FlatCakeStorage",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "SUPPORTED_LAYOUTS",
]

logger = logging.getLogger(__name__)

SUPPORTED_LAYOUTS = ("page_first", "page_first_direct", "layer_first")

# Keys SGLang's dynamic loader reads from the same extra_config; FlatCake ignores them.
_LOADER_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size")

# Options of this adapter (everything else in extra_config is a StoreOptions field).
ADAPTER_OPTIONS: Dict[str, str] = {
    "namespace": "string prefixed to every key, to keep several models apart in one store",
    "per_worker_subdir": "true (default): each worker process stores under <ssd_dir>/<worker>, "
                         "the next free slot when another live worker holds it",
    "force_medium": "'dram' or 'ssd': bypass placement (testing, benchmarking)",
}


# --- process-wide store sharing ---------------------------------------------------------------
# Workers that live in one process (threads, tests) and name the same configuration share one
# store; separate processes each open their own (see per_worker_subdir).
_stores_lock = threading.Lock()
_stores: Dict[str, List[Any]] = {}  # config fingerprint -> [flatcake.Store, refcount]


def _acquire_store(fingerprint: str, open_fn) -> flatcake.Store:
    with _stores_lock:
        entry = _stores.get(fingerprint)
        if entry is not None and not entry[0].closed:
            entry[1] += 1
            return entry[0]
        store = open_fn()
        _stores[fingerprint] = [store, 1]
        return store


def _release_store(fingerprint: str) -> None:
    with _stores_lock:
        entry = _stores.get(fingerprint)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _stores[fingerprint]
            entry[0].close()


def _cfg(config: Any, name: str, default: Any) -> Any:
    # Older SGLang releases lack some fields (pp, cp, dp); they mean "not used".
    value = getattr(config, name, default)
    return default if value is None else value


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
        self.force_medium = extra.pop("force_medium", None)
        if self.force_medium not in (None, "dram", "ssd"):
            raise ValueError(f"extra_config 'force_medium' must be 'dram' or 'ssd', "
                             f"got {self.force_medium!r}")
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
        self._layout: Optional[flatcake.KvLayout] = None
        self._kind: Optional[str] = None
        self._page_size = 0
        self._pool_extent: Tuple[int, int] = (0, 0)
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
            os.makedirs(sub, exist_ok=True)
            out.append(sub)
        return out

    def _open_store(self, page_size: int) -> None:
        config = dict(self._store_config)
        if "tokens_per_block" not in self._user_set:
            config["tokens_per_block"] = page_size  # one block is one SGLang page
        fingerprint = json.dumps(config, sort_keys=True)
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

        self._store = _acquire_store(fingerprint, open_fn)
        self._fingerprint = fingerprint

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Checks the host pool, derives the block layout and opens (or joins) the store."""
        if mem_pool_host is None:
            raise ValueError("FlatCakeStorage.register_mem_pool_host: the host pool is None")
        layout_name = getattr(mem_pool_host, "layout", None)
        if layout_name not in SUPPORTED_LAYOUTS:
            raise ValueError(f"FlatCakeStorage: unsupported host memory layout {layout_name!r}; "
                             f"use --hicache-mem-layout {' or '.join(SUPPORTED_LAYOUTS)}")
        for attr in ("page_size", "layer_num", "get_page_buffer_meta"):
            if not hasattr(mem_pool_host, attr):
                raise ValueError(f"FlatCakeStorage: host pool {type(mem_pool_host).__name__} "
                                 f"lacks '{attr}'")
        page_size = int(mem_pool_host.page_size)
        layers = int(mem_pool_host.layer_num)
        planes = 1 if self.is_mla else 2
        ptrs, sizes = mem_pool_host.get_page_buffer_meta(torch.arange(page_size, dtype=torch.int64))
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
        self._layout, self._kind, self._page_size = layout, kind, page_size
        self._pool_extent = self._host_extent(mem_pool_host)
        if self._store is None:
            self._open_store(page_size)
        logger.info("FlatCake HiCache backend: layout=%s block=%r kind=%s key_suffix=%r store=%s",
                    layout_name, layout, kind, self._key_suffix, self._store.info())

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
        if self.mem_pool_host is None or self._layout is None or self._store is None:
            raise RuntimeError(f"FlatCakeStorage.{op}: no host pool registered; SGLang calls "
                               "register_mem_pool_host() first")

    def _store_key(self, page_hash: str) -> str:
        if not isinstance(page_hash, str):
            raise TypeError(f"FlatCakeStorage: page keys must be str, got {type(page_hash).__name__}")
        return f"{self.namespace}{page_hash}{self._key_suffix}"

    def _hints(self, extra_info: Optional[HiCacheStorageExtraInfo]) -> dict:
        hints: Dict[str, Any] = {"force_medium": self.force_medium}
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        if prefix:
            hints["prefix_tail"] = self._store_key(prefix[-1])
            hints["context_tokens"] = len(prefix) * self._page_size
        return hints

    def _page_buffers(self, keys: List[str], host_indices: Any) -> List[int]:
        """The pool's pointers for the pages at host_indices, checked against the layout."""
        n = len(keys)
        count = int(host_indices.numel()) if hasattr(host_indices, "numel") else len(host_indices)
        if count != n * self._page_size:
            raise ValueError(f"FlatCakeStorage: {n} keys need {n * self._page_size} host indices "
                             f"(page_size {self._page_size}), got {count}")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
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
        ptrs = self._page_buffers(keys, host_indices)
        store_keys = [self._store_key(k) for k in keys]
        start = time.perf_counter()
        try:
            result = self._store.put(store_keys, self._layout, ptrs, kind=self._kind,
                                     **self._hints(extra_info))
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: storing %d pages failed: %s", len(keys), e)
            return [False] * len(keys)
        self._record("backup", result.written, result.written * self._layout.block_bytes,
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
        ptrs = self._page_buffers(keys, host_indices)
        store_keys = [self._store_key(k) for k in keys]
        start = time.perf_counter()
        try:
            result = self._restore(store_keys, ptrs, self._kind)
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: loading %d pages failed: %s", len(keys), e)
            return [False] * len(keys)
        self._record("prefetch", result.hits, result.hits * self._layout.block_bytes,
                     time.perf_counter() - start)
        return [bool(f) for f in result.found]

    def _restore(self, store_keys: List[str], ptrs: List[int], kind: str,
                 layout: Optional[Any] = None) -> flatcake.GetResult:
        """One restore request, scheduled by the store's FC-MAS with the other workers' (a page
        set whose hits are all in DRAM is served at once; one that needs SSD waits its turn for
        the read window); blocks until it is done, with the GIL released."""
        handle = self._store.restore(store_keys, layout or self._layout, ptrs, kind=kind)
        handle.wait()
        return handle.result

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Number of leading keys stored."""
        if self._store is None:
            return 0  # nothing can have been stored before the pool was registered
        return self._store.exists([self._store_key(k) for k in keys])

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

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
        if target_locations is None:
            make = getattr(self.mem_pool_host, "get_dummy_flat_data_page", None)
            target_locations = [make() if make else
                                torch.empty(self._layout.block_bytes, dtype=torch.uint8)
                                for _ in keys]
        layout, kind = self._copy_layout("batch_get", keys, target_locations)
        buffers = self._flat_buffers(len(keys), None, target_locations, target_sizes,
                                     "batch_get", layout)
        try:
            result = self._restore([self._store_key(k) for k in keys],
                                   [b.data_ptr() if isinstance(b, torch.Tensor) else b
                                    for b in buffers], kind, layout)
        except (flatcake.Error, ValueError) as e:
            logger.warning("FlatCake: loading %d pages failed: %s", len(keys), e)
            return [None] * len(keys)
        return [b if f else None for b, f in zip(buffers, result.found)]

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
            _release_store(self._fingerprint)
        self._store = None
        self._fingerprint = None
