"""Stand-in of vllm/v1/kv_cache_interface.py (the newest copy read, commit unknown; the layout
standardization of PR #51718, see ../../README.md): the attention specs, KVCacheTensor,
KVCacheGroupSpec, KVCacheConfig, and create_kv_cache_views, which gives each layer of a group a
4D [num_blocks, H, N, C] view (C in dtype elements) into the group's one buffer, made with
torch.as_strided in the physical order of the resolved layout."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Optional

import torch

from vllm.v1.kv_cache_layout import _DIM_B, _DIM_L, KVCacheLayout


def _dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int  # tokens in a block


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: Optional[int] = None  # None: head_size (MHA); MLA specs set 0

    def __post_init__(self) -> None:
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    @property
    def num_heads(self) -> int:  # H of the page
        return self.num_kv_heads

    @property
    def num_states(self) -> int:  # N of the page
        return self.block_size

    @property
    def state_content_size_bytes(self) -> int:  # C of the page, in bytes: K then V
        return (self.head_size + self.head_size_v) * _dtype_size(self.dtype)

    @property
    def page_size_bytes(self) -> int:
        return self.num_heads * self.num_states * self.state_content_size_bytes


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    sliding_window: Optional[int] = None  # set when HMA is off and the layer slides


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    head_size_v: int = 0  # one latent vector per token, no separate V


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int


@dataclass
class KVCacheTensor:
    """Layer layers[l]'s page of block b starts offset + l * layer_stride + b * block_stride
    bytes into a backing allocation of size bytes."""

    size: int
    layers: list[str]
    layer_stride: int
    block_stride: int
    offset: int = 0


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: Optional[KVCacheSpec]
    is_eagle_group: bool = False
    enable_kv_transfer: bool = True


def _one_full_attention_group() -> list[KVCacheGroupSpec]:
    # A test's shortcut (vLLM always fills the groups): one group whose spec is not described.
    return [KVCacheGroupSpec(layer_names=[], kv_cache_spec=None)]


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor] = field(default_factory=list)
    kv_cache_groups: list[KVCacheGroupSpec] = field(default_factory=_one_full_attention_group)
    kv_cache_layout: Optional[str] = None  # resolved by the engine core, adopted by workers


def compute_layer_kv_cache_shape_bytes(spec: AttentionSpec, num_blocks: int) -> tuple[int, ...]:
    """(B, H, N, C) of one layer, C in bytes."""
    return (num_blocks, spec.num_heads, spec.num_states, spec.state_content_size_bytes)


def compute_layout_strides(spec: AttentionSpec, num_blocks: int, num_layers: int,
                           layout: KVCacheLayout,
                           fixed_strides: tuple = (None,) * 5) -> tuple[int, ...]:
    """Byte strides in logical [L, B, H, N, C] order for a dense buffer laid out by layout."""
    shape = (num_layers, *compute_layer_kv_cache_shape_bytes(spec, num_blocks))
    strides = [0] * 5
    step = 1
    for dim in reversed(layout.stride_order):
        strides[dim] = fixed_strides[dim] or step
        step = strides[dim] * shape[dim]
    return tuple(strides)


def kv_cache_tensor_for_group(spec: AttentionSpec, num_blocks: int, layer_names: list[str],
                              layout: KVCacheLayout) -> KVCacheTensor:
    """The placement of a group's layers in one dense buffer (what vLLM's KV cache config
    computes for an unpadded group)."""
    strides = compute_layout_strides(spec, num_blocks, len(layer_names), layout)
    return KVCacheTensor(size=len(layer_names) * num_blocks * spec.page_size_bytes,
                         layers=list(layer_names), layer_stride=strides[_DIM_L],
                         block_stride=strides[_DIM_B])


def create_kv_cache_views(raw: torch.Tensor, spec: AttentionSpec, num_blocks: int,
                          layout: KVCacheLayout, kv_cache_tensor: KVCacheTensor
                          ) -> list[torch.Tensor]:
    """One [B, H, N, C] view per layer of a flat uint8 buffer (C in spec.dtype elements)."""
    num_layers = len(kv_cache_tensor.layers)
    shape = (num_layers, *compute_layer_kv_cache_shape_bytes(spec, num_blocks))
    strides = compute_layout_strides(
        spec, num_blocks, num_layers, layout,
        fixed_strides=(kv_cache_tensor.layer_stride, kv_cache_tensor.block_stride, None, None,
                       None))
    assert kv_cache_tensor.offset + prod(shape) <= raw.numel()
    view_5d = torch.as_strided(raw, size=shape, stride=strides,
                               storage_offset=raw.storage_offset() + kv_cache_tensor.offset)
    return [view_5d[layer].view(spec.dtype) for layer in range(num_layers)]
