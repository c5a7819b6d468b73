"""Stand-in of vllm/v1/core/kv_cache_manager.py (KVCacheBlocks, KVCacheManager) and of the
block pool and per-group managers behind it (block_pool.py, kv_cache_coordinator.py,
single_type_kv_cache_manager.py), read at 00f4240e's interfaces; see ../../../README.md.

- One BlockPool shared by every KV cache group, as vLLM's: block 0 is the null block (never
  handed out; a sliding-window group's blocks that left the window are replaced by it); the
  free queue evicts least recently freed blocks first (a request's tail blocks before its head);
  the prefix cache maps (block hash, group id) to a block.
- Groups: full attention (the hit is the leading run of cached blocks) and sliding window (the
  hit ends with cdiv(window - 1, block_size) cached blocks, the blocks before it are null;
  blocks wholly before the window of the next token are freed and nulled). Several groups
  agree on the longest hit every group has, a multiple of the scheduler block size (the LCM).
- Block ids are tuple[list[int], ...], one list per group; a request's hits never cover its
  last token; allocate_slots counts external (connector) tokens as computed tokens that need
  new blocks, and caches full blocks unless delay_cache_blocks (async loads cache them in
  cache_blocks once the load is done).
"""

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Optional, Sequence

from vllm.v1.core.kv_cache_utils import (BlockHashListWithBlockSize, KVCacheBlock,
                                         make_block_hash_with_group_id)
from vllm.v1.kv_cache_interface import SlidingWindowSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class KVCacheBlocks:
    blocks: tuple[Sequence[KVCacheBlock], ...]  # one list per KV cache group

    def __add__(self, other: "KVCacheBlocks") -> "KVCacheBlocks":
        return KVCacheBlocks(tuple(list(a) + list(b) for a, b in zip(self.blocks, other.blocks)))

    def get_block_ids(self, allow_none: bool = False) -> Optional[tuple[list[int], ...]]:
        if allow_none and all(len(group) == 0 for group in self.blocks):
            return None
        return tuple([blk.block_id for blk in group] for group in self.blocks)

    def get_unhashed_block_ids(self) -> list[int]:
        assert len(self.blocks) == 1, "Only one group is supported"
        return [b.block_id for b in self.blocks[0] if b.block_hash is None]


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_block_queue: deque[KVCacheBlock] = deque(self.blocks)
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.cached_block_hash_to_block: dict[bytes, KVCacheBlock] = {}

    def get_num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def get_cached_block(self, block_hash: bytes, group_id: int) -> Optional[KVCacheBlock]:
        return self.cached_block_hash_to_block.get(make_block_hash_with_group_id(block_hash,
                                                                                 group_id))

    def get_new_blocks(self, n: int) -> list[KVCacheBlock]:
        out = []
        for _ in range(n):
            blk = self.free_block_queue.popleft()
            self._evict(blk)
            blk.ref_cnt = 1
            out.append(blk)
        return out

    def touch(self, blocks) -> None:
        for blk in blocks:
            if blk.is_null:
                continue
            if blk.ref_cnt == 0:
                self.free_block_queue.remove(blk)
            blk.ref_cnt += 1

    def free_blocks(self, ordered_blocks) -> None:
        """Blocks whose last reference goes are appended to the free queue in this order."""
        for blk in ordered_blocks:
            if blk.is_null:
                continue
            blk.ref_cnt -= 1
            if blk.ref_cnt == 0:
                self.free_block_queue.append(blk)

    def cache_block(self, blk: KVCacheBlock, block_hash: bytes, group_id: int) -> None:
        if blk.block_hash is None:
            blk.block_hash = make_block_hash_with_group_id(block_hash, group_id)
            self.cached_block_hash_to_block.setdefault(blk.block_hash, blk)

    def _evict(self, blk: KVCacheBlock) -> None:
        if blk.block_hash is not None and self.cached_block_hash_to_block.get(
                blk.block_hash) is blk:
            del self.cached_block_hash_to_block[blk.block_hash]
        blk.reset_hash()

    def evict_blocks(self, block_ids) -> None:
        for block_id in block_ids:
            self._evict(self.blocks[block_id])


