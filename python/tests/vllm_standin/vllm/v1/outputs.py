"""Stand-in of the connector parts of vllm/v1/outputs.py (KVConnectorOutput, ModelRunnerOutput)."""

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set[str]] = None
    finished_recving: Optional[set[str]] = None
    invalid_block_ids: set[int] = field(default_factory=set)


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]
    kv_connector_output: Optional[KVConnectorOutput] = None
