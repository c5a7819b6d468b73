"""Stand-in of sglang.srt.mem_cache.hicache_storage at SGLang 8905cbd (see ../../../README.md)."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, List, Optional


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


class HiCacheStorage(ABC):
    def register_mem_pool_host(self, mem_pool_host: Any):
        self.mem_pool_host = mem_pool_host

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
