"""Stand-in of vllm/distributed/kv_transfer/kv_connector/factory.py (newest shape, from an
annotated copy of main; the stored upstream copy is older, see ../../../../README.md):
kv_connector_module_path, when set, wins over the registry (the class is
getattr(import_module(path), kv_connector)); the connector is built with (config, role,
kv_cache_config); with the hybrid KV cache manager on, a connector without SupportsHMA is
refused."""

import importlib

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole, supports_hma


class KVConnectorFactory:
    _registry: dict = {}

    @classmethod
    def register_connector(cls, name: str, module_path: str, class_name: str) -> None:
        if name in cls._registry:
            raise ValueError(f"Connector '{name}' is already registered.")
        cls._registry[name] = lambda: getattr(importlib.import_module(module_path), class_name)

    @classmethod
    def get_connector_class_by_name(cls, connector_name: str):
        if connector_name not in cls._registry:
            raise ValueError(f"Connector '{connector_name}' is not registered.")
        return cls._registry[connector_name]()

    @classmethod
    def get_connector_class(cls, kv_transfer_config):
        name = kv_transfer_config.kv_connector
        if name is None:
            raise ValueError("Connector name is not set in KVTransferConfig")
        module_path = kv_transfer_config.kv_connector_module_path
        if module_path == "":
            raise ValueError("kv_connector_module_path must not be empty")
        if module_path is not None:
            try:
                return getattr(importlib.import_module(module_path), name)
            except AttributeError as e:
                raise AttributeError(f"Class {name} not found in {module_path}") from e
        if name in cls._registry:
            return cls._registry[name]()
        raise ValueError(f"Unsupported connector type: {name}")

    @classmethod
    def supports_hma_config(cls, kv_transfer_config) -> bool:
        return supports_hma(cls.get_connector_class(kv_transfer_config))

    @classmethod
    def create_connector(cls, config, role: KVConnectorRole, kv_cache_config=None):
        kv_transfer_config = config.kv_transfer_config
        if kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set to create a connector")
        connector_cls = cls.get_connector_class(kv_transfer_config)
        hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
        if hma_enabled and not cls.supports_hma_config(kv_transfer_config):
            raise ValueError(f"Connector {connector_cls.__name__} does not support HMA but "
                             f"HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.")
        return connector_cls(config, role, kv_cache_config)
