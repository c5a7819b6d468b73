"""Stand-in of vllm/v1/request.py (see ../../README.md): the Request fields a connector reads
(request_id, prompt_token_ids, all_token_ids, num_tokens, num_prompt_tokens,
num_computed_tokens, block_hashes (one per hash block), kv_transfer_params,
skip_reading_prefix_cache, status, num_preemptions; drop_stale_output, which a preemption sets
from the connector's requires_kv_delivery) and RequestStatus. 00f4240e has no
num_publishable_block_hashes (003df296's EAGLE publication fence)."""

import enum
from typing import Any, Callable, Optional

from vllm.sampling_params import SamplingParams


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    # Anything after PREEMPTED is a finished status.
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()
    FINISHED_REPETITION = enum.auto()

    @staticmethod
    def is_finished(status: "RequestStatus") -> bool:
        return status > RequestStatus.PREEMPTED


class Request:
    def __init__(self, request_id: str, prompt_token_ids: list[int],
                 sampling_params: SamplingParams, block_hasher: Optional[Callable] = None,
                 cache_salt: Optional[str] = None) -> None:
        self.request_id = request_id
        self.sampling_params = sampling_params
        self.status = RequestStatus.WAITING
        self.max_tokens = sampling_params.max_tokens
        self.kv_transfer_params: Optional[dict[str, Any]] = None
        if sampling_params.extra_args is not None:
            self.kv_transfer_params = sampling_params.extra_args.get("kv_transfer_params")
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = len(prompt_token_ids)
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = list(prompt_token_ids)
        self.spec_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.cache_salt = cache_salt
        self.num_preemptions = 0
        self.block_hashes: list[bytes] = []
        self.drop_stale_output = False
        self._block_hasher = block_hasher
        self.update_block_hashes()
        self.skip_reading_prefix_cache = bool(sampling_params.skip_reading_prefix_cache)

    @property
    def all_token_ids(self) -> tuple:  # vLLM: a read-only ConstantList view
        return tuple(self._all_token_ids)

    @property
    def output_token_ids(self) -> tuple:
        return tuple(self._output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self._all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def append_output_token_ids(self, token_ids) -> None:
        token_ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        self._output_token_ids.extend(token_ids)
        self._all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def update_block_hashes(self) -> None:
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))

    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)
