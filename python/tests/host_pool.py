"""Emulated SGLang HiCache host pools for tests: CPU tensors shaped like SGLang's
MHATokenToKVPoolHost / MLATokenToKVPoolHost in each host layout, with the same page-buffer
metadata contract (get_page_buffer_meta) and flat-page accessors.

Buffer shapes (token slots `size` = page_num * page_size):
  MHA layer_first        (2, layers, size, heads, head_dim)
  MHA page_first         (2, size, layers, heads, head_dim)
  MHA page_first_direct  (2, page_num, layers, page_size, heads, head_dim)
  MLA layer_first        (layers, size, 1, dim)
  MLA page_first         (size, layers, 1, dim)
  MLA page_first_direct  (page_num, layers, page_size, 1, dim)

get_page_buffer_meta(indices) (indices: page_size slots per page, page-aligned) returns
(pointers, sizes):
  page_first / page_first_direct: per page [K, V] (MHA) or [KV] (MLA), each covering all layers
      of that page: layers * page_size * token_bytes bytes, starting at the page's first slot.
  layer_first: per page, per layer, [K, V] (MHA) or [KV] (MLA), page_size * token_bytes each.
"""

from __future__ import annotations

import torch

LAYOUTS = ("page_first", "page_first_direct", "layer_first")


class EmulatedHostPool:
    def __init__(self, *, mla: bool, layout: str, layer_num: int, page_size: int, page_num: int,
                 heads: int = 2, head_dim: int = 64, dtype=torch.bfloat16, storage=None):
        self.is_mla = mla
        self.layout = layout
        self.layer_num = layer_num
        self.page_size = page_size
        self.page_num = page_num
        self.size = page_num * page_size
        self.dtype = dtype
        self.head_num = 1 if mla else heads
        self.head_dim = head_dim
        planes = () if mla else (2,)
        inner = (self.head_num, head_dim)
        if layout == "layer_first":
            dims = (*planes, layer_num, self.size, *inner)
        elif layout == "page_first":
            dims = (*planes, self.size, layer_num, *inner)
        elif layout == "page_first_direct":
            dims = (*planes, page_num, layer_num, page_size, *inner)
        else:
            raise ValueError(f"unsupported layout {layout}")
        if storage is None:
            self.kv_buffer = torch.zeros(dims, dtype=dtype)
        else:
            # Reuse caller memory (a large uint8 tensor): first-touching hundreds of MiB is slow.
            numel = 1
            for d in dims:
                numel *= d
            nbytes = numel * torch.tensor([], dtype=dtype).element_size()
            assert storage.numel() >= nbytes, "storage too small for the pool"
            self.kv_buffer = storage[:nbytes].view(dtype).view(dims)

    # Bytes of one token of one layer of one plane.
    @property
    def token_bytes(self) -> int:
        return self.head_num * self.head_dim * self.kv_buffer.element_size()

    @property
    def planes(self) -> int:
        return 1 if self.is_mla else 2

    def fill_random(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        flat = self.kv_buffer.view(-1).view(torch.uint8)
        whole = flat.numel() // 8 * 8
        flat[:whole].view(torch.int64).random_(generator=g)  # fast: in place, 8 bytes a draw
        flat[whole:].random_(0, 256, generator=g)

    def page_indices(self, pages) -> torch.Tensor:
        """Host slot indices of whole pages, page_size per page."""
        return torch.cat([torch.arange(p * self.page_size, (p + 1) * self.page_size)
                          for p in pages]).to(torch.int64)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        base = self.kv_buffer.data_ptr()
        tb = self.token_bytes
        plane_bytes = self.layer_num * self.size * tb  # offset from K to V
        firsts = indices.tolist()[:: self.page_size]
        ptrs = []
        if self.layout == "layer_first":
            for first in firsts:
                for layer in range(self.layer_num):
                    k = base + layer * self.size * tb + first * tb
                    ptrs.extend([k] if self.is_mla else [k, k + plane_bytes])
            size = self.page_size * tb
        else:
            for first in firsts:
                k = base + first * self.layer_num * tb
                ptrs.extend([k] if self.is_mla else [k, k + plane_bytes])
            size = self.layer_num * self.page_size * tb
        return ptrs, [size] * len(ptrs)

    # --- flat pages (copy-based interface) ---------------------------------------------------------
    def _page_view(self, index: int):
        p = index // self.page_size
        sl = slice(index, index + self.page_size)
        if self.is_mla:
            if self.layout == "layer_first":
                return self.kv_buffer[:, sl]
            if self.layout == "page_first":
                return self.kv_buffer[sl]
            return self.kv_buffer[p : p + 1]
        if self.layout == "layer_first":
            return self.kv_buffer[:, :, sl]
        if self.layout == "page_first":
            return self.kv_buffer[:, sl]
        return self.kv_buffer[:, p : p + 1]

    def get_data_page(self, index: int, flat: bool = True):
        page = self._page_view(index)
        return page.flatten() if flat else page

    def set_from_flat_data_page(self, index: int, data_page) -> None:
        view = self._page_view(index)
        view.copy_(data_page.reshape(view.shape))

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.planes * self.layer_num * self.page_size * self.head_num
                           * self.head_dim, dtype=self.dtype)

    def page_bytes(self, page: int) -> bytes:
        """Every byte of one page as its flat page holds them: in this layout's order (page_first
        is token-major, the others layer-major); logical_page compares across layouts."""
        return self.get_data_page(page * self.page_size).contiguous().view(torch.uint8).numpy().tobytes()

    def logical_page(self, page: int) -> bytes:
        """Every byte of one page in one order for every layout: (plane, layer, token, head,
        dim), so that pages of pools of different layouts compare."""
        kv = self.kv_buffer.unsqueeze(0) if self.is_mla else self.kv_buffer  # a plane axis
        sl = slice(page * self.page_size, (page + 1) * self.page_size)
        if self.layout == "layer_first":
            view = kv[:, :, sl]
        elif self.layout == "page_first":
            view = kv[:, sl].transpose(1, 2)
        else:
            view = kv[:, page]
        return view.contiguous().view(torch.uint8).numpy().tobytes()
