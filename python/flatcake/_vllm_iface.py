"""Local stand-in for vLLM's v1 KV connector interface, used only when vLLM is not installed.

It has the names, signatures and default behaviour of
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` at vLLM commit
``00f4240ee6458263d76cf51ca7901ce1350bb4d1`` so that ``flatcake.vllm`` imports and behaves the
same with or without vLLM. With vLLM installed, ``flatcake.vllm`` subclasses vLLM's own classes
instead and this module is not used. What the connector relies on from the real class:

- ``__init__(vllm_config, role, kv_cache_config)`` keeps ``_vllm_config``,
  ``_kv_transfer_config`` (``ValueError`` when ``vllm_config.kv_transfer_config`` is None),
  ``_kv_cache_config``, ``_kv_cache_manager`` (None until ``bind_kv_cache_manager``) and
  ``_role``;
- the model runner calls ``bind_connector_metadata`` before each step and
  ``clear_connector_metadata`` after it; ``_get_connector_metadata`` asserts one is bound;
- the seven abstract methods (worker: ``start_load_kv``, ``wait_for_layer_load``,
  ``save_kv_layer``, ``wait_for_save``; scheduler: ``get_num_new_matched_tokens``,
  ``update_state_after_alloc``, ``build_connector_meta``);
- every other member with vLLM's default, since vLLM's scheduler and workers call them
  unconditionally: ``get_transfer_results`` wraps ``get_finished``; ``requires_kv_delivery`` is
  the producer role; ``has_pending_block_frees``, ``has_pending_push_work``,
  ``supports_divergent_local_hybrid_hits`` and the prefix-replay pair answer False;
  ``bind_kv_cache_manager`` binds the manager's block pool.

vLLM 00f4240e no longer has ``prefer_cross_layer_blocks``, ``register_cross_layers_kv_cache``
or the EAGLE prefix-hash publication API (``set_eagle_prefix_cache_hashing``); neither has this.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Set, Tuple

# (src caches, dst caches, src block ids, dst block ids, "h2d" or "d2h")
CopyBlocksOp = Callable[[Dict[str, Any], Dict[str, Any], List[int], List[int],
                         Literal["h2d", "d2h"]], None]


@dataclass
class KVConnectorTransferResults:
    """A worker's finished asynchronous transfers of one step; a failed receive is also in
    ``finished_recving``."""

    finished_sending: Set[str] = field(default_factory=set)
    finished_recving: Set[str] = field(default_factory=set)
    failed_recving: Set[str] = field(default_factory=set)
    # request id -> (transfer id, exclusive token boundary, prompt digest)
    prefix_replay_checkpoints: Dict[str, Tuple[str, int, str]] = field(default_factory=dict)


class SupportsHMA(ABC):
    """A connector that works with vLLM's hybrid KV cache manager (several KV cache groups)."""

    @abstractmethod
    def request_finished_all_groups(self, request: Any, block_ids: Tuple[List[int], ...]
                                    ) -> Tuple[bool, Optional[dict]]:
        raise NotImplementedError


def supports_hma(connector: Any) -> bool:
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0  # the connector of the scheduler process
    WORKER = 1  # the connector of each worker process


class KVConnectorHandshakeMetadata(ABC):  # noqa: B024 - vLLM's is an ABC without abstract methods
    """Out-of-band hand-shake data between prefill and decode workers."""


class KVConnectorMetadata(ABC):  # noqa: B024 - vLLM's is an ABC without abstract methods
    """What the scheduler-side connector sends to the worker-side connectors each step."""


class KVConnectorWorkerMetadata(ABC):
    """What each worker-side connector sends back to the scheduler each step."""

    @abstractmethod
    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata": ...


