"""Stand-in of the storage (L3) path of sglang.srt.managers.cache_controller at SGLang 8905cbd
(see ../../../README.md): how HiCacheController builds the storage config and the backend, which
page get/set functions it picks, and how it queries, prefetches and backs up pages in batches.

No GPU and no threads. In SGLang a prefetch thread runs `_storage_hit_query`, the scheduler
allocates host slots for the hit, an I/O thread runs `_page_transfer`, and a backup thread runs
`_page_backup`; here `prefetch()` and `write_storage()` do those steps synchronously, in that
order, and tests may call the underscored methods directly. The queues SGLang's threads fill are
plain lists (prefetch_revoke_queue, ack_backup_queue, host_mem_release_queue).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional

from sglang.srt.mem_cache.hicache_storage import (
    STORAGE_BATCH_SIZE,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.utils import get_hash_str

logger = logging.getLogger(__name__)


class StorageOperation:
    """Pages to back up (or, as PrefetchOperation, to fetch): host slots, tokens, page keys
    (hash_value), and completed_tokens, counted in tokens as pages succeed."""

    counter = 0

    def __init__(self, host_indices, token_ids: List[int], last_hash: Optional[str] = None,
                 hash_value: Optional[List[str]] = None, prefix_keys: Optional[List[str]] = None):
        self.host_indices = host_indices
        self.token_ids = token_ids
        self.last_hash = last_hash
        self.completed_tokens = 0
        self.hash_value = hash_value if hash_value is not None else []
        self.prefix_keys = prefix_keys
        self.id = StorageOperation.counter
        StorageOperation.counter += 1

    def __lt__(self, other: "StorageOperation"):
        return self.id < other.id


class PrefetchOperation(StorageOperation):
    """A prefetch: starts without host slots (allocated once the hit is known); increment()
    refuses once the operation is terminated."""

    def __init__(self, request_id: str, token_ids: List[int], last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None):
        self.request_id = request_id
        self._lock = threading.Lock()
        self._terminated_flag = False
        self.storage_hit_count = 0
        self.start_time = time.monotonic()
        super().__init__(None, token_ids, last_hash, prefix_keys=prefix_keys)

    def increment(self, num_tokens: int) -> bool:
        with self._lock:
            if self._terminated_flag:
                return False
            self.completed_tokens += num_tokens
            return True

    def mark_terminate(self):
        with self._lock:
            self._terminated_flag = True

    def is_terminated(self) -> bool:
        return self._terminated_flag


class HiCacheController:
    """The storage side of SGLang's HiCacheController. SGLang derives the parallel ranks and
    is_mla_model (MLA / DeepSeek V4 device pool: rank-replicated KV) from its runtime; here they
    are arguments. With storage_backend given, the constructor attaches it, as SGLang's does."""

    def __init__(self, mem_pool_host: Any, page_size: int, storage_backend: Optional[str] = None,
                 storage_backend_extra_config: Optional[dict] = None,
                 model_name: Optional[str] = None, prefetch_threshold: int = 256, *,
                 tp_rank: int = 0, tp_size: int = 1, pp_rank: int = 0, pp_size: int = 1,
                 attn_cp_rank: int = 0, attn_cp_size: int = 1, is_mla_model: bool = False,
                 enable_storage_metrics: bool = False):
        self.mem_pool_host = mem_pool_host
        self.page_size = page_size
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.pp_rank, self.pp_size = pp_rank, pp_size
        self.attn_cp_rank, self.attn_cp_size = attn_cp_rank, attn_cp_size
        self.is_mla_model = is_mla_model
        self.enable_storage = False
        self.storage_backend = None
        self.storage_backend_type = None
        self.enable_storage_metrics = enable_storage_metrics

        # Draft KV pool (speculative decoding), piggybacked on the target's storage I/O.
        self.has_draft = False
        self.mem_pool_device_draft = None
        self.mem_pool_host_draft = None
        self.draft_page_get_func = None
        self.draft_page_set_func = None

        self.page_get_func = self._generic_page_get
        self.page_set_func = self._generic_page_set

        if storage_backend is not None:
            try:
                self.attach_storage_backend(storage_backend=storage_backend,
                                            prefetch_threshold=prefetch_threshold,
                                            model_name=model_name,
                                            storage_backend_extra_config=storage_backend_extra_config)
            except ValueError as e:
                raise ValueError(f"Failed to create storage backend: {e}") from e

    # --- attach / detach ---------------------------------------------------------------------------
    def attach_storage_backend(self, storage_backend: str, prefetch_threshold: int = 256,
                               model_name: Optional[str] = None,
                               storage_backend_extra_config: Optional[dict] = None):
        """Build the backend (StorageBackendFactory), register the host pool with it, pick the
        page functions: zero-copy batch_get_v1 / batch_set_v1 for a dynamic backend whose extra
        config has a true interface_v1, else the flat-page batch_get / batch_set."""
        if self.enable_storage:
            raise RuntimeError("Storage backend already attached.")
        self.storage_backend_type = storage_backend
        self.get_hash_str = get_hash_str
        self.storage_config = self._generate_storage_config(model_name,
                                                            storage_backend_extra_config)
        # MLA KV is the same on every TP rank: only rank 0 writes it to storage.
        self.backup_skip = self.storage_config.is_mla_model and self.storage_config.tp_rank != 0

        from sglang.srt.mem_cache.storage import StorageBackendFactory

        try:
            self.storage_backend = StorageBackendFactory.create_backend(
                storage_backend, self.storage_config, self.mem_pool_host)
            self.storage_backend.register_mem_pool_host(self.mem_pool_host)
            self.enable_storage = True
            self.prefetch_threshold = max(prefetch_threshold, self.page_size)
            self.prefetch_capacity_limit = int(0.5 * self.mem_pool_host.size)
            self.prefetch_tokens_occupied = 0

            self.page_get_func = self._generic_page_get
            self.page_set_func = self._generic_page_set
            if storage_backend in ("hf3fs", "mooncake", "eic", "nixl", "simm", "mori") or (
                    storage_backend == "dynamic"
                    and bool(self.storage_config.extra_config.get("interface_v1", 0))):
                self.page_get_func = self._page_get_zero_copy
                self.page_set_func = self._page_set_zero_copy

            self._maybe_register_draft_with_storage()
            self._start_storage_threads()
        except Exception:
            self._drop_backend()
            raise

    def _start_storage_threads(self):
        """Stand-in: no threads, only the queues they fill (plain lists)."""
        self.prefetch_revoke_queue: List[str] = []
        self.ack_backup_queue: List[StorageOperation] = []
        self.host_mem_release_queue: list = []

    def _drop_backend(self):
        backend, self.storage_backend = self.storage_backend, None
        if backend is not None and hasattr(backend, "close"):
            try:
                backend.close()
            except Exception:
                logger.exception("Failed to close storage backend cleanly.")
        self.storage_backend_type = None
        self.enable_storage = False
        self.page_get_func = self._generic_page_get
        self.page_set_func = self._generic_page_set
        self.draft_page_get_func = None
        self.draft_page_set_func = None

    def detach_storage_backend(self):
        """Close (if the backend has close()) and forget the backend."""
        self._drop_backend()

    def _generate_storage_config(self, model_name: Optional[str] = None,
                                 storage_backend_extra_config: Optional[dict] = None):
        """The HiCacheStorageConfig SGLang gives the backend. tp_lcm_size is popped from the
        extra config (the dict is changed, as in SGLang)."""
        extra = storage_backend_extra_config if storage_backend_extra_config is not None else {}
        tp_lcm_size = extra.pop("tp_lcm_size", None)
        should_split_heads = False
        if tp_lcm_size:
            assert tp_lcm_size % self.tp_size == 0, "tp_lcm_size must be divisible by tp_size."
            should_split_heads = (not self.is_mla_model
                                  and self.mem_pool_host.layout == "page_head"
                                  and tp_lcm_size > self.tp_size)
        return HiCacheStorageConfig(
            tp_rank=self.tp_rank, tp_size=self.tp_size, pp_rank=self.pp_rank,
            pp_size=self.pp_size, attn_cp_rank=self.attn_cp_rank,
            attn_cp_size=self.attn_cp_size, is_mla_model=self.is_mla_model,
            enable_storage_metrics=self.enable_storage_metrics,
            is_page_first_layout=self.mem_pool_host.layout == "page_first",
            model_name=model_name, tp_lcm_size=tp_lcm_size,
            should_split_heads=should_split_heads, extra_config=extra)

    # --- draft KV pool -----------------------------------------------------------------------------
    def set_draft_kv_pool(self, draft_device_pool, draft_host_pool) -> None:
        """Register the draft model's pools; its pages then follow the target's storage I/O."""
        self.has_draft = True
        self.mem_pool_device_draft = draft_device_pool
        self.mem_pool_host_draft = draft_host_pool
        self._maybe_register_draft_with_storage()

    def _maybe_register_draft_with_storage(self) -> None:
        """mooncake: the draft host pool registered as PoolName.DRAFT and moved with v2 calls;
        hf3fs / eic / nixl / simm: no draft storage; any other backend (dynamic included): the
        generic path, flat draft pages under `<hash>.draft` keys via batch_set / batch_get."""
        self.draft_page_get_func = None
        self.draft_page_set_func = None
        if not self.has_draft or not self.enable_storage:
            return
        backend = self.storage_backend_type
        if backend == "mooncake":
            if self.storage_config.should_split_heads:
                return
            self.storage_backend.register_mem_host_pool_v2(self.mem_pool_host_draft,
                                                           PoolName.DRAFT)
            self.draft_page_get_func = self._draft_page_get_v2
            self.draft_page_set_func = self._draft_page_set_v2
            return
        if backend in {"hf3fs", "eic", "nixl", "simm"}:
            return
        self.draft_page_get_func = self._draft_page_get_generic
        self.draft_page_set_func = self._draft_page_set_generic

    # --- prefetch (storage -> host) ----------------------------------------------------------------
    def prefetch(self, request_id: str, new_input_tokens: List[int],
                 last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None,
                 host_indices=None) -> PrefetchOperation:
        """SGLang queues the operation; the stand-in runs it to the end (see _run_prefetch).
        host_indices (stand-in only): host slots to use instead of allocating them."""
        operation = PrefetchOperation(request_id, new_input_tokens, last_hash, prefix_keys)
        self._run_prefetch(operation, host_indices)
        return operation

    def _run_prefetch(self, operation, host_indices=None) -> None:
        """What SGLang's prefetch thread, scheduler and I/O thread do in turn: hit query; below
        prefetch_threshold tokens, revoke (request id into prefetch_revoke_queue, no slots);
        else keep the hit keys, allocate host slots (or use host_indices; on a full pool the
        largest page-aligned part still >= threshold, else revoke), _page_transfer, and queue
        the slots past completed_tokens for release."""
        if operation.is_terminated():
            hash_value, hit = [], 0
        else:
            hash_value, hit = self._storage_hit_query(operation)
        if hit < self.prefetch_threshold:
            self.prefetch_revoke_queue.append(operation.request_id)
            return
        operation.hash_value = hash_value[: hit // self.page_size]
        operation.storage_hit_count = hit
        if host_indices is None:
            alloc_len = hit
            host_indices = self.mem_pool_host.alloc(alloc_len)
            if host_indices is None:
                available = self.mem_pool_host.available_size()
                alloc_len = min(hit, available - available % self.page_size)
                if alloc_len >= self.prefetch_threshold:
                    host_indices = self.mem_pool_host.alloc(alloc_len)
            if host_indices is None:
                self.prefetch_revoke_queue.append(operation.request_id)
                return
            operation.storage_hit_count = alloc_len
            operation.hash_value = operation.hash_value[: alloc_len // self.page_size]
        operation.host_indices = host_indices
        self._page_transfer(operation)
        self.append_host_mem_release(operation.host_indices[operation.completed_tokens:])

    def terminate_prefetch(self, operation):
        operation.mark_terminate()
        return operation.completed_tokens, operation.hash_value

    def append_host_mem_release(self, host_indices) -> None:
        if host_indices.numel() == 0:
            return
        self.host_mem_release_queue.extend(host_indices.split(self.mem_pool_host.page_size))

    def _storage_hit_query(self, operation) -> tuple:
        """Keys of the pages of operation.token_ids (chained from last_hash), asked with
        batch_exists in batches of STORAGE_BATCH_SIZE until a batch is short. Returns (the hit
        keys, hit tokens). prefix_keys: a copy, grown by each full batch."""
        prefix_keys = operation.prefix_keys.copy() if operation.prefix_keys else None
        hit_tokens = 0
        hash_value: List[str] = []
        page_hashes = self.get_hash_str(operation.token_ids, operation.last_hash,
                                        page_size=self.page_size)
        for start in range(0, len(page_hashes), STORAGE_BATCH_SIZE):
            batch = page_hashes[start:start + STORAGE_BATCH_SIZE]
            hit_pages = self.storage_backend.batch_exists(
                batch, HiCacheStorageExtraInfo(prefix_keys=prefix_keys))
            hash_value.extend(batch[:hit_pages])
            hit_tokens += hit_pages * self.page_size
            if hit_pages < len(batch):
                break
            if prefix_keys and len(prefix_keys) > 0:
                prefix_keys += batch
        return hash_value, hit_tokens

    def _page_transfer(self, operation) -> None:
        """Fetch operation.hash_value into operation.host_indices, STORAGE_BATCH_SIZE pages a
        batch: the draft pages first (best effort), then page_get_func; a batch that does not
        complete every page terminates the operation and ends the transfer. prefix_keys is
        operation.prefix_keys itself, extended in place by each batch's keys."""
        prefix_keys = operation.prefix_keys
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            batch = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
            batch_indices = operation.host_indices[
                i * self.page_size:(i + len(batch)) * self.page_size]
            if self.has_draft:
                self._draft_page_get(batch, batch_indices)
            before = operation.completed_tokens
            self.page_get_func(operation, batch, batch_indices,
                               HiCacheStorageExtraInfo(prefix_keys=prefix_keys))
            if operation.completed_tokens != before + len(batch) * self.page_size:
                operation.mark_terminate()
                break
            if prefix_keys and len(prefix_keys) > 0:
                prefix_keys += batch

    def _page_get_zero_copy(self, operation, hash_values, host_indices, extra_info=None):
        """batch_get_v1; completed_tokens grows (once) by the pages before the first failure."""
        results = self.storage_backend.batch_get_v1(hash_values, host_indices, extra_info)
        inc = 0
        for i in range(len(hash_values)):
            if not results[i]:
                logger.warning("Prefetch operation %s failed to retrieve page %s.",
                               operation.request_id, hash_values[i])
                break
            inc += self.page_size
        operation.increment(inc)

    def _generic_page_get(self, operation, hash_values, host_indices, extra_info=None):
        """batch_get into dummy flat pages (extra_info is not passed on); each page up to the
        first None is copied into the host pool, then counted."""
        dummies = [self.mem_pool_host.get_dummy_flat_data_page() for _ in hash_values]
        page_data = self.storage_backend.batch_get(hash_values, dummies)
        if page_data is None:
            return
        for i in range(len(hash_values)):
            if page_data[i] is None:
                logger.warning("Prefetch operation %s failed to retrieve page %s.",
                               operation.request_id, hash_values[i])
                break
            self.mem_pool_host.set_from_flat_data_page(host_indices[i * self.page_size],
                                                       page_data[i])
            if not operation.increment(self.page_size):
                break

    # --- backup (host -> storage) ------------------------------------------------------------------
    def write_storage(self, host_indices, token_ids: List[int],
                      hash_value: Optional[List[str]] = None,
                      prefix_keys: Optional[List[str]] = None) -> int:
        """SGLang queues the operation for its backup thread and returns its id; the stand-in
        backs it up now (nothing if backup_skip), then appends it to ack_backup_queue. Only
        hash_value's pages are written: without hash_value, none."""
        operation = StorageOperation(host_indices, token_ids, hash_value=hash_value,
                                     prefix_keys=prefix_keys)
        self._run_backup(operation)
        return operation.id

    def _run_backup(self, operation) -> None:
        if not self.backup_skip:
            self._page_backup(operation)
        self.ack_backup_queue.append(operation)

    def _page_backup(self, operation) -> None:
        """Write operation.hash_value's pages, STORAGE_BATCH_SIZE a batch, with page_set_func;
        stop at the first failed batch; after each good batch, the draft pages (best effort),
        prefix_keys (operation's own list) grows, and completed_tokens counts the batch."""
        prefix_keys = operation.prefix_keys
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            batch = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
            batch_indices = operation.host_indices[
                i * self.page_size:(i + len(batch)) * self.page_size]
            ok = self.page_set_func(batch, batch_indices,
                                    HiCacheStorageExtraInfo(prefix_keys=prefix_keys))
            if not ok:
                logger.warning("Write page to storage: %d pages failed.", len(batch))
                break
            if self.has_draft:
                self._draft_page_set(batch, batch_indices)
            if prefix_keys and len(prefix_keys) > 0:
                prefix_keys += batch
            operation.completed_tokens += self.page_size * len(batch)

    def _generic_page_set(self, hash_values, host_indices, extra_info=None) -> bool:
        """batch_set of the host pool's flat pages (extra_info is not passed on)."""
        data = [self.mem_pool_host.get_data_page(host_indices[i * self.page_size])
                for i in range(len(hash_values))]
        return self.storage_backend.batch_set(hash_values, data)

    def _page_set_zero_copy(self, hash_values, host_indices, extra_info=None) -> bool:
        return all(self.storage_backend.batch_set_v1(hash_values, host_indices, extra_info))

    # --- draft pages (best effort: failures are logged and ignored) --------------------------------
    def _draft_page_set(self, hash_values, host_indices) -> None:
        if self.draft_page_set_func is None:
            return
        try:
            self.draft_page_set_func(hash_values, host_indices)
        except Exception:
            logger.debug("Draft L3 write failed (best-effort), skipping.", exc_info=True)

    def _draft_page_get(self, hash_values, host_indices) -> None:
        if self.draft_page_get_func is None:
            return
        try:
            self.draft_page_get_func(hash_values, host_indices)
        except Exception:
            logger.debug("Draft L3 read failed (best-effort), skipping.", exc_info=True)

    def _draft_page_set_v2(self, hash_values, host_indices) -> None:
        self.storage_backend.batch_set_v2([PoolTransfer(
            name=PoolName.DRAFT, host_indices=host_indices, keys=list(hash_values))])

    def _draft_page_get_v2(self, hash_values, host_indices) -> None:
        self.storage_backend.batch_get_v2([PoolTransfer(
            name=PoolName.DRAFT, host_indices=host_indices, keys=list(hash_values))])

    def _draft_page_set_generic(self, hash_values, host_indices) -> None:
        """The draft host pool's flat pages under `<hash>.draft`, one batch_set (its result
        is ignored)."""
        keys = [f"{h}.{PoolName.DRAFT}" for h in hash_values]
        data = [self.mem_pool_host_draft.get_data_page(host_indices[i * self.page_size])
                for i in range(len(keys))]
        self.storage_backend.batch_set(keys, data)

    def _draft_page_get_generic(self, hash_values, host_indices) -> None:
        """batch_get of `<hash>.draft` into the draft pool's dummy pages; every page returned
        (not None) is copied in, gaps included."""
        keys = [f"{h}.{PoolName.DRAFT}" for h in hash_values]
        dummies = [self.mem_pool_host_draft.get_dummy_flat_data_page() for _ in keys]
        pages = self.storage_backend.batch_get(keys, dummies)
        if pages is None:
            return
        for i, page in enumerate(pages):
            if page is not None:
                self.mem_pool_host_draft.set_from_flat_data_page(
                    host_indices[i * self.page_size], page)
