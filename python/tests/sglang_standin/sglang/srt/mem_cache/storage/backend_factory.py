"""Stand-in of sglang.srt.mem_cache.storage.backend_factory at SGLang 8905cbd (see
../../../../README.md): only `--hicache-storage-backend dynamic`, which is how SGLang loads
FlatCake (the built-in backends are SGLang's own and not stood in)."""

from __future__ import annotations

import importlib
from typing import Any, Dict

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig


class StorageBackendFactory:
    """Builds a storage backend the way SGLang does for "dynamic": extra_config names
    backend_name, module_path and class_name; the class must subclass HiCacheStorage and is
    built as cls(storage_config, kwargs)."""

    @staticmethod
    def _load_backend_class(module_path: str, class_name: str,
                            backend_name: str) -> type:
        try:
            module = importlib.import_module(module_path)
        except ImportError as e:
            raise ImportError(
                f"Failed to import backend '{backend_name}' from '{module_path}': {e}") from e
        try:
            backend_class = getattr(module, class_name)
        except AttributeError as e:
            raise AttributeError(
                f"Class '{class_name}' not found in module '{module_path}': {e}") from e
        if not (isinstance(backend_class, type) and issubclass(backend_class, HiCacheStorage)):
            raise TypeError(f"Backend class {class_name} must inherit from HiCacheStorage "
                            f"(sglang.srt.mem_cache.hicache_storage.HiCacheStorage)")
        return backend_class

    @classmethod
    def create_backend(cls, backend_name: str, storage_config: HiCacheStorageConfig,
                       mem_pool_host: Any, **kwargs) -> HiCacheStorage:
        if backend_name == "dynamic" and storage_config.extra_config is not None:
            return cls._create_dynamic_backend(storage_config.extra_config, storage_config,
                                               mem_pool_host, **kwargs)
        raise ValueError(f"Unknown storage backend '{backend_name}'. Registered backends: []. "
                         "(The stand-in has only 'dynamic'.)")

    @classmethod
    def _create_dynamic_backend(cls, backend_config: Dict[str, Any],
                                storage_config: HiCacheStorageConfig, mem_pool_host: Any,
                                **kwargs) -> HiCacheStorage:
        for field in ("backend_name", "module_path", "class_name"):
            if field not in backend_config:
                raise ValueError(f"Missing required field '{field}' in backend config for "
                                 "'dynamic' backend")
        backend_class = cls._load_backend_class(backend_config["module_path"],
                                                backend_config["class_name"],
                                                backend_config["backend_name"])
        return backend_class(storage_config, kwargs)