class KVConnectorBase_V1(ABC):  # noqa: N801 - vLLM's name
    """The v1 connector contract: a scheduler half and a worker half of one class."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        if getattr(vllm_config, "kv_transfer_config", None) is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._kv_cache_manager: Any = None
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    @property
    def supports_divergent_local_hybrid_hits(self) -> bool:
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        return self._kv_transfer_config.is_kv_producer

    # --- worker side --------------------------------------------------------------------------
    def get_mem_pool_context(self) -> Any:
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

    def register_kv_caches(self, kv_caches: dict) -> None:
        return

    def set_host_xfer_buffer_ops(self, copy_operation: CopyBlocksOp) -> None:
        return

    def finish_forward(self) -> None:
        return

    def reset_capture_state(self) -> None:
        return

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        return

    @abstractmethod
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

    @abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None: ...

    @abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None: ...

    @abstractmethod
    def wait_for_save(self) -> None: ...

    def get_finished(self, finished_req_ids: set) -> tuple:
        return None, None

    def get_transfer_results(self, finished_req_ids: set) -> KVConnectorTransferResults:
        sending, recving = self.get_finished(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()))

    def get_block_ids_with_load_errors(self) -> set:
        return set()

    def shutdown(self) -> None:
        return None

    def get_kv_connector_stats(self) -> Any:
        return None

    def get_kv_connector_kv_cache_events(self) -> Any:
        return None

    def get_handshake_metadata(self) -> Optional[KVConnectorHandshakeMetadata]:
        return None

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        return None

    # --- scheduler side -----------------------------------------------------------------------
    def bind_kv_cache_manager(self, kv_cache_manager: Any) -> None:
        self._kv_cache_manager = kv_cache_manager
        self.bind_gpu_block_pool(kv_cache_manager.block_pool)

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        return

    @abstractmethod
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple: ...

    @abstractmethod
    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None: ...

    @abstractmethod
    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata: ...

    def on_new_request(self, request: Any) -> None:
        return

    def update_connector_output(self, connector_output: Any) -> None:
        return

    def can_load_prefix_replay_checkpoint(self, request: Any, num_local_tokens: int,
                                          num_external_tokens: int) -> bool:
        return False

    def consume_prefix_replay_checkpoint(self, request: Any, num_hit_tokens: int) -> bool:
        return False

    def request_finished(self, request: Any, block_ids: list) -> tuple:
        return False, None

    def register_finished_partial_tail(self, request: Any, block_ids: tuple,
                                       partial_tail_offloads: list) -> bool:
        return False

    def take_events(self) -> Iterable:
        return ()

    def has_pending_block_frees(self) -> bool:
        return False

    def has_pending_push_work(self) -> bool:
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout should not be called "
                            "on the abstract base class")
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict) -> bool:
        return False

    def get_finished_count(self) -> Optional[int]:
        return None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict] = None) -> Any:
        return None

    def set_xfer_handshake_metadata(self, metadata: dict) -> None:
        return None

    def set_xfer_handshake_metadata_pp_aware(self, metadata: dict) -> None:
        if any(pp_rank != 0 for pp_rank, _ in metadata):
            raise ValueError(f"{type(self).__name__} received pp_rank > 0 handshake metadata "
                             "but does not support PP-disaggregated KV transfer.")
        self.set_xfer_handshake_metadata({tp: meta for (_, tp), meta in metadata.items()})

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict, labelnames: list,
                           per_engine_labelvalues: dict) -> Any:
        return None

    def reset_cache(self) -> Optional[bool]:
        return None


# vllm/distributed/kv_transfer/kv_connector/v1/metrics.py: the bases of a connector's statistics
# and Prometheus metrics (vLLM builds them through the connector class's classmethods).
@dataclass
class KVConnectorStats:
    """Serializable transfer telemetry: plain data in ``data``."""

    data: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return self.data

    def reset(self) -> None:
        raise NotImplementedError

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        raise NotImplementedError

    def reduce(self) -> Dict[str, Any]:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError


class KVConnectorPromMetrics:
    """Base of a connector's Prometheus metrics; ``metric_types`` maps prometheus_client's Gauge,
    Counter and Histogram to the classes to instantiate (vLLM's, in its order)."""

    def __init__(self, vllm_config: Any, metric_types: dict, labelnames: list,
                 per_engine_labelvalues: dict) -> None:
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._gauge_cls, self._counter_cls, self._histogram_cls = list(metric_types.values())[:3]
        self._labelnames = labelnames
        self.per_engine_labelvalues = per_engine_labelvalues

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        raise NotImplementedError


# vllm/distributed/kv_events.py: the KV cache events a connector publishes (BlockStored,
# BlockRemoved), and the
# folding of workers' events (an event every worker emitted is common).
@dataclass
class BlockStored:
    block_hashes: list
    parent_block_hash: Any
    token_ids: list
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list] = None
    group_idx: Optional[int] = None  # the KV cache group (hybrid models)

    def __hash__(self) -> int:
        return hash((tuple(self.block_hashes), self.parent_block_hash, tuple(self.token_ids),
                     self.block_size, self.medium, self.group_idx))


@dataclass
class BlockRemoved:
    block_hashes: list
    medium: Optional[str]
    group_idx: Optional[int] = None

    def __hash__(self) -> int:
        return hash((tuple(self.block_hashes), self.medium, self.group_idx))


class KVEventAggregator:
    def __init__(self, num_workers: int) -> None:
        self._num_workers = num_workers
        self._counts: Dict[Any, int] = {}

    def add_events(self, events: list) -> None:
        for e in events:
            self._counts[e] = self._counts.get(e, 0) + 1

    def get_common_events(self) -> list:
        return [e for e, n in self._counts.items() if n == self._num_workers]

    def get_all_events(self) -> list:
        return [e for e, n in self._counts.items() for _ in range(n)]

    def clear_events(self) -> None:
        self._counts.clear()

    def increment_workers(self, count: int = 1) -> None:
        self._num_workers += count

    def reset_workers(self) -> None:
        self._num_workers = 1

    def get_number_of_workers(self) -> int:
        return self._num_workers


class KVConnectorKVEvents(ABC):
    @abstractmethod
    def add_events(self, events: list) -> None: ...

    @abstractmethod
    def aggregate(self) -> "KVConnectorKVEvents": ...

    @abstractmethod
    def increment_workers(self, count: int = 1) -> None: ...

    @abstractmethod
    def get_all_events(self) -> list: ...

    @abstractmethod
    def get_number_of_workers(self) -> int: ...

    @abstractmethod
    def clear_events(self) -> None: ...

    def merge(self, other: "KVConnectorKVEvents") -> "KVConnectorKVEvents":
        self.add_events(other.get_all_events())
        return self
