"""Stand-in of vllm/v1/kv_cache_layout.py (read at 14f7a27c; RFC #42082 / PR #51718, see
../../README.md): the physical order of a KV cache group's one buffer. Every allocation is
logically [L, B, H, N, C]: layers of the group, blocks, head slots (num_kv_heads; 1 for MLA),
states per block (block_size tokens), content bytes of one (head, token) cell. A member's value
lists the logical axes from the outermost physical axis inwards."""

from enum import Enum

_DIM_L, _DIM_B, _DIM_H, _DIM_N, _DIM_C = 0, 1, 2, 3, 4


class KVCacheLayout(Enum):
    LBHNC = (0, 1, 2, 3, 4)
    LBNHC = (0, 1, 3, 2, 4)  # the default
    LHBNC = (0, 2, 1, 3, 4)
    BLHNC = (1, 0, 2, 3, 4)
    BLNHC = (1, 0, 3, 2, 4)
    BHLNC = (1, 2, 0, 3, 4)

    @property
    def stride_order(self) -> tuple[int, ...]:
        return self.value

    @property
    def layer_view_order(self) -> tuple[int, ...]:
        """Physical order of the axes of one layer's 4D [B, H, N, C] view."""
        return tuple(i - 1 for i in self.value if i != _DIM_L)

    @property
    def is_layer_compact(self) -> bool:  # L outermost
        return self.value[_DIM_L] == 0

    @property
    def is_block_contiguous(self) -> bool:  # [H, N, C] contiguous within a block
        return self.value[-3:] == (_DIM_H, _DIM_N, _DIM_C)

    @property
    def is_block_compact(self) -> bool:  # L and B outermost: each page is one run of bytes
        return set(self.value[:2]) == {_DIM_L, _DIM_B}

    @property
    def is_block_outermost(self) -> bool:
        return self.value[0] == _DIM_B
