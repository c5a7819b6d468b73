"""Stand-in of the hybrid-model parts of sglang.srt.mem_cache.memory_pool_host at SGLang 8905cbd
(see ../../../README.md): PoolEntry, HostPoolGroup (the host pool a HybridCacheController and its
storage backend see: one object standing for several named pools) and LogicalHostPool (an anchor
pool with slots but no bytes, as DeepSeek V4 uses). Device transfers are left out (no GPU)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import torch

from sglang.srt.mem_cache.hicache_storage import PoolName


@dataclass
class PoolEntry:
    """One named pool of a HostPoolGroup; layer_mapper maps a model layer id to the pool's own
    (None: not in this pool). The callbacks are what HybridCacheController's allocation uses."""

    name: PoolName
    host_pool: Any
    device_pool: Any
    layer_mapper: Callable[[int], Optional[int]]
    is_primary_index_anchor: bool = False
    host_evict_fn: Optional[Callable] = None
    device_evict_fn: Optional[Callable] = None
    device_alloc_fn: Optional[Callable] = None
    device_free_fn: Optional[Callable] = None


class HostPoolGroup:
    """Several host pools behind one host-pool face. Everything a plain host pool answers
    (layout, page size, kv_buffer, flat pages, page-buffer metadata, alloc) comes from the anchor
    entry: the one marked is_primary_index_anchor, else the first. There is no layer_num."""

    def __init__(self, entries: List[PoolEntry]):
        if not entries:
            raise ValueError("HostPoolGroup requires at least one pool entry.")
        self.entries = entries
        self.entry_map = {entry.name: entry for entry in entries}
        anchors = [entry for entry in entries if entry.is_primary_index_anchor]
        self.anchor_entry = anchors[0] if anchors else entries[0]
        anchor = self.anchor_entry.host_pool
        self.layout = anchor.layout
        self.page_size = anchor.page_size
        self.device = anchor.device
        self.size = anchor.size
        self.can_use_write_back_jit = all(
            getattr(entry.host_pool, "can_use_write_back_jit", False) for entry in entries)

    @property
    def _anchor(self):
        return self.anchor_entry.host_pool

    @property
    def kv_buffer(self):
        return self._anchor.kv_buffer

    @property
    def size_per_token(self):
        return self._anchor.size_per_token

    @property
    def allocator(self):
        return self._anchor.allocator

    @property
    def dtype(self):
        return self._anchor.dtype

    @property
    def start_layer(self):
        return self._anchor.start_layer

    @property
    def end_layer(self):
        return self._anchor.end_layer

    def get_ksize_per_token(self):
        return self._anchor.get_ksize_per_token()

    def get_pool(self, name: PoolName):
        return self.entry_map[name].host_pool

    def get_page_buffer_meta(self, indices):
        return self._anchor.get_page_buffer_meta(indices)

    def is_stride_page_aligned(self, page_size_bytes: int = 4096) -> bool:
        return self._anchor.is_stride_page_aligned(page_size_bytes)

    def clear(self) -> None:
        for entry in self.entries:
            entry.host_pool.clear()

    def available_size(self):
        return self._anchor.available_size()

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        return self._anchor.alloc(need_size)

    def free(self, indices: torch.Tensor) -> int:
        return self._anchor.free(indices)

    def get_data_page(self, index, flat: bool = True):
        return self._anchor.get_data_page(index, flat)

    def get_dummy_flat_data_page(self):
        return self._anchor.get_dummy_flat_data_page()

    def set_from_flat_data_page(self, index: int, data_page) -> None:
        return self._anchor.set_from_flat_data_page(index, data_page)


class LogicalHostPool:
    """An anchor with page-aligned slots and no data: kv_buffer None, layer_num 0, no page-buffer
    metadata (None), empty flat pages. The group's other pools carry the bytes (via the v2 API)."""

    def __init__(self, size: int, page_size: int, layout: str = "layer_first"):
        if size % page_size != 0:
            raise ValueError(f"LogicalHostPool size must be page-aligned, got size={size}, "
                             f"page_size={page_size}")
        self.size = size
        self.page_size = page_size
        self.device = "cpu"
        self.layout = layout
        self.dtype = torch.uint8
        self.layer_num = 0
        self.start_layer = 0
        self.end_layer = 0
        self.kv_buffer = None
        self.size_per_token = 0
        self.allocator = None
        self.can_use_write_back_jit = True
        self.lock = threading.RLock()
        self.clear()

    def clear(self):
        with self.lock:
            self.free_slots = torch.arange(self.size, dtype=torch.int64)

    def available_size(self):
        return len(self.free_slots)

    def _check_aligned(self, n: int, what: str) -> None:
        if n % self.page_size != 0:
            raise ValueError(f"LogicalHostPool {what} must be page-aligned, got {n}, "
                             f"page_size={self.page_size}")

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        self._check_aligned(need_size, "allocation")
        with self.lock:
            if need_size > self.available_size():
                return None
            taken, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
            return taken

    def free(self, indices: torch.Tensor) -> int:
        self._check_aligned(len(indices), "free")
        with self.lock:
            self.free_slots = torch.cat(
                [self.free_slots, indices.to(dtype=torch.int64, device="cpu").flatten()])
        return len(indices)

    def get_data_page(self, index, flat=True):
        return torch.empty(0, dtype=torch.uint8)

    def get_dummy_flat_data_page(self):
        return torch.empty(0, dtype=torch.uint8)

    def set_from_flat_data_page(self, index, data_page):
        pass

    def get_page_buffer_meta(self, indices):
        return None

    def get_ksize_per_token(self):
        return 0
