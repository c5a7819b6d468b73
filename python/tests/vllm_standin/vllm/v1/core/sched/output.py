"""Stand-in of vllm/v1/core/sched/output.py (the newest copy read, commit unknown; its
KVConnectorBlockState is the one 00f4240e's scheduler builds; see ../../../../README.md):
NewRequestData, CachedRequestData, KVConnectorBlockState, SchedulerOutput, with the fields a
connector reads (not the encoder, structured-output, speculative or elastic ones)."""

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: Optional[list[int]]
    mm_features: list
    sampling_params: Any
    pooling_params: Any
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lora_request: Any
    prompt_embeds: Any = None
    prefill_token_ids: Optional[list[int]] = None

    @classmethod
    def from_request(cls, request, block_ids: tuple[list[int], ...]) -> "NewRequestData":
        return cls(req_id=request.request_id, prompt_token_ids=request.prompt_token_ids,
                   mm_features=[], sampling_params=request.sampling_params, pooling_params=None,
                   block_ids=block_ids, num_computed_tokens=request.num_computed_tokens,
                   lora_request=None)


@dataclass
class CachedRequestData:
    req_ids: list[str]
    # For a request in resumed_req_ids new_block_ids replaces its block ids; for the others it
    # is appended.
    resumed_req_ids: set[str]
    new_token_ids: list[list[int]]
    all_token_ids: dict[str, list[int]]
    new_block_ids: list[Optional[tuple[list[int], ...]]]
    num_computed_tokens: list[int]
    num_output_tokens: list[int]

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @classmethod
    def make_empty(cls) -> "CachedRequestData":
        return cls([], set(), [], {}, [], [], [])


@dataclass
class KVConnectorBlockState:
    """The block table of every request scheduled this step, set on the SchedulerOutput only
    while build_connector_meta runs (None when the workers see it)."""

    req_ids: set[str]
    resolve_block_ids: Callable[[str], tuple[list[int], ...]]
    boundary_state_offloads: dict[str, list[tuple[int, int, int]]]

    def get_block_ids(self, req_id: str) -> Optional[tuple[list[int], ...]]:
        if req_id not in self.req_ids:
            return None
        return self.resolve_block_ids(req_id)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    scheduled_encoder_inputs: dict[str, list[int]]
    num_common_prefix_blocks: list[int]
    finished_req_ids: set[str]
    free_encoder_mm_hashes: list[str]
    preempted_req_ids: Optional[set[str]] = None
    pending_structured_output_tokens: bool = False
    kv_connector_metadata: Any = None
    # Whether a scheduled request needs KV the connector loads in this step (synchronously):
    # the workers then start loading before the forward, else after it.
    has_sync_kv_loads: bool = False
    ec_connector_metadata: Any = None
    new_block_ids_to_zero: Optional[list[int]] = None
    kv_cache_block_copies: Optional[list] = None
    block_table_updates: Optional[dict[str, tuple[list[int], ...]]] = None
    kv_connector_block_state: Optional[KVConnectorBlockState] = None
