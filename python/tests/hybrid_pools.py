"""Emulated SGLang host pools of hybrid models for tests (CPU tensors), in the style of
host_pool.py: a Mamba state pool shaped like SGLang's MambaPoolHost, a DSA-indexer pool shaped
like DSAIndexerPoolHost, an allocating KV pool, and make_group(), which puts them in a
HostPoolGroup as SGLang's hybrid pool assembler does.

  EmulatedMambaPool  page_size 1 (a page is one request's state slot); page_first buffers
      temporal_buffer  (size, layers, 1, *temporal_shape)   temporal_dtype
      conv_buffer[j]   (size, layers, 1, *conv_shapes[j])   dtype
    get_page_buffer_meta: per slot [temporal, conv_0, conv_1, ...] (temporal left out when its
    shape has no elements), sizes layers * itemsize * elements of each: unequal sizes.
    Flat page: the bytes of the slot's temporal state, then of each conv state (uint8).
  EmulatedIndexerPool  the anchor's page_size; page_first buffer
      index_k_with_scale_buffer (page_num, layers, 1, page_size * token_bytes) uint8
    get_page_buffer_meta: one pointer per page, layers * page_size * token_bytes bytes.

make_group needs SGLang's memory_pool_host (the stand-in under sglang_standin/) importable;
the pools themselves need nothing from SGLang.
"""

from __future__ import annotations

import math

import torch

from host_pool import EmulatedHostPool

PAGE_FIRST = ("page_first", "page_first_direct")


