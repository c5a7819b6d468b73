"""Stand-in of vllm/distributed/kv_transfer/kv_connector/factory.py (vLLM 2025-26, the
three-argument constructor; see ../../../../README.md): a connector that is not registered is
imported from kv_transfer_config.kv_connector_module_path and looked up by kv_connector; with
the hybrid KV cache manager enabled, a connector without SupportsHMA is refused."""

import importlib
import inspect

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole, supports_hma


class KVConnectorFactory:
    _registry: dict = {}

    @classmethod
    def get_connector_class(cls, kv_transfer_config):
        name = kv_transfer_config.kv_connector
        if name is None:
            raise ValueError("Connector name is not set in KVTransferConfig")
        if name in cls._registry:
            return cls._registry[name]()
        module_path = kv_transfer_config.kv_connector_module_path
        if module_path is None:
            raise ValueError(f"Unsupported connector type: {name}")
        module = importlib.import_module(module_path)
        try:
            return getattr(module, name)
        except AttributeError as e:
            raise AttributeError(f"Class {name} not found in {module_path}") from e

    @classmethod
    def create_connector(cls, config, role: KVConnectorRole, kv_cache_config=None):
        if config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set to create a connector")
        connector_cls = cls.get_connector_class(config.kv_transfer_config)
        hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
        if hma_enabled and not supports_hma(connector_cls):
            raise ValueError(f"Connector {connector_cls.__name__} does not support HMA but "
                             f"HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.")
        if "kv_cache_config" not in inspect.signature(connector_cls).parameters:
            return connector_cls(config, role)  # the deprecated two-argument signature
        return connector_cls(config, role, kv_cache_config)
