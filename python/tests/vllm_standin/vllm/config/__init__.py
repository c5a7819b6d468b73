"""Stand-in of the vllm.config fields the connector and the stand-in engine read (see
../README.md): VllmConfig and its model, cache, parallel and scheduler parts, at 00f4240e."""

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
    # The KV cache layout the engine core resolved (vllm/v1/kv_cache_layout.py names:
    # LBNHC by default, or what the backend, VLLM_KV_CACHE_LAYOUT or the connector's
    # get_required_kvcache_layout asked for).
    kv_cache_layout: str = "LBNHC"
    # With several KV cache groups: the granularity of request.block_hashes, if not the GCD of
    # the groups' block sizes (resolve_kv_cache_block_sizes).
    prefix_match_unit: Optional[int] = None


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    decode_context_parallel_size: int = 1
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
    # The V2 model runner (vllm/v1/worker/gpu/): resumed requests reach the workers as new
    # requests, and the worker calls handle_preemptions and finish_forward each step.
    use_v2_model_runner: bool = False
