"""Stand-in of sglang.srt.mem_cache.storage at SGLang 8905cbd (see ../../../../README.md)."""

from .backend_factory import StorageBackendFactory

__all__ = ["StorageBackendFactory"]
