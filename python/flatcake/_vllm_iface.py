"""Local stand-in for vLLM's v1 KV connector interface, used only when vLLM is not installed.

It has the names, signatures and default behaviour of
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` at vLLM commit
``003df2961dd8830c317a61f9745ccd557da9fa06`` (``KVConnectorRole``, ``KVConnectorMetadata``,
``KVConnectorBase_V1``) so that ``flatcake.vllm`` imports and behaves the same with or without
vLLM. With vLLM installed, ``flatcake.vllm`` subclasses vLLM's own classes instead and this
module is not used. What the connector relies on from the real class:

- ``__init__(vllm_config, role, kv_cache_config)`` keeps ``_vllm_config``,
  ``_kv_transfer_config`` (``ValueError`` when ``vllm_config.kv_transfer_config`` is None),
  ``_kv_cache_config`` and ``_role``;
- the model runner calls ``bind_connector_metadata`` before each step and
  ``clear_connector_metadata`` after it; ``_get_connector_metadata`` asserts one is bound;
- the six abstract methods (worker: ``start_load_kv``, ``wait_for_layer_load``,
  ``save_kv_layer``, ``wait_for_save``; scheduler: ``get_num_new_matched_tokens``,
  ``update_state_after_alloc``, ``build_connector_meta``) and the defaults of the rest.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Optional


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0  # the connector of the scheduler process
    WORKER = 1  # the connector of each worker process


class KVConnectorMetadata(ABC):  # noqa: B024 - vLLM's is an ABC without abstract methods
    """What the scheduler-side connector sends to the worker-side connectors each step."""


class KVConnectorBase_V1(ABC):  # noqa: N801 - vLLM's name
    """The v1 connector contract: a scheduler half and a worker half of one class."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        if getattr(vllm_config, "kv_transfer_config", None) is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._connector_metadata: Optional[KVConnectorMetadata] = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role
        self.use_eagle_prefix_cache_hashing = False

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        return self._kv_transfer_config.is_kv_producer

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        self.use_eagle_prefix_cache_hashing = enabled

    # --- worker side --------------------------------------------------------------------------
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

    def get_block_ids_with_load_errors(self) -> set:
        return set()

    def shutdown(self) -> None:
        return None

    # --- scheduler side -----------------------------------------------------------------------
    @abstractmethod
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple: ...

    @abstractmethod
    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None: ...

    @abstractmethod
    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata: ...

    def update_connector_output(self, connector_output: Any) -> None:
        return

    def request_finished(self, request: Any, block_ids: list) -> tuple:
        return False, None

    def take_events(self) -> tuple:
        return ()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict) -> bool:
        return False

    def reset_cache(self) -> Optional[bool]:
        return None