class _GroupManager:
    """One KV cache group's block tables (full attention; SlidingWindowSpec: sliding window)."""

    def __init__(self, group_id: int, spec, block_size: int, pool: BlockPool,
                 hash_block_size: int) -> None:
        self.group_id = group_id
        self.block_size = spec.block_size if spec is not None else block_size
        self.sliding_window = spec.sliding_window if isinstance(spec, SlidingWindowSpec) else None
        self.pool = pool
        self.hash_block_size = hash_block_size
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = defaultdict(list)
        self.num_cached_block: dict[str, int] = {}

    def hashes(self, request):
        if self.block_size == self.hash_block_size:
            return request.block_hashes
        return BlockHashListWithBlockSize(request.block_hashes, self.hash_block_size,
                                          self.block_size)

    def find_longest_cache_hit(self, hashes, max_length: int) -> list[KVCacheBlock]:
        max_blocks = min(max_length // self.block_size, len(hashes))
        if self.sliding_window is None:
            hits = []
            for i in range(max_blocks):
                blk = self.pool.get_cached_block(hashes[i], self.group_id)
                if blk is None:
                    break
                hits.append(blk)
            return hits
        # Sliding window: the last cdiv(window - 1, block_size) blocks of the hit must be
        # cached; the ones before it are out of the window (null).
        needed = cdiv(self.sliding_window - 1, self.block_size)
        hits = [self.pool.null_block] * max_blocks
        run = 0
        for i in range(max_blocks - 1, -1, -1):
            blk = self.pool.get_cached_block(hashes[i], self.group_id)
            if blk is None:
                run = 0
                continue
            hits[i] = blk
            run += 1
            if run >= needed:
                return hits[:i + run]
        return hits[:run]  # only a run from the first block (shorter than the window) is a hit

    def skipped_blocks(self, num_computed_tokens: int) -> int:
        """Leading blocks that the next token's attention does not read."""
        if self.sliding_window is None:
            return 0
        return max(num_computed_tokens - self.sliding_window + 1, 0) // self.block_size

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        blocks = self.req_to_blocks.get(request_id, [])
        removed = []
        for i in range(min(self.skipped_blocks(num_computed_tokens), len(blocks)) - 1, -1, -1):
            if blocks[i].is_null:
                break  # the ones before were nulled earlier
            removed.append(blocks[i])
            blocks[i] = self.pool.null_block
        self.pool.free_blocks(removed)

    def num_blocks_to_allocate(self, request_id: str, num_tokens: int, computed: Sequence,
                               total_computed_tokens: int) -> int:
        have = len(self.req_to_blocks.get(request_id, ())) + len(computed)
        start = max(have, self.skipped_blocks(total_computed_tokens))
        return max(cdiv(num_tokens, self.block_size) - start, 0)

    def allocate(self, request_id: str, num_tokens: int, computed: Sequence,
                 total_computed_tokens: int) -> list[KVCacheBlock]:
        blocks = self.req_to_blocks[request_id]
        first_new = len(blocks)
        blocks.extend(computed)
        required = cdiv(num_tokens, self.block_size)
        while len(blocks) < min(self.skipped_blocks(total_computed_tokens), required):
            blocks.append(self.pool.null_block)
        blocks.extend(self.pool.get_new_blocks(max(required - len(blocks), 0)))
        return blocks[first_new + len(computed):]

    def cache_blocks(self, request, num_tokens: int) -> None:
        rid = request.request_id
        blocks = self.req_to_blocks.get(rid, [])
        hashes = self.hashes(request)
        n = min(num_tokens // self.block_size, len(hashes), len(blocks))
        for i in range(self.num_cached_block.get(rid, 0), n):
            if not blocks[i].is_null:
                self.pool.cache_block(blocks[i], hashes[i], self.group_id)
        self.num_cached_block[rid] = max(n, self.num_cached_block.get(rid, 0))

    def free(self, request_id: str) -> None:
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        self.pool.free_blocks(reversed(blocks))  # tail blocks are evicted first


class KVCacheManager:
    def __init__(self, kv_cache_config, enable_caching: bool = True,
                 scheduler_block_size: int = 16, hash_block_size: Optional[int] = None) -> None:
        self.kv_cache_config = kv_cache_config
        self.block_size = scheduler_block_size
        self.hash_block_size = hash_block_size or scheduler_block_size
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(kv_cache_config.num_blocks, enable_caching)
        self.groups = [_GroupManager(i, g.kv_cache_spec, scheduler_block_size, self.block_pool,
                                     self.hash_block_size)
                       for i, g in enumerate(kv_cache_config.kv_cache_groups)]
        self.empty_kv_cache_blocks = KVCacheBlocks(tuple(() for _ in self.groups))

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.get_num_free_blocks()

    @property
    def usage(self) -> float:
        usable = len(self.block_pool.blocks) - 1
        return 1.0 - self.num_free_blocks / usable if usable else 0.0

    def new_step_starts(self) -> None:
        return

    def take_events(self) -> list:
        return []  # KV cache events are off (vLLM: kv_events_config.enable_kv_cache_events)

    def get_computed_blocks(self, request) -> tuple[KVCacheBlocks, int]:
        """The local prefix-cache hit: blocks per group and its length in tokens."""
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0
        # The last token is always recomputed (vLLM needs its logits).
        hit = (request.num_tokens - 1) // self.block_size * self.block_size
        while True:
            found = [g.find_longest_cache_hit(g.hashes(request), hit) for g in self.groups]
            shortest = min(len(f) * g.block_size for f, g in zip(found, self.groups))
            shortest = shortest // self.block_size * self.block_size
            if shortest == hit:
                break
            hit = shortest
        blocks = tuple(f[:hit // g.block_size] for f, g in zip(found, self.groups))
        return KVCacheBlocks(blocks), hit

    def allocate_slots(self, request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: Optional[KVCacheBlocks] = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False, reserved_blocks: int = 0
                       ) -> Optional[KVCacheBlocks]:
        """Blocks for the request's next num_new_tokens tokens (after its new local hit and
        external tokens), or None when they do not fit in the free blocks less
        reserved_blocks. Returns the blocks appended to each group's table."""
        rid = request.request_id
        computed = (new_computed_blocks.blocks if new_computed_blocks is not None
                    else self.empty_kv_cache_blocks.blocks)
        total_computed = (request.num_computed_tokens + num_new_computed_tokens +
                          num_external_computed_tokens)
        num_tokens = total_computed + num_new_tokens + num_lookahead_tokens
        for g in self.groups:
            g.remove_skipped_blocks(rid, request.num_computed_tokens)
        need = sum(g.num_blocks_to_allocate(rid, num_tokens, c, total_computed)
                   for g, c in zip(self.groups, computed))
        evictable_hits = len({b.block_id for c in computed for b in c
                              if b.ref_cnt == 0 and not b.is_null})
        if need > self.num_free_blocks - evictable_hits - reserved_blocks:
            return None
        for c in computed:  # a hit block leaves the free queue
            self.block_pool.touch(c)
        new = tuple(g.allocate(rid, num_tokens, c, total_computed)
                    for g, c in zip(self.groups, computed))
        if self.enable_caching and not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return KVCacheBlocks(new)

    def num_blocks_needed(self, request, num_tokens: int) -> int:
        """New blocks the request needs to hold num_tokens tokens."""
        return sum(g.num_blocks_to_allocate(request.request_id, num_tokens, (),
                                            request.num_computed_tokens) for g in self.groups)

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        for g in self.groups:
            g.cache_blocks(request, num_computed_tokens)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        for g in self.groups:
            g.remove_skipped_blocks(request_id, num_computed_tokens)

    def free(self, request) -> None:
        for g in self.groups:
            g.free(request.request_id)

    def evict_blocks(self, block_ids) -> None:
        self.block_pool.evict_blocks(block_ids)

    def evict_cached(self, block_hashes) -> None:
        """Drops these hashes from the prefix cache of every group (as if other requests had
        reused the blocks): a test's way to a local miss."""
        cached = self.block_pool.cached_block_hash_to_block
        for h in block_hashes:
            for g in self.groups:
                blk = cached.pop(make_block_hash_with_group_id(h, g.group_id), None)
                if blk is not None:
                    blk.reset_hash()

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks(tuple(list(g.req_to_blocks.get(request_id, []))
                                   for g in self.groups))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def get_block_ids_for_computed_tokens(self, request_id: str,
                                          num_computed_tokens: int) -> tuple[list[int], ...]:
        """Each group's blocks holding the first num_computed_tokens tokens (the last may be
        partial)."""
        return tuple([b.block_id for b in g.req_to_blocks.get(request_id, [])
                      [:cdiv(num_computed_tokens, g.block_size)]] for g in self.groups)
