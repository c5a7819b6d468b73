"""Stand-in of vllm/distributed/kv_transfer/kv_connector/v1/base.py at vLLM 00f4240e (see
../../../../../../README.md): the connector contract a KV connector subclasses, with every
member of that commit and its default.

Worker side, per step (the model runner's order is in v1/worker/kv_connector_model_runner_mixin.py):
handle_preemptions, bind_connector_metadata, start_load_kv (before the forward when the step has
a synchronous load, after it otherwise), per layer wait_for_layer_load / save_kv_layer,
finish_forward, wait_for_save, get_transfer_results (whose default wraps get_finished),
get_block_ids_with_load_errors, get_kv_connector_stats, get_kv_connector_kv_cache_events,
build_connector_worker_meta, clear_connector_metadata.

Scheduler side: bind_kv_cache_manager once the manager exists, on_new_request when a request is
added, get_num_new_matched_tokens / update_state_after_alloc at admission,
build_connector_meta once per schedule(), update_connector_output per step,
request_finished (or request_finished_all_groups for SupportsHMA) once per finished request,
has_pending_block_frees before a preemption, has_pending_push_work, get_kv_connector_stats and
take_events per step.

Removed since 003df296 and absent here: prefer_cross_layer_blocks,
register_cross_layers_kv_cache and the EAGLE prefix-hash publication API."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import torch

# (src caches, dst caches, src block ids, dst block ids, direction)
CopyBlocksOp = Callable[[dict[str, torch.Tensor], dict[str, torch.Tensor], list[int], list[int],
                         Literal["h2d", "d2h"]], None]


@dataclass
class KVConnectorTransferResults:
    """One worker's snapshot of finished asynchronous transfers. A failed receive is reported
    in finished_recving too (the scheduler must leave its wait state)."""

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)
    # request id -> (transfer id, exclusive token boundary, prompt digest)
    prefix_replay_checkpoints: dict[str, tuple[str, int, str]] = field(default_factory=dict)


class SupportsHMA(ABC):
    """Marks a connector that works with the hybrid KV cache manager (several groups)."""

    @abstractmethod
    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict[str, Any] | None]:
        """Once per finished request, before its blocks (one list per group) are freed; True
        keeps them until the request is reported finished sending."""
        raise NotImplementedError


def supports_hma(connector: Any) -> bool:
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0  # the connector of the scheduler process
    WORKER = 1  # the connector of each worker process


class KVConnectorHandshakeMetadata(ABC):  # noqa: B024
    """Serializable out-of-band hand-shake data between P/D workers."""


class KVConnectorMetadata(ABC):  # noqa: B024
    """Scheduler connector -> worker connectors, once per step."""


class KVConnectorWorkerMetadata(ABC):
    """Worker connector -> scheduler connector, once per step; the workers' objects are folded
    with aggregate()."""

    @abstractmethod
    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        pass


class KVConnectorBase_V1(ABC):  # noqa: N801
    @property
    def supports_divergent_local_hybrid_hits(self) -> bool:
        """Whether an external hit can complete a local hybrid hit whose groups disagree."""
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        """True: a request preempted with a hand-off pending is recomputed (its in-flight output
        dropped). Best-effort caches answer False."""
        return self._kv_transfer_config.is_kv_producer

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config) -> None:
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is not None:
            self._kv_transfer_config = vllm_config.kv_transfer_config
        else:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_cache_config = kv_cache_config
        self._kv_cache_manager = None
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    # ---- worker side ----
    def get_mem_pool_context(self) -> AbstractContextManager | None:
        """A context to allocate the KV cache in; None: the engine's default pool."""
        return None

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        return

    def set_host_xfer_buffer_ops(self, copy_operation: CopyBlocksOp):
        return

    def finish_forward(self) -> None:
        """The model no longer reads this step's KV."""
        return

    def reset_capture_state(self) -> None:
        """Undo worker state changed while CUDA graphs were captured."""
        return

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata):
        return

    @abstractmethod
    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        pass

    @abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    @abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata,
                      **kwargs: Any) -> None:
        pass

    @abstractmethod
    def wait_for_save(self):
        """Once per step, steps without a forward included, with the metadata still bound."""

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        sending, recving = self.get_finished(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()))

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    def get_kv_connector_kv_cache_events(self):
        return None

    def get_handshake_metadata(self) -> KVConnectorHandshakeMetadata | None:
        return None

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        return None

    # ---- scheduler side ----
    def bind_kv_cache_manager(self, kv_cache_manager) -> None:
        self._kv_cache_manager = kv_cache_manager
        self.bind_gpu_block_pool(kv_cache_manager.block_pool)

    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        return

    @abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        pass

    @abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        pass

    @abstractmethod
    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        pass

    def on_new_request(self, request) -> None:
        return

    def update_connector_output(self, connector_output):
        return

    def can_load_prefix_replay_checkpoint(self, request, num_local_tokens: int,
                                          num_external_tokens: int) -> bool:
        return False

    def consume_prefix_replay_checkpoint(self, request, num_hit_tokens: int) -> bool:
        return False

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def register_finished_partial_tail(self, request, block_ids: tuple[list[int], ...],
                                       partial_tail_offloads: list[tuple[int, int, int]]) -> bool:
        return False

    def take_events(self) -> Iterable:
        return ()

    def has_pending_block_frees(self) -> bool:
        """Whether transfers in flight will free blocks, so that the scheduler waits for them
        instead of preempting."""
        return False

    def has_pending_push_work(self) -> bool:
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout should not be called "
                            "on the abstract base class")
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        return False

    def get_finished_count(self) -> int | None:
        """Workers expected to report each transfer (None: the world size)."""
        return None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None):
        return None

    def set_xfer_handshake_metadata(self, metadata: dict[int, KVConnectorHandshakeMetadata]
                                    ) -> None:
        return None

    def set_xfer_handshake_metadata_pp_aware(
            self, metadata: dict[tuple[int, int], KVConnectorHandshakeMetadata]) -> None:
        if any(pp_rank != 0 for pp_rank, _ in metadata):
            raise ValueError(f"{type(self).__name__} received pp_rank > 0 handshake metadata "
                             "but does not support PP-disaggregated KV transfer.")
        self.set_xfer_handshake_metadata({tp: meta for (_, tp), meta in metadata.items()})

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types: dict, labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]):
        return None

    def reset_cache(self) -> bool | None:
        return None
