"""Stand-in of vllm/v1/core/kv_cache_manager.py (KVCacheBlocks, KVCacheManager) at vLLM
003df296 (see ../../../README.md), for one KV cache group of full attention: a block pool whose
free queue evicts least recently freed blocks first (a request's tail blocks before its head),
a prefix cache of full blocks by block hash (hit blocks are shared, ref-counted), and
allocate_slots counting external (connector) tokens as computed tokens that need new blocks."""

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Optional, Sequence

from vllm.v1.core.kv_cache_utils import KVCacheBlock


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class KVCacheBlocks:
    blocks: tuple[Sequence[KVCacheBlock], ...]

    def __add__(self, other: "KVCacheBlocks") -> "KVCacheBlocks":
        return KVCacheBlocks(tuple(list(a) + list(b) for a, b in zip(self.blocks, other.blocks)))

    def get_block_ids(self, allow_none: bool = False) -> Optional[tuple[list[int], ...]]:
        if allow_none and all(len(group) == 0 for group in self.blocks):
            return None
        return tuple([blk.block_id for blk in group] for group in self.blocks)

    def get_unhashed_block_ids(self) -> list[int]:
        assert len(self.blocks) == 1, "Only one group is supported"
        return [b.block_id for b in self.blocks[0] if b.block_hash is None]


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue: deque[KVCacheBlock] = deque(self.blocks)
        self.cached: dict[bytes, KVCacheBlock] = {}
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = defaultdict(list)
        self.num_cached_block: dict[str, int] = {}
        self.empty_kv_cache_blocks = KVCacheBlocks(((),))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def get_computed_blocks(self, request) -> tuple[KVCacheBlocks, int]:
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0
        # The last token is always recomputed (vLLM needs its logits).
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVCacheBlock] = []
        for h in request.block_hashes[:max_blocks]:
            blk = self.cached.get(h)
            if blk is None:
                break
            hits.append(blk)
        return KVCacheBlocks((hits,)), len(hits) * self.block_size

    def allocate_slots(self, request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: Optional[KVCacheBlocks] = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False) -> Optional[KVCacheBlocks]:
        computed = list(new_computed_blocks.blocks[0]) if new_computed_blocks else []
        total_computed = (request.num_computed_tokens + num_new_computed_tokens +
                          num_external_computed_tokens)
        num_required = cdiv(total_computed + num_new_tokens + num_lookahead_tokens,
                            self.block_size)
        req_blocks = self.req_to_blocks[request.request_id]
        num_new = max(num_required - len(req_blocks) - len(computed), 0)
        evictable_hits = sum(1 for b in computed if b.ref_cnt == 0)
        if num_new > self.num_free_blocks - evictable_hits:
            return None
        for blk in computed:  # touch: a hit block leaves the free queue
            if blk.ref_cnt == 0:
                self.free_queue.remove(blk)
            blk.ref_cnt += 1
        req_blocks.extend(computed)
        new_blocks = [self._pop_free() for _ in range(num_new)]
        req_blocks.extend(new_blocks)
        if self.enable_caching and not delay_cache_blocks:
            self._cache_full_blocks(request, total_computed + num_new_tokens)
        return KVCacheBlocks((new_blocks,))

    def _pop_free(self) -> KVCacheBlock:
        blk = self.free_queue.popleft()
        if blk.block_hash is not None and self.cached.get(blk.block_hash) is blk:
            del self.cached[blk.block_hash]  # evicted from the prefix cache
        blk.block_hash = None
        blk.ref_cnt = 1
        return blk

    def _cache_full_blocks(self, request, num_tokens: int) -> None:
        rid = request.request_id
        blocks = self.req_to_blocks[rid]
        n = min(num_tokens // self.block_size, len(request.block_hashes), len(blocks))
        for i in range(self.num_cached_block.get(rid, 0), n):
            blk = blocks[i]
            if blk.block_hash is None:
                blk.block_hash = request.block_hashes[i]
                self.cached.setdefault(blk.block_hash, blk)
        self.num_cached_block[rid] = max(n, self.num_cached_block.get(rid, 0))

    def free(self, request) -> None:
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.num_cached_block.pop(request.request_id, None)
        for blk in reversed(blocks):  # tail blocks are evicted first
            blk.ref_cnt -= 1
            if blk.ref_cnt == 0:
                self.free_queue.append(blk)

    def evict_cached(self, block_hashes) -> None:
        """Drops these hashes from the prefix cache (as if other requests had reused the blocks):
        a test's way to a local miss."""
        for h in block_hashes:
            blk = self.cached.pop(h, None)
            if blk is not None:
                blk.block_hash = None

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks((list(self.req_to_blocks.get(request_id, [])),))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def get_block_ids_for_computed_tokens(self, request_id: str,
                                          num_computed_tokens: int) -> tuple[list[int], ...]:
        blocks = self.req_to_blocks.get(request_id, [])
        return ([b.block_id for b in blocks[:cdiv(num_computed_tokens, self.block_size)]],)
