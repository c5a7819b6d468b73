"""Stand-in of the vllm.config fields the connector and the stand-in engine read (see
../README.md): VllmConfig and its model, cache, parallel and scheduler parts."""

from dataclasses import dataclass, field
from typing import Optional

from vllm.config.kv_transfer import KVTransferConfig

__all__ = ["CacheConfig", "KVTransferConfig", "ModelConfig", "ParallelConfig", "SchedulerConfig",
           "VllmConfig"]


@dataclass
class ModelConfig:
    model: str = "org/test-model"
    use_mla: bool = False  # a property of vLLM's ModelConfig (DeepSeek-style latent attention)


@dataclass
class CacheConfig:
    block_size: int = 16
    num_gpu_blocks: Optional[int] = None
    enable_prefix_caching: bool = True


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    rank: int = 0  # this worker's global rank (0 in the scheduler)

    @property
    def world_size(self) -> int:
        return self.pipeline_parallel_size * self.tensor_parallel_size


@dataclass
class SchedulerConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    disable_hybrid_kv_cache_manager: bool = False


@dataclass
class VllmConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    kv_transfer_config: Optional[KVTransferConfig] = None
