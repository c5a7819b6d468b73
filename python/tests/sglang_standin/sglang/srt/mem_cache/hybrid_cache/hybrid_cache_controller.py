"""Stand-in of the storage (L3) path of
sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller at SGLang 8905cbd (see
../../../../README.md): HybridCacheController, which drives a HostPoolGroup (KV plus Mamba / SWA /
indexer ... pools) and moves the extra pools with the backend's v2 calls (batch_exists_v2,
batch_get_v2, batch_set_v2) beside the KV pages.

As in the base stand-in, no GPU and no threads: prefetch() and write_storage() run their
operation synchronously (hit query, host allocation, _page_transfer; or _page_backup).
"""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional

from sglang.srt.managers.cache_controller import HiCacheController as BaseHiCacheController
from sglang.srt.managers.cache_controller import PrefetchOperation as BasePrefetchOperation
from sglang.srt.managers.cache_controller import StorageOperation as BaseStorageOperation
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)
from sglang.srt.mem_cache.memory_pool_host import PoolEntry


class StorageOperation(BaseStorageOperation):
    """A storage operation with its extra pools' transfers and their results
    (pool_storage_result: kv_hit_pages from the hit query, per-pool success counts)."""

    def __init__(self, host_indices, token_ids: List[int], last_hash: Optional[str] = None,
                 hash_value: Optional[List[str]] = None, prefix_keys: Optional[List[str]] = None,
                 pool_transfers: Optional[List[PoolTransfer]] = None):
        super().__init__(host_indices, token_ids, last_hash, hash_value, prefix_keys)
        self.pool_transfers = pool_transfers
        self.pool_storage_result = PoolTransferResult.empty()


class PrefetchOperation(BasePrefetchOperation):
    """A prefetch (the base one's termination and counting) with its extra pools' transfers and
    results; pool_transfers_done is set once _page_transfer has handled them."""

    def __init__(self, request_id: str, token_ids: List[int], last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None,
                 pool_transfers: Optional[List[PoolTransfer]] = None):
        super().__init__(request_id, token_ids, last_hash, prefix_keys=prefix_keys)
        self.pool_transfers = pool_transfers
        self.pool_storage_result = PoolTransferResult.empty()
        self.pool_transfers_done = not bool(pool_transfers)


