"""Stand-in of the connector parts of vllm/v1/outputs.py at vLLM 00f4240e: KVConnectorOutput
(the fields the workers fill and the executor aggregates) and ModelRunnerOutput."""

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set[str]] = None
    finished_recving: Optional[set[str]] = None
    kv_connector_stats: Any = None  # KVConnectorStats
    kv_cache_events: Any = None  # KVConnectorKVEvents
    kv_connector_worker_meta: Any = None  # KVConnectorWorkerMetadata
    # Blocks of external tokens that failed to load (single KV cache group only).
    invalid_block_ids: set[int] = field(default_factory=set)
    # Requests whose asynchronous load failed (any number of groups).
    failed_recving: set[str] = field(default_factory=set)
    # Workers expected to report each transfer (0: unchanged).
    expected_finished_count: int = 0
    prefix_replay_checkpoints: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.finished_sending or self.finished_recving or
                    self.prefix_replay_checkpoints or self.kv_connector_stats or
                    self.kv_cache_events or self.invalid_block_ids or self.failed_recving or
                    self.kv_connector_worker_meta)


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    kv_connector_output: Optional[KVConnectorOutput] = None

    @property
    def req_id_to_index(self) -> dict[str, int]:
        return {rid: i for i, rid in enumerate(self.req_ids)}

    @staticmethod
    def with_kv_conn_output_only(kv_connector_output: Optional[KVConnectorOutput]
                                 ) -> "ModelRunnerOutput":
        if kv_connector_output is None or kv_connector_output.is_empty():
            return ModelRunnerOutput([], [])
        return ModelRunnerOutput([], [], kv_connector_output)