def _itemsize(dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _fill_random(tensors, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for t in tensors:
        flat = t.view(-1).view(torch.uint8)
        whole = flat.numel() // 8 * 8
        flat[:whole].view(torch.int64).random_(generator=g)
        flat[whole:].random_(0, 256, generator=g)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


class SlotAllocator:
    """Host slot allocation as SGLang's host pools do it: page-aligned runs from a free list
    (alloc returns None when short), free returns slots to it. Needs self.size, self.page_size."""

    def clear(self) -> None:
        self.free_slots = torch.arange(self.size, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int):
        assert need_size % self.page_size == 0, "allocations are whole pages"
        if need_size > self.available_size():
            return None
        taken, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        return taken

    def free(self, indices) -> int:
        if len(indices) == 0:
            return 0
        self.free_slots = torch.cat([self.free_slots, indices.cpu().to(torch.int64).flatten()])
        return len(indices)


class EmulatedKVPool(SlotAllocator, EmulatedHostPool):
    """host_pool.EmulatedHostPool (same arguments) with what a HostPoolGroup anchor needs: an
    allocator, device, size_per_token, start_layer / end_layer."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.device = "cpu"
        self.start_layer, self.end_layer = 0, self.layer_num - 1
        self.size_per_token = self.planes * self.layer_num * self.token_bytes
        self.can_use_write_back_jit = True
        self.clear()

    @classmethod
    def wrap(cls, pool: EmulatedHostPool) -> "EmulatedKVPool":
        """An EmulatedKVPool over the same bytes as `pool` (writes to either show in both)."""
        return cls(mla=pool.is_mla, layout=pool.layout, layer_num=pool.layer_num,
                   page_size=pool.page_size, page_num=pool.page_num, heads=pool.head_num,
                   head_dim=pool.head_dim, dtype=pool.dtype, storage=_bytes(pool.kv_buffer))

    def get_size_per_token(self) -> int:
        return self.size_per_token

    def get_ksize_per_token(self) -> int:
        return self.layer_num * self.token_bytes


class EmulatedMambaPool(SlotAllocator):
    """MambaPoolHost-like state pool: one slot per page (page_size 1), `slots` slots."""

    def __init__(self, layers: int, slots: int, temporal_shape, conv_shapes,
                 dtype=torch.bfloat16, temporal_dtype=torch.float32, layout: str = "page_first"):
        if layout not in PAGE_FIRST:
            raise ValueError(f"Unsupported layout: {layout}")
        self.page_size = 1
        self.layout = layout
        self.device = "cpu"
        self.num_mamba_layers = layers
        self.temporal_state_shape = tuple(temporal_shape)
        self.conv_state_shapes = [tuple(s) for s in conv_shapes]
        self.temporal_state_elem_size = math.prod(self.temporal_state_shape)
        self.conv_state_elem_sizes = [math.prod(s) for s in self.conv_state_shapes]
        self.conv_dtype = dtype
        self.temporal_dtype = temporal_dtype
        self.dtype = dtype
        self.size = slots
        self.page_num = slots
        self.size_per_token = self.get_size_per_token()
        self.temporal_buffer = torch.zeros((slots, layers, 1, *self.temporal_state_shape),
                                           dtype=temporal_dtype)
        self.conv_buffer = [torch.zeros((slots, layers, 1, *s), dtype=dtype)
                            for s in self.conv_state_shapes]
        self.can_use_write_back_jit = True
        self.clear()

    def get_size_per_token(self) -> int:
        conv = sum(n * _itemsize(self.conv_dtype) for n in self.conv_state_elem_sizes)
        temporal = self.temporal_state_elem_size * _itemsize(self.temporal_dtype)
        return (conv + temporal) * self.num_mamba_layers

    def get_ksize_per_token(self) -> int:
        return self.get_size_per_token()

    def get_hybrid_pool_buffer(self):
        return [self.temporal_buffer, *self.conv_buffer]

    def _slot_tensors(self, index):
        i = int(index)
        return [self.temporal_buffer[i], *(buf[i] for buf in self.conv_buffer)]

    def get_page_buffer_meta(self, indices):
        """Per slot: [temporal ptr (if any), conv_0 ptr, ...], sizes [temporal, conv_0, ...]."""
        layers = self.num_mamba_layers
        t_size = layers * _itemsize(self.temporal_dtype) * self.temporal_state_elem_size
        c_sizes = [layers * _itemsize(self.conv_dtype) * n for n in self.conv_state_elem_sizes]
        ptrs, sizes = [], []
        for slot in indices.tolist():
            if self.temporal_state_elem_size > 0:
                ptrs.append(self.temporal_buffer.data_ptr() + slot * t_size)
                sizes.append(t_size)
            for buf, c_size in zip(self.conv_buffer, c_sizes):
                ptrs.append(buf.data_ptr() + slot * c_size)
                sizes.append(c_size)
        return ptrs, sizes

    def get_data_page(self, index, flat: bool = True):
        return torch.cat([_bytes(t) for t in self._slot_tensors(index)])

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.page_size * self.size_per_token, dtype=torch.uint8)

    def set_from_flat_data_page(self, index, data_page) -> None:
        data = _bytes(data_page)
        start = 0
        for t in self._slot_tensors(index):
            n = t.numel() * t.element_size()
            t.copy_(data[start:start + n].view(t.dtype).view(t.shape))
            start += n

    def fill_random(self, seed: int) -> None:
        _fill_random(self.get_hybrid_pool_buffer(), seed)

    def slot_bytes(self, slot: int) -> bytes:
        """Every byte of one slot (temporal first), for comparisons."""
        return self.get_data_page(slot).numpy().tobytes()


class EmulatedIndexerPool(SlotAllocator):
    """DSAIndexerPoolHost-like pool beside an anchor KV pool (same page_size and slots): per
    token index_head_dim bytes plus 4 bytes of scale per quant_block_size of them."""

    def __init__(self, anchor, layer_num: int, index_head_dim: int = 128,
                 quant_block_size: int = 128, layout: str = "page_first"):
        if layout not in PAGE_FIRST:
            raise ValueError(f"Unsupported layout: {layout}")
        self.page_size = anchor.page_size
        self.size = anchor.size
        self.page_num = anchor.size // anchor.page_size
        self.layout = layout
        self.device = "cpu"
        self.layer_num = layer_num
        self.start_layer, self.end_layer = 0, layer_num - 1
        self.dtype = self.indexer_dtype = torch.uint8
        self.index_head_dim = index_head_dim
        self.indexer_quant_block_size = quant_block_size
        self.indexer_size_per_token = index_head_dim + index_head_dim // quant_block_size * 4
        self.indexer_page_stride_size = self.indexer_size_per_token * self.page_size
        self.size_per_token = self.indexer_size_per_token * layer_num
        self.index_k_with_scale_buffer = torch.zeros(
            (self.page_num, layer_num, 1, self.indexer_page_stride_size), dtype=torch.uint8)
        self.can_use_write_back_jit = False
        self.clear()

    def get_size_per_token(self) -> int:
        return self.size_per_token

    def get_ksize_per_token(self) -> int:
        return self.size_per_token

    def get_hybrid_pool_buffer(self):
        return [self.index_k_with_scale_buffer]

    @property
    def page_stride_bytes(self) -> int:
        return self.layer_num * self.indexer_page_stride_size

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        base = self.index_k_with_scale_buffer.data_ptr()
        ptrs = [base + (slot // self.page_size) * self.page_stride_bytes
                for slot in indices.tolist()[:: self.page_size]]
        return ptrs, [self.page_stride_bytes] * len(ptrs)

    def get_data_page(self, index, flat: bool = True):
        p = int(index) // self.page_size
        page = self.index_k_with_scale_buffer[p:p + 1]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.page_stride_bytes, dtype=torch.uint8)

    def set_from_flat_data_page(self, index, data_page) -> None:
        p = int(index) // self.page_size
        view = self.index_k_with_scale_buffer[p:p + 1]
        view.copy_(_bytes(data_page).view(view.shape))

    def fill_random(self, seed: int) -> None:
        _fill_random(self.get_hybrid_pool_buffer(), seed)

    def page_bytes(self, page: int) -> bytes:
        return self.get_data_page(page * self.page_size).numpy().tobytes()


def make_group(kv_pool, extra: dict, anchor_logical: bool = False):
    """A HostPoolGroup: PoolName.KV first, the anchor, then `extra` ({PoolName: pool}) in order;
    device_pool None, identity layer mappers. A plain EmulatedHostPool KV pool is wrapped as an
    EmulatedKVPool over the same bytes (group.get_pool(PoolName.KV) is then that wrapper).
    anchor_logical: the KV entry is a LogicalHostPool of kv_pool's size, page size and layout
    (no bytes, as DeepSeek V4 has), and kv_pool's data is not in the group."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.memory_pool_host import HostPoolGroup, LogicalHostPool, PoolEntry

    if anchor_logical and not isinstance(kv_pool, LogicalHostPool):
        kv_pool = LogicalHostPool(kv_pool.size, kv_pool.page_size, layout=kv_pool.layout)
    elif isinstance(kv_pool, EmulatedHostPool) and not isinstance(kv_pool, EmulatedKVPool):
        kv_pool = EmulatedKVPool.wrap(kv_pool)

    def identity(layer_id):
        return layer_id

    entries = [PoolEntry(PoolName.KV, kv_pool, None, identity, is_primary_index_anchor=True)]
    entries += [PoolEntry(name, pool, None, identity) for name, pool in extra.items()]
    return HostPoolGroup(entries)
