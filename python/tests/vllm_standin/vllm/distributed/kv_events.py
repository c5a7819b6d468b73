"""Stand-in of vllm/distributed/kv_events.py (read at 0181ea31; see ../../README.md): the KV
cache events a connector publishes, from the scheduler (take_events) or from the workers
(get_kv_connector_kv_cache_events, a KVConnectorKVEvents that the executor folds). vLLM's are
msgspec structs; these are dataclasses with the same fields."""

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Optional, Union

ExternalBlockHash = Union[bytes, int]
MEDIUM_GPU = "GPU"


@dataclass(frozen=True)
class KVCacheEvent:
    pass


@dataclass(frozen=True)
class BlockStored(KVCacheEvent):
    block_hashes: list
    parent_block_hash: Optional[ExternalBlockHash]
    token_ids: list
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None

    def __hash__(self) -> int:  # events are counted by value when workers' events are merged
        return hash((tuple(self.block_hashes), self.parent_block_hash, tuple(self.token_ids),
                     self.block_size, self.lora_id, self.medium, self.lora_name, self.group_idx))


@dataclass(frozen=True)
class BlockRemoved(KVCacheEvent):
    block_hashes: list
    medium: Optional[str]
    group_idx: Optional[int] = None

    def __hash__(self) -> int:
        return hash((tuple(self.block_hashes), self.medium, self.group_idx))


@dataclass(frozen=True)
class AllBlocksCleared(KVCacheEvent):
    pass


@dataclass
class KVEventBatch:
    ts: float
    events: list
    data_parallel_rank: Optional[int] = None


class KVEventAggregator:
    """Counts each event over the workers; an event every worker emitted is common."""

    def __init__(self, num_workers: int) -> None:
        self._num_workers = num_workers
        self._counts: Counter = Counter()

    def add_events(self, events: list) -> None:
        self._counts.update(events)

    def get_common_events(self) -> list:
        return [e for e, n in self._counts.items() if n == self._num_workers]

    def get_all_events(self) -> list:  # with repeats: one per worker that emitted it
        return list(self._counts.elements())

    def clear_events(self) -> None:
        self._counts.clear()

    def increment_workers(self, count: int = 1) -> None:
        if count <= 0:
            raise ValueError("count must be positive.")
        self._num_workers += count

    def reset_workers(self) -> None:
        self._num_workers = 1

    def get_number_of_workers(self) -> int:
        return self._num_workers


class KVConnectorKVEvents(ABC):
    """A worker's events for one step; the executor folds the workers' objects with
    first.add_events(other.get_all_events()); first.increment_workers(1)."""

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
