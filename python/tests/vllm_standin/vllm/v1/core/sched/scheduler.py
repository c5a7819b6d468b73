"""Stand-in of vllm/v1/core/sched/scheduler.py at vLLM 00f4240e (see ../../../../README.md): the
paths of Scheduler that drive a KV connector, FCFS, without speculative decoding, asynchronous
scheduling, pipeline parallelism or encoders.

- __init__: the connector (KVConnectorFactory, role SCHEDULER); kv_load_failure_policy
  ("recompute" or "fail"); requires_kv_delivery read once; the KVCacheManager (block sizes from
  resolve_kv_cache_block_sizes), then connector.bind_kv_cache_manager(manager).
- add_request: connector.on_new_request(request).
- schedule(): RUNNING requests first; when a request's new blocks do not fit, the scheduler
  stops if connector.has_pending_block_frees(), else preempts the last running request (blocks
  freed, num_computed_tokens 0, back to the front of the waiting queue, drop_stale_output =
  requires_kv_delivery). Then, if nothing was preempted, waiting requests, those holding
  blocks (kv_holding_waiting) first: a WAITING_FOR_REMOTE_KVS request is skipped until every
  worker reported its load (_update_waiting_for_remote_kv then caches its blocks and makes it
  WAITING or PREEMPTED again); a request with no computed tokens gets the local hit
  (get_computed_blocks), then connector.get_num_new_matched_tokens(request, local hit) (None:
  skipped, asked again next step). allocate_slots (external tokens counted as computed), then
  always connector.update_state_after_alloc(request, all its blocks, external tokens). An
  asynchronous load (load_kv_async) allocates with delay_cache_blocks, admits only what fits
  beside the blocks other in-flight prefills still need, sets WAITING_FOR_REMOTE_KVS and
  num_computed_tokens = local + external, and schedules nothing for the request this step. A
  synchronous load sets has_sync_kv_loads. connector.build_connector_meta runs once per step
  with output.kv_connector_block_state set.
- update_from_output(): failed_recving (_handle_failed_recving) and invalid_block_ids
  (_handle_invalid_blocks, one KV cache group only): "recompute" truncates the requests'
  computed tokens to the first bad block and computes them again, "fail" ends them with
  FINISHED_ERROR; sampled tokens appended; a request with max_tokens outputs finishes:
  request_finished (SupportsHMA: request_finished_all_groups) with the block ids of its
  computed tokens decides whether its blocks are freed now or when the workers report it in
  finished_sending; connector.update_connector_output; finished_recving moves
  WAITING_FOR_REMOTE_KVS requests on (an aborted one's blocks are freed then); the workers'
  stats merged with connector.get_kv_connector_stats(); events from connector.take_events().

What a test reads: `admissions` ((request id, local tokens, external tokens) per lookup that
led to an allocation), `kv_connector_stats` (per step, the merged stats' to_dict()),
`kv_event_batches` (the KVEventBatch published per step), `kv_transfer_params` (request id ->
what request_finished returned).
"""

import time
from collections import deque

from vllm.distributed.kv_events import KVEventBatch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole, SupportsHMA
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.core.sched.output import (CachedRequestData, KVConnectorBlockState, NewRequestData,
                                       SchedulerOutput)
from vllm.v1.request import RequestStatus


