"""Stand-in of the prefix-cache hashing in vllm/v1/core/kv_cache_utils.py at vLLM 003df296
(see ../../../README.md): a full block's hash is a hash of (its parent block's hash, its token
ids, extra keys), NONE_HASH standing in for the first block's parent, so a block hash names the
whole prefix. vLLM hashes with SHA-256 by default and draws NONE_HASH at random unless
PYTHONHASHSEED is set; `init_none_hash` takes the seed here. BlockHash is bytes."""

import hashlib
import pickle
from dataclasses import dataclass
from typing import Callable, Optional

BlockHash = bytes
NONE_HASH: BlockHash = b""


def init_none_hash(seed: Optional[str] = "0") -> None:
    global NONE_HASH
    NONE_HASH = hashlib.sha256(f"none-hash-{seed}".encode()).digest()


init_none_hash()


def sha256(obj) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def hash_block_tokens(hash_function: Callable, parent_block_hash: Optional[BlockHash],
                      curr_block_token_ids, extra_keys: Optional[tuple] = None) -> BlockHash:
    if not parent_block_hash:
        parent_block_hash = NONE_HASH
    return BlockHash(hash_function((parent_block_hash, tuple(curr_block_token_ids), extra_keys)))


def get_request_block_hasher(block_size: int, caching_hash_fn: Callable = sha256):
    """Hashes the request's full blocks that have no hash yet."""

    def request_block_hasher(request) -> list[BlockHash]:
        start = len(request.block_hashes) * block_size
        if start + block_size > request.num_tokens:
            return []
        prev = request.block_hashes[-1] if request.block_hashes else None
        out = []
        while start + block_size <= request.num_tokens:
            prev = hash_block_tokens(caching_hash_fn, prev,
                                     request.all_token_ids[start:start + block_size],
                                     (request.cache_salt,) if request.cache_salt else None)
            out.append(prev)
            start += block_size
        return out

    return request_block_hasher


@dataclass
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: Optional[BlockHash] = None  # set once the block is full and cached
    is_null: bool = False