class HybridCacheController(BaseHiCacheController):
    """HiCacheController for a HostPoolGroup. mem_pool_host is the group (the backend's
    register_mem_pool_host gets the group itself); attach also registers each entry's pool
    with register_mem_host_pool_v2(entry.host_pool, entry.name)."""

    def __init__(self, mem_pool_host: Any, page_size: int, storage_backend: Optional[str] = None,
                 storage_backend_extra_config: Optional[dict] = None,
                 model_name: Optional[str] = None, prefetch_threshold: int = 256, **kwargs):
        super().__init__(mem_pool_host, page_size, None, storage_backend_extra_config,
                         model_name, prefetch_threshold, **kwargs)
        if storage_backend is not None:
            self.attach_storage_backend(storage_backend=storage_backend,
                                        prefetch_threshold=prefetch_threshold,
                                        model_name=model_name,
                                        storage_backend_extra_config=storage_backend_extra_config,
                                        host_pools=getattr(mem_pool_host, "entries", None))

    def attach_storage_backend(self, storage_backend: str, prefetch_threshold: int = 256,
                               model_name: Optional[str] = None,
                               storage_backend_extra_config: Optional[dict] = None,
                               host_pools: Optional[List[PoolEntry]] = None):
        super().attach_storage_backend(storage_backend=storage_backend,
                                       prefetch_threshold=prefetch_threshold,
                                       model_name=model_name,
                                       storage_backend_extra_config=storage_backend_extra_config)
        for entry in host_pools or []:
            self.storage_backend.register_mem_host_pool_v2(entry.host_pool, entry.name)

    @staticmethod
    def parse_storage_backend_extra_config(storage_backend_extra_config: Optional[str]):
        """--hicache-storage-backend-extra-config (JSON, or @file.json / @file.toml) ->
        (the rest of the config, prefetch_threshold, prefetch_timeout_base,
        prefetch_timeout_per_ki_token, hicache_storage_pass_prefix_keys); the four knobs are
        popped before the rest reaches the controller and the backend."""
        extra = {}
        if storage_backend_extra_config:
            if storage_backend_extra_config.startswith("@"):
                path = storage_backend_extra_config[1:]
                ext = os.path.splitext(path)[1].lower()
                if ext == ".json":
                    with open(path) as f:
                        extra = json.load(f)
                elif ext == ".toml":
                    import tomllib

                    with open(path, "rb") as f:
                        extra = tomllib.load(f)
                else:
                    raise ValueError(f"Unsupported config file {path} (config format: {ext})")
            else:
                extra = json.loads(storage_backend_extra_config)
        threshold = extra.pop("prefetch_threshold", 256)
        timeout_base = extra.pop("prefetch_timeout_base", 1)
        timeout_per_ki = extra.pop("prefetch_timeout_per_ki_token", 0.25)
        pass_prefix_keys = extra.pop("hicache_storage_pass_prefix_keys", False)
        if not isinstance(threshold, int):
            raise ValueError(f"prefetch_threshold must be int, got {type(threshold).__name__}")
        for name, value in (("prefetch_timeout_base", timeout_base),
                            ("prefetch_timeout_per_ki_token", timeout_per_ki)):
            if not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be number, got {type(value).__name__}")
        if not isinstance(pass_prefix_keys, bool):
            raise ValueError("hicache_storage_pass_prefix_keys must be bool, got "
                             f"{type(pass_prefix_keys).__name__}")
        return extra, threshold, float(timeout_base), float(timeout_per_ki), pass_prefix_keys

    # --- synchronous stand-ins of the queued entry points ------------------------------------------
    def prefetch(self, request_id: str, new_input_tokens: List[int],
                 last_hash: Optional[str] = None, prefix_keys: Optional[List[str]] = None,
                 extra_pools: Optional[List[PoolTransfer]] = None,
                 host_indices=None) -> PrefetchOperation:
        """Run a prefetch to the end (see HiCacheController._run_prefetch). extra_pools are the
        transfers as SGLang's radix caches build them, e.g. Mamba: host_indices of one
        allocated slot, keys=["__placeholder__"], TRAILING_PAGES; DSA indexer:
        indices_from_pool=PoolName.KV, ALL_PAGES, no indices or keys. host_indices (stand-in
        only): KV host slots to use instead of allocating them from the group."""
        operation = PrefetchOperation(request_id, new_input_tokens, last_hash,
                                      prefix_keys=prefix_keys, pool_transfers=extra_pools)
        self._run_prefetch(operation, host_indices)
        return operation

    def write_storage(self, host_indices, token_ids: List[int],
                      hash_value: Optional[List[str]] = None,
                      prefix_keys: Optional[List[str]] = None,
                      extra_pools: Optional[List[PoolTransfer]] = None) -> int:
        """Back up now (see HiCacheController.write_storage); the operation (with
        pool_storage_result) is then ack_backup_queue[-1]. extra_pools e.g. Mamba: the node's
        mamba host slot, keys=[hash_value[-1]], TRAILING_PAGES."""
        operation = StorageOperation(host_indices, token_ids, hash_value=hash_value,
                                     prefix_keys=prefix_keys, pool_transfers=extra_pools)
        self._run_backup(operation)
        return operation.id

    # --- the storage path --------------------------------------------------------------------------
    def _storage_hit_query(self, operation) -> tuple:
        """One query over all the pages (no STORAGE_BATCH_SIZE batches here): batch_exists_v2
        with the pool transfers when there are any, else batch_exists. Returns (the first
        kv_hit_pages keys, hit tokens) and records kv_hit_pages in pool_storage_result."""
        hash_value = self.get_hash_str(operation.token_ids, operation.last_hash,
                                       page_size=self.page_size)
        extra_info = HiCacheStorageExtraInfo(
            prefix_keys=operation.prefix_keys.copy() if operation.prefix_keys else None)
        if operation.pool_transfers:
            hit = self.storage_backend.batch_exists_v2(hash_value, operation.pool_transfers,
                                                       extra_info)
        else:
            kv_hits = self.storage_backend.batch_exists(hash_value, extra_info)
            hit = PoolTransferResult(kv_hit_pages=kv_hits, extra_pool_hit_pages={})
        kv_hit_pages = hit.kv_hit_pages
        operation.pool_storage_result.update_kv_hit_pages(kv_hit_pages)
        return hash_value[:kv_hit_pages], kv_hit_pages * self.page_size

    def _page_transfer(self, operation) -> None:
        """The KV pages first (the base transfer); only if every KV page arrived, the extra
        pools: trailing keys re-aligned to the hit, sidecar indices resolved, one batch_get_v2
        (no extra_info), its success counts into pool_storage_result."""
        super()._page_transfer(operation)
        kv_completed_pages = operation.completed_tokens // self.page_size
        if operation.pool_transfers and kv_completed_pages == len(operation.hash_value):
            self._sync_trailing_keys(operation.pool_transfers, operation.hash_value,
                                     kv_completed_pages)
            self._resolve_sidecar_derived_pool_transfers(operation)
            results = self.storage_backend.batch_get_v2(operation.pool_transfers)
            operation.pool_storage_result.update_extra_pool_hit_pages(results)
        operation.pool_transfers_done = True

    def _page_backup(self, operation) -> None:
        """The extra pools first (sidecars resolved, one batch_set_v2, no extra_info, counts into
        pool_storage_result; a failure does not stop the KV), then the KV pages (base)."""
        if operation.pool_transfers:
            self._resolve_sidecar_derived_pool_transfers(operation)
            results = self.storage_backend.batch_set_v2(operation.pool_transfers)
            operation.pool_storage_result.update_extra_pool_hit_pages(results)
        super()._page_backup(operation)

    def _resolve_sidecar_derived_pool_transfers(self, operation) -> None:
        """A transfer with indices_from_pool takes that pool's host indices (and its keys when it
        has none): from the operation itself for PoolName.KV, else from the transfer of that
        name that is not itself derived (AssertionError if there is none)."""
        for transfer in operation.pool_transfers:
            if transfer.indices_from_pool is None:
                continue
            if transfer.indices_from_pool == PoolName.KV:
                transfer.host_indices = operation.host_indices
                if transfer.keys is None:
                    transfer.keys = operation.hash_value
                continue
            source = next((t for t in operation.pool_transfers
                           if t.indices_from_pool is None
                           and t.name == transfer.indices_from_pool), None)
            if source is None:
                raise AssertionError("Storage sidecar derived pool source missing: "
                                     f"{transfer.name} from {transfer.indices_from_pool}.")
            transfer.host_indices = source.host_indices
            if transfer.keys is None:
                transfer.keys = source.keys

    def _sync_trailing_keys(self, pool_transfers: List[PoolTransfer], all_hashes: List[str],
                            kv_hit_pages: int) -> None:
        """Each TRAILING_PAGES transfer's keys become the last N keys of the hit prefix, N being
        its number of keys (1 if none): the placeholders of a prefetch become real keys."""
        for transfer in pool_transfers:
            if transfer.hit_policy != PoolHitPolicy.TRAILING_PAGES:
                continue
            n = len(transfer.keys) if transfer.keys else 1
            transfer.keys = all_hashes[max(0, kv_hit_pages - n):kv_hit_pages]