class Scheduler:
    def __init__(self, vllm_config, kv_cache_config, block_size: int = 0,
                 hash_block_size: int = 0) -> None:
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        if not block_size:  # the engine core resolves them
            block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config,
                                                                       vllm_config)
        self.block_size = block_size
        self.hash_block_size = hash_block_size or block_size
        self.max_num_scheduled_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.max_num_running_reqs = vllm_config.scheduler_config.max_num_seqs
        self.use_v2_model_runner = vllm_config.use_v2_model_runner
        self.connector = None
        self.recompute_kv_load_failures = True
        self.requires_kv_delivery = False
        kv_transfer_config = vllm_config.kv_transfer_config
        if kv_transfer_config is not None:
            self.connector = KVConnectorFactory.create_connector(
                config=vllm_config, role=KVConnectorRole.SCHEDULER,
                kv_cache_config=kv_cache_config)
            policy = kv_transfer_config.kv_load_failure_policy
            self.recompute_kv_load_failures = policy == "recompute"
            self.requires_kv_delivery = self.connector.requires_kv_delivery
        self.kv_cache_manager = KVCacheManager(
            kv_cache_config, vllm_config.cache_config.enable_prefix_caching,
            scheduler_block_size=self.block_size, hash_block_size=self.hash_block_size)
        if self.connector is not None:
            self.connector.bind_kv_cache_manager(self.kv_cache_manager)
        self.requests = {}
        self.waiting = deque()
        self.kv_holding_waiting = deque()  # waiting requests that hold blocks: drained first
        self.running = []
        self.finished_req_ids: set[str] = set()
        self.reset_preempted_req_ids: set[str] = set()
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        self._inflight_prefills: set = set()
        self.admissions: list[tuple[str, int, int]] = []
        self.kv_connector_stats: list[dict] = []
        self.kv_event_batches: list[KVEventBatch] = []
        self.kv_transfer_params: dict = {}

    def add_request(self, request) -> None:
        self._queue_of(request).append(request)
        self.requests[request.request_id] = request
        if self.connector is not None:
            self.connector.on_new_request(request)

    def abort(self, request_id: str) -> None:
        self.finish_requests([request_id], RequestStatus.FINISHED_ABORTED)

    @staticmethod
    def _holds_kv_blocks(request) -> bool:
        return (request.num_computed_tokens > 0 or
                request.status == RequestStatus.WAITING_FOR_REMOTE_KVS)

    def _queue_of(self, request) -> deque:
        return self.kv_holding_waiting if self._holds_kv_blocks(request) else self.waiting

    # ---- schedule ----
    def schedule(self) -> SchedulerOutput:
        scheduled_new, scheduled_resumed, scheduled_running, preempted = [], [], [], []
        req_to_new_blocks, num_scheduled = {}, {}
        budget = self.max_num_scheduled_tokens
        has_sync_kv_loads = False

        req_index = 0
        while req_index < len(self.running) and budget > 0:
            request = self.running[req_index]
            num_new = min(request.num_tokens_with_spec - request.num_computed_tokens, budget)
            if num_new == 0:
                req_index += 1
                continue
            while True:
                new_blocks = self.kv_cache_manager.allocate_slots(request, num_new)
                if new_blocks is not None:
                    break
                if self.connector is not None and self.connector.has_pending_block_frees():
                    break  # the connector's transfers will free blocks: wait, do not preempt
                victim = self.running.pop()
                self._preempt_request(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if new_blocks is None:
                break
            scheduled_running.append(request)
            req_to_new_blocks[request.request_id] = new_blocks
            num_scheduled[request.request_id] = num_new
            budget -= num_new
            req_index += 1

        if not preempted:
            budget, has_sync_kv_loads = self._schedule_waiting(
                budget, scheduled_new, scheduled_resumed, req_to_new_blocks, num_scheduled)

        if self.use_v2_model_runner:  # the V2 runner gets resumed requests as new ones
            scheduled_new.extend(scheduled_resumed)
            scheduled_resumed = []
        cached_reqs = scheduled_running + scheduled_resumed
        output = SchedulerOutput(
            scheduled_new_reqs=[NewRequestData.from_request(
                r, req_to_new_blocks[r.request_id].get_block_ids()) for r in scheduled_new],
            scheduled_cached_reqs=CachedRequestData(
                req_ids=[r.request_id for r in cached_reqs],
                resumed_req_ids={r.request_id for r in scheduled_resumed},
                new_token_ids=[], all_token_ids={},
                new_block_ids=[req_to_new_blocks[r.request_id].get_block_ids(allow_none=True)
                               for r in cached_reqs],
                num_computed_tokens=[r.num_computed_tokens for r in cached_reqs],
                num_output_tokens=[r.num_output_tokens for r in cached_reqs]),
            num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=sum(num_scheduled.values()),
            scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
            num_common_prefix_blocks=[0] * len(self.kv_cache_manager.groups),
            finished_req_ids=self.finished_req_ids, free_encoder_mm_hashes=[],
            preempted_req_ids=self.reset_preempted_req_ids,
            has_sync_kv_loads=has_sync_kv_loads)
        if self.connector is not None:
            output.kv_connector_block_state = KVConnectorBlockState(
                req_ids=set(num_scheduled), resolve_block_ids=self.kv_cache_manager.get_block_ids,
                boundary_state_offloads={})
            output.kv_connector_metadata = self.connector.build_connector_meta(output)
            output.kv_connector_block_state = None  # never dispatched to the workers
        for rid, n in num_scheduled.items():
            request = self.requests[rid]
            request.num_computed_tokens += n
            if request.num_computed_tokens >= request.num_tokens:
                self._inflight_prefills.discard(request)
        self.finished_req_ids = set()
        self.reset_preempted_req_ids = set()
        return output

    def _schedule_waiting(self, budget, scheduled_new, scheduled_resumed, req_to_new_blocks,
                          num_scheduled) -> tuple[int, bool]:
        has_sync_kv_loads = False
        skipped: dict[int, list] = {id(self.waiting): [], id(self.kv_holding_waiting): []}

        def skip(queue: deque) -> None:
            request = queue.popleft()
            skipped[id(self._queue_of(request))].append(request)

        while budget > 0 and len(self.running) < self.max_num_running_reqs:
            queue = self.kv_holding_waiting or self.waiting
            if not queue:
                break
            request = queue[0]
            rid = request.request_id
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                if rid not in self.finished_recving_kv_req_ids:
                    skip(queue)  # its load is still in flight
                    continue
                self._update_waiting_for_remote_kv(request)
                request.status = (RequestStatus.PREEMPTED if request.num_preemptions
                                  else RequestStatus.WAITING)
            num_external, load_async, lookup = 0, False, request.num_computed_tokens == 0
            computed_blocks, num_local = self.kv_cache_manager.empty_kv_cache_blocks, 0
            if lookup:
                computed_blocks, num_local = self.kv_cache_manager.get_computed_blocks(request)
                if self.connector is not None:
                    ext, load_async = self.connector.get_num_new_matched_tokens(request,
                                                                                num_local)
                    if request.skip_reading_prefix_cache:
                        ext, load_async = 0, False
                    if ext is None:  # the connector needs more time: ask again next step
                        skip(queue)
                        continue
                    num_external = ext
                num_computed = num_local + num_external
            else:  # an async load finished, or a sync load failed and is recomputed
                num_computed = request.num_computed_tokens
            assert num_computed <= request.num_tokens
            if load_async:
                assert num_external > 0
                num_new = 0
            else:
                num_new = min(request.num_tokens - num_computed, budget)
                assert num_new > 0
            reserved = self._inflight_prefill_reserved_blocks() if load_async else 0
            new_blocks = self.kv_cache_manager.allocate_slots(
                request, num_new, num_local, computed_blocks,
                num_external_computed_tokens=num_external, delay_cache_blocks=load_async,
                reserved_blocks=reserved)
            if new_blocks is None:
                break
            if self.connector is not None:
                self.connector.update_state_after_alloc(
                    request, self.kv_cache_manager.get_blocks(rid), num_external)
            if lookup:
                self.admissions.append((rid, num_local, num_external))
            if load_async:
                request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed
                self._inflight_prefills.add(request)
                skip(queue)
                continue
            queue.popleft()
            self.running.append(request)
            has_sync_kv_loads |= num_external > 0
            if request.status == RequestStatus.WAITING:
                scheduled_new.append(request)
            elif request.status == RequestStatus.PREEMPTED:
                scheduled_resumed.append(request)
            else:
                raise RuntimeError(f"Invalid request status: {request.status}")
            req_to_new_blocks[rid] = self.kv_cache_manager.get_blocks(rid)
            num_scheduled[rid] = num_new
            budget -= num_new
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            if num_computed + num_new < request.num_tokens:
                self._inflight_prefills.add(request)
        self.waiting.extendleft(reversed(skipped[id(self.waiting)]))
        self.kv_holding_waiting.extendleft(reversed(skipped[id(self.kv_holding_waiting)]))
        return budget, has_sync_kv_loads

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the requests still prefilling need to hold their whole sequence."""
        return sum(self.kv_cache_manager.num_blocks_needed(r, r.num_tokens)
                   for r in self._inflight_prefills)

    def _preempt_request(self, request) -> None:
        assert request.status == RequestStatus.RUNNING
        self.kv_cache_manager.free(request)
        self._inflight_prefills.discard(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        # vLLM drops a preempted request's in-flight output when the connector requires
        # delivery; the stand-in has none in flight and only records the decision.
        request.drop_stale_output = self.requires_kv_delivery
        self.reset_preempted_req_ids.add(request.request_id)
        self.waiting.appendleft(request)

    def _update_waiting_for_remote_kv(self, request) -> None:
        """Every worker reported the request's load: cache what arrived."""
        rid = request.request_id
        if rid in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            else:  # nothing valid: release the blocks (a retry may find a local hit)
                self.kv_cache_manager.free(request)
            self.failed_recving_kv_req_ids.remove(rid)
        else:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            self.connector.consume_prefix_replay_checkpoint(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1  # compute the last one
        self.finished_recving_kv_req_ids.remove(rid)

    # ---- update_from_output ----
    def update_from_output(self, scheduler_output, model_runner_output) -> list[str]:
        """Returns the ids of the requests that finished in this step."""
        kv_out = model_runner_output.kv_connector_output
        failed_load_ids: set[str] = set()
        if kv_out and kv_out.failed_recving:
            failed_load_ids |= self._handle_failed_recving(kv_out.failed_recving)
        if kv_out and kv_out.invalid_block_ids:
            failed_load_ids |= self._handle_invalid_blocks(kv_out.invalid_block_ids,
                                                           scheduler_output.num_scheduled_tokens)
        finished = []
        for rid, tokens in zip(model_runner_output.req_ids,
                               model_runner_output.sampled_token_ids):
            request = self.requests.get(rid)
            if rid in failed_load_ids or request is None or request.is_finished() or not tokens:
                continue
            request.append_output_token_ids(tokens)
            if request.num_output_tokens >= request.max_tokens:
                self.running.remove(request)
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                self._free_request(request)
                finished.append(rid)
        if failed_load_ids and not self.recompute_kv_load_failures:
            finished += [r.request_id for r in self.finish_requests(
                failed_load_ids, RequestStatus.FINISHED_ERROR)]
        if kv_out:
            self._update_from_kv_xfer_finished(kv_out)
        stats = kv_out.kv_connector_stats if kv_out else None
        if self.connector is not None:
            own = self.connector.get_kv_connector_stats()
            if own is not None and not own.is_empty():
                stats = stats.aggregate(own) if stats is not None else own
        if stats is not None:
            self.kv_connector_stats.append(stats.to_dict())
        events = self.kv_cache_manager.take_events()
        if self.connector is not None:
            events.extend(self.connector.take_events() or ())
        if events:
            self.kv_event_batches.append(KVEventBatch(ts=time.time(), events=events))
        return finished

    def _update_from_kv_xfer_finished(self, kv_out) -> None:
        if self.connector is not None:
            self.connector.update_connector_output(kv_out)
        for rid in kv_out.finished_recving or ():
            assert rid in self.requests, f"finished_recving for unknown request {rid}"
            request = self.requests[rid]
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
            else:  # aborted during its load: its blocks were kept until now
                assert request.is_finished()
                self._free_blocks(request)
        for rid in kv_out.finished_sending or ():
            assert rid in self.requests, f"finished_sending for unknown request {rid}"
            self._free_blocks(self.requests[rid])

    def _handle_failed_recving(self, failed_req_ids: set[str]) -> set[str]:
        affected = set()
        for rid in failed_req_ids:
            request = self.requests.get(rid)
            if request is not None and request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                affected.add(rid)
                if self.recompute_kv_load_failures:
                    request.num_computed_tokens = 0
                    self.failed_recving_kv_req_ids.add(rid)
        return set() if self.recompute_kv_load_failures else affected

    def _handle_invalid_blocks(self, invalid: set[int], num_scheduled: dict) -> set[str]:
        if len(self.kv_cache_config.kv_cache_groups) > 1:
            raise RuntimeError("A KV connector reported block-level load failures "
                               "(invalid_block_ids) which is not supported for models with "
                               "multiple KV cache groups. Connectors must report failed "
                               "requests via KVConnectorTransferResults.failed_recving instead.")
        async_reqs = [r for r in self.kv_holding_waiting
                      if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS]
        async_failed, _ = self._truncate_at_invalid_blocks(async_reqs, invalid, num_scheduled)
        sync_failed, evict = self._truncate_at_invalid_blocks(self.running, invalid,
                                                              num_scheduled)
        if not (async_failed or sync_failed):
            return set()
        if not self.recompute_kv_load_failures:
            self.kv_cache_manager.evict_blocks(evict)
            return async_failed | sync_failed
        self.failed_recving_kv_req_ids |= async_failed
        return sync_failed  # skipped in this step's output, computed again from the bad block

    def _truncate_at_invalid_blocks(self, requests, invalid: set[int], num_scheduled: dict
                                    ) -> tuple[set[str], set[int]]:
        """Cuts each request's computed tokens at its first invalid block (a block shared with
        an earlier request in this pass is recomputed by that one); returns the affected
        requests and the blocks from each first invalid block on."""
        affected, to_evict, marked = set(), set(), set()
        for request in requests:
            rid = request.request_id
            (block_ids,) = self.kv_cache_manager.get_block_ids(rid)
            computed = request.num_computed_tokens - num_scheduled.get(rid, 0)
            is_affected = truncated = False
            for idx, block_id in enumerate(block_ids[:-(-computed // self.block_size)]):
                if block_id not in invalid:
                    continue
                is_affected = True
                if block_id in marked:
                    continue
                marked.add(block_id)
                if not truncated:
                    truncated = True
                    request.num_computed_tokens = idx * self.block_size
                    to_evict.update(block_ids[idx:])
            if is_affected:
                if not truncated:
                    request.num_computed_tokens = computed
                affected.add(rid)
        return affected, to_evict

    # ---- finishing ----
    def finish_requests(self, request_ids, finished_status: RequestStatus) -> list:
        """Ends requests from outside the step (an abort) or after a failed load."""
        assert RequestStatus.is_finished(finished_status)
        ended = []
        for rid in list(request_ids):
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            ended.append(request)
            if request.status == RequestStatus.RUNNING:
                self.running.remove(request)
            else:
                for queue in (self.waiting, self.kv_holding_waiting):
                    if request in queue:
                        queue.remove(request)
            delay_free_blocks = False
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # Its load is in flight: the blocks go when the workers report it.
                delay_free_blocks = rid not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(rid)
                self.failed_recving_kv_req_ids.discard(rid)
            request.status = finished_status
            self._free_request(request, delay_free_blocks)
        return ended

    def _free_request(self, request, delay_free_blocks: bool = False) -> None:
        assert request.is_finished()
        self._inflight_prefills.discard(request)
        delay = False
        if self.connector is not None:
            rid = request.request_id
            self.kv_cache_manager.remove_skipped_blocks(rid, request.num_computed_tokens)
            block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
                rid, request.num_computed_tokens)
            if isinstance(self.connector, SupportsHMA):
                delay, params = self.connector.request_finished_all_groups(request, block_ids)
            else:
                assert len(self.kv_cache_config.kv_cache_groups) == 1
                delay, params = self.connector.request_finished(request, block_ids[0])
            self.kv_transfer_params[rid] = params
        self.finished_req_ids.add(request.request_id)
        if not (delay or delay_free_blocks):
            self._free_blocks(request)

    def _free_blocks(self, request) -> None:
        assert request.is_finished()
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def has_finished_requests(self) -> bool:
        return bool(self.finished_req_ids) or (
            self.connector is not None and len(self.requests) > (
                len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)))

    def has_requests(self) -> bool:
        return bool(self.waiting or self.kv_holding_waiting or self.running or
                    self.has_finished_requests() or
                    (self.connector is not None and self.connector.has_pending_push_work()))
