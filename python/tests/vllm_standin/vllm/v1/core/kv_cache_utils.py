"""Stand-in of vllm/v1/core/kv_cache_utils.py (the newest copy read, commit unknown; see
../../../README.md): chained prefix-cache block hashes, the two block granularities and
KVCacheBlock.

- A hash block's hash is hash((parent hash or NONE_HASH, its token ids, extra keys)), so a hash
  names its whole prefix. Hashes are bytes (SHA-256 of a pickle). NONE_HASH comes from
  PYTHONHASHSEED when set, else from the fixed seed "vllm-none-hash" (for SHA-256; vLLM draws a
  random seed for xxhash): two engines hash a prefix alike without configuration.
- resolve_kv_cache_block_sizes gives (scheduler_block_size, hash_block_size): one KV cache
  group, both cache_config.block_size (times the DCP size); several groups, the LCM of the
  groups' block sizes and cache_config.prefix_match_unit or else their GCD.
  request.block_hashes holds one hash per hash block, which may be finer than the block;
  BlockHashListWithBlockSize views it at a coarser block size (the hash at a coarse block's
  last fine boundary names the coarse block's prefix).
- A cached block's block_hash is the block hash followed by its group id (4 bytes,
  big-endian), as vLLM keys its prefix cache per group."""

import hashlib
import math
import os
import pickle
from dataclasses import dataclass
from typing import Callable, Optional

BlockHash = bytes
BlockHashWithGroupId = bytes
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
NONE_HASH: BlockHash = b""


def sha256(obj) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def resolve_none_hash_seed(hash_fn: Callable = sha256) -> str:
    return os.getenv("PYTHONHASHSEED") or DEFAULT_NONE_HASH_SEED


def init_none_hash(hash_fn: Callable = sha256) -> None:
    global NONE_HASH
    NONE_HASH = hash_fn(resolve_none_hash_seed(hash_fn))


init_none_hash()


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    return block_hash + group_id.to_bytes(4, "big", signed=False)


def get_block_hash(key: BlockHashWithGroupId) -> BlockHash:
    return key[:-4]


def get_group_id(key: BlockHashWithGroupId) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


def hash_block_tokens(hash_function: Callable, parent_block_hash: Optional[BlockHash],
                      curr_block_token_ids, extra_keys: Optional[tuple] = None) -> BlockHash:
    if not parent_block_hash:
        parent_block_hash = NONE_HASH
    return BlockHash(hash_function((parent_block_hash, tuple(curr_block_token_ids), extra_keys)))


def get_request_block_hasher(hash_block_size: int, caching_hash_fn: Callable = sha256):
    """Hashes the request's full hash blocks that have no hash yet."""

    def request_block_hasher(request) -> list[BlockHash]:
        start = len(request.block_hashes) * hash_block_size
        if start + hash_block_size > request.num_tokens:
            return []
        prev = request.block_hashes[-1] if request.block_hashes else None
        out = []
        while start + hash_block_size <= request.num_tokens:
            prev = hash_block_tokens(caching_hash_fn, prev,
                                     request.all_token_ids[start:start + hash_block_size],
                                     (request.cache_salt,) if request.cache_salt else None)
            out.append(prev)
            start += hash_block_size
        return out

    return request_block_hasher


def resolve_kv_cache_block_sizes(kv_cache_config, vllm_config) -> tuple[int, int]:
    """(scheduler_block_size, hash_block_size)."""
    cache_config = vllm_config.cache_config
    dcp = getattr(vllm_config.parallel_config, "decode_context_parallel_size", 1) or 1
    groups = kv_cache_config.kv_cache_groups
    if len(groups) <= 1:
        bs = cache_config.block_size * dcp
        return bs, bs
    sizes = [g.kv_cache_spec.block_size * dcp for g in groups]
    scheduler_block_size = math.lcm(*sizes)
    if not (cache_config.enable_prefix_caching or vllm_config.kv_transfer_config is not None):
        return scheduler_block_size, scheduler_block_size
    requested = cache_config.prefix_match_unit
    hash_block_size = requested if requested is not None else math.gcd(*sizes)
    if any(bs % hash_block_size for bs in sizes):
        raise ValueError(f"Invalid prefix_match_unit={hash_block_size}; KV cache group block "
                         f"sizes must be divisible by it, got {sizes}")
    return scheduler_block_size, hash_block_size


class BlockHashListWithBlockSize:
    """request.block_hashes (at hash_block_size) seen at target_block_size, a multiple."""

    def __init__(self, block_hashes: list, hash_block_size: int, target_block_size: int):
        assert target_block_size % hash_block_size == 0
        self.block_hashes = block_hashes
        self.scale_factor = target_block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale_factor

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self.block_hashes[(idx + 1) * self.scale_factor - 1]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


@dataclass
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: Optional[BlockHashWithGroupId] = None  # set once the block is full and cached
    is_null: bool = False

    def reset_hash(self) -> None:
        self.block_hash = None
