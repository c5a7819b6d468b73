from vllm.distributed import parallel_state

__all__ = ["parallel_state"]
