"""Stand-in of vllm/v1/kv_cache_interface.py's KVCacheConfig (the parts a connector may read)."""

from dataclasses import dataclass, field


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list = field(default_factory=list)
    kv_cache_groups: list = field(default_factory=lambda: [None])
