"""Stand-in of sglang.srt.mem_cache.hicache_storage at SGLang 8905cbd (see ../../../README.md):
the storage config, the multi-pool (v2) transfer descriptors and the HiCacheStorage base class."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, List, Optional

# Pages per batched storage call made by the HiCache controllers.
STORAGE_BATCH_SIZE = 128


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class PoolName(str, Enum):
    """Names of the host pools of a hybrid model (PoolEntry / PoolTransfer names); str() is the
    value, which is also the key suffix storage backends use (`<hash>.<name>`)."""

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
    DRAFT = "draft"  # the speculative-decoding draft model's KV pool

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    """How batch_exists_v2 matches an extra pool against the KV prefix: ALL_PAGES needs the pool's
    page for every KV page of the prefix (DSA indexer); TRAILING_PAGES only for the last
    len(keys) pages of it (Mamba / SWA states)."""

    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    """One extra pool's part of a transfer. Host<->storage uses host_indices (slots of that
    pool, page_size of that pool per key) and keys; indices_from_pool names the pool whose
    indices (and keys, when keys is None) this one borrows (a sidecar pool)."""

    name: PoolName
    host_indices: Optional[Any] = None  # torch.Tensor
    device_indices: Optional[Any] = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass(frozen=True)
class SidecarPoolSpec:
    """A pool whose transfer indices come from another (real) pool."""

    pool_name: PoolName
    indices_from_pool: PoolName
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES


@dataclass
class PoolTransferResult:
    """Pages found / moved: kv_hit_pages for the KV prefix, and per extra pool name a count."""

    kv_hit_pages: int
    extra_pool_hit_pages: Dict[str, int]

    @classmethod
    def empty(cls) -> "PoolTransferResult":
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        """Keep the largest KV hit seen over the batches."""
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: Dict[str, List[bool]]) -> None:
        """Record, per pool, how many entries of a batch_get_v2 / batch_set_v2 succeeded
        (replacing that pool's earlier count)."""
        for name, oks in results.items():
            self.extra_pool_hit_pages[name] = sum(oks)


class HiCacheStorage(ABC):
    def register_mem_pool_host(self, mem_pool_host: Any):
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name):
        """Record one pool of a hybrid model under its name (HybridCacheController calls this for
        every PoolEntry, after register_mem_pool_host with the whole HostPoolGroup)."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[PoolTransfer]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> PoolTransferResult:
        """Longest usable prefix of `keys`: the KV prefix, shrunk by each pool transfer's hit
        policy; kv_hit_pages is that final length, extra_pool_hit_pages the per-pool counts."""
        raise NotImplementedError()

    def batch_get_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[str, List[bool]]:
        """Read each transfer's keys into its pool's host_indices; per pool name, a success list."""
        raise NotImplementedError()

    def batch_set_v2(self, transfers: List[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[str, List[bool]]:
        """Write each transfer's host pages under its keys; per pool name, a success list."""
        raise NotImplementedError()

    def batch_get_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        raise NotImplementedError()

    def batch_set_v1(self, keys, host_indices, extra_info=None) -> List[bool]:
        raise NotImplementedError()

    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None):
        ...

    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        ...

    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        ...

    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        ...

    @abstractmethod
    def exists(self, key: str) -> bool:
        ...

    def batch_exists(self, keys, extra_info=None) -> int:
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None
