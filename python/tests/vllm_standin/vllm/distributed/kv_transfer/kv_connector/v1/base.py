"""Stand-in of vllm/distributed/kv_transfer/kv_connector/v1/base.py at vLLM 003df296 (see
../../../../../../README.md): the roles, the metadata base class and KVConnectorBase_V1 with the
abstract methods and the defaults a connector inherits. (The P/D hand-shake, HMA, stats and
Prometheus hooks, which FlatCake does not use, are left out.)"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Iterable, Optional

import torch


class KVConnectorRole(enum.Enum):
    # Connector running in the scheduler process
    SCHEDULER = 0
    # Connector running in the worker process
    WORKER = 1


class KVConnectorMetadata(ABC):  # noqa: B024
    """Scheduler connector -> worker connector, once per step."""


class KVConnectorBase_V1(ABC):  # noqa: N801
    @property
    def prefer_cross_layer_blocks(self) -> bool:
        return False

    @property
    def supports_eagle_prefix_cache_hashing(self) -> bool:
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        return self._kv_transfer_config.is_kv_producer

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config) -> None:
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is not None:
            self._kv_transfer_config = vllm_config.kv_transfer_config
        else:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_cache_config = kv_cache_config
        self._role = role
        self.use_eagle_prefix_cache_hashing = False

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        self.use_eagle_prefix_cache_hashing = enabled

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    # ---- worker side ----
    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """The model runner binds the step's metadata before the forward."""
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        """... and clears it after the forward."""
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        """Only while metadata is bound."""
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        """Whether a step's metadata is bound (vLLM skips the layer calls otherwise)."""
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
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
        pass

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    # ---- scheduler side ----
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

    def update_connector_output(self, connector_output):
        return

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def take_events(self) -> Iterable:
        return ()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout should not be called "
                            "on the abstract base class")
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        return False

    def reset_cache(self) -> bool | None:
        return None


class SupportsHMA(ABC):
    """Marks a connector that handles the hybrid memory allocator (FlatCake's does not)."""

    @abstractmethod
    def request_finished_all_groups(self, request, block_ids):
        raise NotImplementedError


def supports_hma(connector: Any) -> bool:
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)
