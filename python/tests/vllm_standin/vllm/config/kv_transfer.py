"""Stand-in of vllm/config/kv_transfer.py (KVTransferConfig; the fields and checks of vLLM
007c643b plus kv_load_failure_policy as 00f4240e's scheduler reads it, see ../../README.md), a
plain dataclass instead of a pydantic one."""

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional, get_args, Literal

KVProducer = Literal["kv_producer", "kv_both"]
KVConsumer = Literal["kv_consumer", "kv_both"]
KVRole = Literal[KVProducer, KVConsumer]
# What the scheduler does with KV a connector failed to load: "fail" ends the affected requests
# with FINISHED_ERROR, "recompute" computes the lost tokens again.
KVLoadFailurePolicy = Literal["recompute", "fail"]


@dataclass
class KVTransferConfig:
    kv_connector: Optional[str] = None
    engine_id: Optional[str] = None
    kv_buffer_device: Optional[str] = "cuda"
    kv_buffer_size: float = 1e9
    kv_role: Optional[str] = None
    kv_rank: Optional[int] = None
    kv_parallel_size: int = 1
    kv_ip: str = "127.0.0.1"
    kv_port: int = 14579
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    kv_connector_module_path: Optional[str] = None
    kv_load_failure_policy: KVLoadFailurePolicy = "fail"

    def __post_init__(self) -> None:
        if self.engine_id is None:
            self.engine_id = str(uuid.uuid4())
        if self.kv_role is not None and self.kv_role not in get_args(KVRole):
            raise ValueError(f"Unsupported kv_role: {self.kv_role}. "
                             f"Supported roles are {get_args(KVRole)}")
        if self.kv_connector is not None and self.kv_role is None:
            raise ValueError("Please specify kv_disagg_role when kv_connector "
                             f"is set, supported roles are {get_args(KVRole)}")
        if self.kv_load_failure_policy not in get_args(KVLoadFailurePolicy):
            raise ValueError(f"Unsupported kv_load_failure_policy: {self.kv_load_failure_policy}")

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in get_args(KVProducer)

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in get_args(KVConsumer)

    def get_from_extra_config(self, key, default) -> Any:
        return self.kv_connector_extra_config.get(key, default)
