"""Stand-in of the parts of vllm/distributed/parallel_state.py a connector reads: the TP rank
and the PP group of this worker. vLLM runs one worker per process; tests that hold several
workers in one process call initialize_model_parallel before building each one."""

from dataclasses import dataclass


@dataclass
class GroupCoordinator:
    rank_in_group: int
    world_size: int


_WORLD_RANK = None
_TP = None
_PP = None


def init_distributed_environment(world_size: int = 1, rank: int = 0) -> None:
    global _WORLD_RANK
    _WORLD_RANK = (rank, world_size)


def initialize_model_parallel(tensor_model_parallel_size: int = 1,
                              pipeline_model_parallel_size: int = 1) -> None:
    global _TP, _PP
    assert _WORLD_RANK is not None, "init_distributed_environment first"
    rank, world = _WORLD_RANK
    assert world == tensor_model_parallel_size * pipeline_model_parallel_size
    # vLLM's rank order: pp_rank * tp_size + tp_rank.
    _TP = GroupCoordinator(rank % tensor_model_parallel_size, tensor_model_parallel_size)
    _PP = GroupCoordinator(rank // tensor_model_parallel_size, pipeline_model_parallel_size)


def destroy_model_parallel() -> None:
    global _TP, _PP, _WORLD_RANK
    _TP = _PP = _WORLD_RANK = None


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def get_pp_group() -> GroupCoordinator:
    assert _PP is not None, "pipeline model parallel group is not initialized"
    return _PP


def get_tensor_model_parallel_rank() -> int:
    return get_tp_group().rank_in_group


def get_tensor_model_parallel_world_size() -> int:
    return get_tp_group().world_size
