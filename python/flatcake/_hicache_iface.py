"""Local stand-in for SGLang's HiCache storage interface, used only when SGLang is not installed.

It mirrors the contract of ``sglang.srt.mem_cache.hicache_storage`` (the ``HiCacheStorage``
abstract class, ``HiCacheStorageConfig`` and ``HiCacheStorageExtraInfo``) and of
``sglang.srt.observability.metrics_collector.StorageMetrics`` (``sglang.srt.metrics.collector``
before February 2026) closely enough that ``flatcake.sglang`` behaves
the same with or without SGLang, and that the tests can drive it the way SGLang's HiCache
controller does:

- The controller builds a dynamic backend as ``cls(storage_config, kwargs)`` and then calls
  ``register_mem_pool_host(host_pool)`` before any I/O.
- ``batch_exists(keys, extra_info)`` returns how many leading keys are stored.
- ``batch_get_v1`` / ``batch_set_v1(keys, host_indices, extra_info)`` move whole pages between
  storage and the host pool in place (``host_indices`` has ``page_size`` slots per key) and
  return one bool per key; the controller counts leading successes.
- ``get/set/batch_get/batch_set/exists`` are the older copy-based interface (flat page tensors).
- ``get_stats()`` returns a StorageMetrics or None.
- The v2 interface of hybrid models: ``register_mem_host_pool_v2(pool, name)`` per named host
  pool, then ``batch_exists_v2(keys, pool_transfers)`` -> ``PoolTransferResult`` and
  ``batch_get_v2`` / ``batch_set_v2(transfers)`` -> ``{pool name: [bool per page]}``, with the
  ``PoolName``, ``PoolHitPolicy`` and ``PoolTransfer`` types below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional


@dataclass
class HiCacheStorageConfig:
    """Where this worker sits in the parallel layout, plus the backend's free-form options."""

    tp_rank: int
    tp_size: int
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = False
    model_name: Optional[str] = None
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    # The JSON object given to --hicache-storage-backend-extra-config.
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    # Page hashes that precede the batch's first key in the request's chain (when the engine is
    # started with prefix-key passing enabled).
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


@dataclass
class StorageMetrics:
    """Per-interval storage I/O figures: pages per operation and bandwidth in GB/s."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


class HiCacheStorage(ABC):
    """Generic key-value storage of KV-cache pages for HiCache's third tier."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Registers one named pool of a hybrid model (v2 interface)."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Loads pages into the host pool in place; one success flag per key."""
        raise NotImplementedError()

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Stores pages from the host pool in place; one success flag per key."""
        raise NotImplementedError()

    @abstractmethod
    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Any:
        """The value of ``key`` (a tensor), or None when absent."""

    @abstractmethod
    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> Any:
        """One tensor or None per key."""

    @abstractmethod
    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        """Stores one value; True on success."""

    @abstractmethod
    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """Stores several values; True when all succeeded."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether ``key`` is stored."""

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Number of consecutive keys, from the first, that are stored."""
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self) -> Optional[StorageMetrics]:
        return None


# --- the v2 interface (hybrid models: several named host pools per page) ----------------------
class PoolName(str, Enum):
    """Names of host pools; a transfer names the pool its pages belong to."""

    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    """Which pages of a KV prefix an auxiliary pool must hold for the prefix to be usable."""

    ALL_PAGES = "all_pages"  # every page of the prefix
    TRAILING_PAGES = "trailing_pages"  # only the last len(transfer.keys) pages


@dataclass
class PoolTransfer:
    """Pages of one named pool: host slots (page_size per key) and their page keys."""

    name: Any
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: Any = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Any = None


@dataclass
class PoolTransferResult:
    """The usable KV prefix (pages) and, per pool, the pages found or moved."""

    kv_hit_pages: int
    extra_pool_hit_pages: dict

    @classmethod
    def empty(cls) -> "PoolTransferResult":
        return cls(0, {})
