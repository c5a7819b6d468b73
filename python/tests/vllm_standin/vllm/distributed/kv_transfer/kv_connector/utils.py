"""Stand-in of vllm/distributed/kv_transfer/kv_connector/utils.py at vLLM 00f4240e:
KVOutputAggregator (the executor merging its workers' outputs), copy_kv_blocks (the operation
handed to set_host_xfer_buffer_ops; here CPU tensors, block dimension first) and
yield_req_data.

Aggregation: a request is finished sending (or receiving) once `expected_finished_count`
workers have reported it, in this step or earlier ones, so every worker must report every
transfer exactly once; a failed receive is passed on only together with its finished receive;
invalid block ids are the union; stats fold with aggregate(), events with add_events and
increment_workers, worker metadata with aggregate()."""

from typing import Literal, Optional

import torch

from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

BlockIds = tuple[list[int], ...] | list[list[int]]


class KVOutputAggregator:
    def __init__(self, expected_finished_count: int) -> None:
        self._expected_finished_count = expected_finished_count
        self._send_remaining: dict[str, int] = {}
        self._recv_remaining: dict[str, int] = {}
        self._failed_recving_pending: set[str] = set()
        self._checkpoint_counts: dict[str, dict[tuple, int]] = {}

    @classmethod
    def from_connector(cls, connector, world_size: int) -> "KVOutputAggregator":
        return cls(connector.get_finished_count() or world_size)

    def _count(self, remaining: dict, ids, done: set) -> None:
        for req_id in ids or ():
            left = remaining.get(req_id, self._expected_finished_count) - 1
            remaining[req_id] = left
            if left == 0:
                done.add(req_id)
                del remaining[req_id]

    def aggregate(self, outputs: list[ModelRunnerOutput], output_rank: int = 0
                  ) -> Optional[ModelRunnerOutput]:
        if not outputs[output_rank]:
            return None
        sending: set[str] = set()
        recving: set[str] = set()
        invalid: set[int] = set()
        stats = events = worker_meta = None
        for out in outputs:
            kv = out.kv_connector_output
            if not kv:
                continue
            if kv.expected_finished_count > 0:
                self._expected_finished_count = kv.expected_finished_count
            self._count(self._send_remaining, kv.finished_sending, sending)
            self._count(self._recv_remaining, kv.finished_recving, recving)
            if stats is None:
                stats = kv.kv_connector_stats
            elif kv.kv_connector_stats:
                assert isinstance(stats, type(kv.kv_connector_stats))
                stats = stats.aggregate(kv.kv_connector_stats)
            if worker_meta is None:
                worker_meta = kv.kv_connector_worker_meta
            elif kv.kv_connector_worker_meta:
                worker_meta = worker_meta.aggregate(kv.kv_connector_worker_meta)
            if events is None:
                events = kv.kv_cache_events
            elif kv.kv_cache_events:
                assert isinstance(events, type(kv.kv_cache_events))
                events.add_events(kv.kv_cache_events.get_all_events())
                events.increment_workers(1)
            invalid |= kv.invalid_block_ids
            self._failed_recving_pending |= kv.failed_recving
            for req_id, checkpoint in kv.prefix_replay_checkpoints.items():
                counts = self._checkpoint_counts.setdefault(req_id, {})
                counts[checkpoint] = counts.get(checkpoint, 0) + 1
        failed = self._failed_recving_pending & recving
        self._failed_recving_pending -= failed
        checkpoints = {}
        for req_id in recving:
            certified = [c for c, n in self._checkpoint_counts.pop(req_id, {}).items()
                         if n == self._expected_finished_count]
            if len(certified) == 1 and req_id not in failed:
                checkpoints[req_id] = certified[0]
        output = outputs[output_rank]
        output.kv_connector_output = KVConnectorOutput(
            finished_sending=sending or None, finished_recving=recving or None,
            prefix_replay_checkpoints=checkpoints, kv_connector_stats=stats or None,
            kv_cache_events=events or None, kv_connector_worker_meta=worker_meta or None,
            invalid_block_ids=invalid, failed_recving=failed,
            expected_finished_count=self._expected_finished_count)
        return output


def copy_kv_blocks(src_kv_caches: dict[str, torch.Tensor], dst_kv_caches: dict[str, torch.Tensor],
                   src_block_ids: list[int], dst_block_ids: list[int],
                   direction: Literal["h2d", "d2h"]) -> None:
    """Copies blocks (dimension 0) of every layer between two sets of caches."""
    if (not src_kv_caches or not dst_kv_caches or not src_block_ids or not dst_block_ids or
            len(src_block_ids) != len(dst_block_ids)):
        return
    src_idx = torch.tensor(src_block_ids, dtype=torch.int64)
    dst_idx = torch.tensor(dst_block_ids, dtype=torch.int64)
    for name, src in src_kv_caches.items():
        dst = dst_kv_caches[name]
        dst.index_copy_(0, dst_idx.to(dst.device), src.index_select(0, src_idx.to(src.device))
                        .to(dst.device))


def yield_req_data(scheduler_output):
    """(req_id, new block ids per group or None, resumed) for every scheduled request."""
    for req in scheduler_output.scheduled_new_reqs:
        yield req.req_id, req.block_ids, False
    cached = scheduler_output.scheduled_cached_reqs
    yield from zip(cached.req_ids, cached.new_block_ids,
                   (r in cached.resumed_req_ids for r in cached.req_ids))
