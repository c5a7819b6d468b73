"""Stand-in of vllm/v1/core/sched/scheduler.py at vLLM 003df296 (see ../../../../README.md): the
paths of Scheduler that drive a KV connector, for one KV cache group, FCFS, no speculative
decoding, synchronous KV loads:

- schedule(): RUNNING requests first (when a request's new blocks do not fit, the last running
  request is preempted: its blocks are freed, num_computed_tokens reset to 0, back to the front
  of the queue); then, if nothing was preempted, WAITING requests: the local prefix-cache hit
  (get_computed_blocks), then connector.get_num_new_matched_tokens(request, local hit), then
  allocate_slots with the external tokens, then connector.update_state_after_alloc(request,
  all the request's blocks, external tokens). The SchedulerOutput carries new requests, cached
  (running and resumed; for resumed ones new_block_ids is the whole block table) and
  finished_req_ids; connector.build_connector_meta(output) fills kv_connector_metadata.
- update_from_output(): invalid (failed-load) blocks roll their requests back to the first
  invalid block (kv_load_failure_policy "recompute"); sampled tokens are appended; a request
  with max_tokens outputs finishes: connector.request_finished(request, block ids of its
  computed tokens) decides whether its blocks are freed now or when the workers report the
  request in finished_sending.
"""

from collections import deque

from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.request import RequestStatus


class Scheduler:
    def __init__(self, vllm_config, kv_cache_config, block_size: int = 0) -> None:
        self.vllm_config = vllm_config
        self.block_size = block_size or vllm_config.cache_config.block_size
        self.max_num_scheduled_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.max_num_running_reqs = vllm_config.scheduler_config.max_num_seqs
        self.connector = None
        if vllm_config.kv_transfer_config is not None:
            self.connector = KVConnectorFactory.create_connector(
                config=vllm_config, role=KVConnectorRole.SCHEDULER,
                kv_cache_config=kv_cache_config)
        self.kv_cache_manager = KVCacheManager(
            kv_cache_config.num_blocks, self.block_size,
            vllm_config.cache_config.enable_prefix_caching)
        self.requests = {}
        self.waiting = deque()
        self.running = []
        self.finished_req_ids: set[str] = set()
        self.reset_preempted_req_ids: set[str] = set()
        # What a test looks at: (request id, local tokens, external tokens) per admission.
        self.admissions: list[tuple[str, int, int]] = []

    def add_request(self, request) -> None:
        self.waiting.append(request)
        self.requests[request.request_id] = request

    def schedule(self) -> SchedulerOutput:
        scheduled_new, scheduled_resumed, scheduled_running, preempted = [], [], [], []
        req_to_new_blocks, num_scheduled = {}, {}
        budget = self.max_num_scheduled_tokens

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
            while self.waiting and budget > 0 and len(self.running) < self.max_num_running_reqs:
                request = self.waiting[0]
                num_external = 0
                computed_blocks = self.kv_cache_manager.empty_kv_cache_blocks
                num_local = 0
                if request.num_computed_tokens == 0:
                    computed_blocks, num_local = self.kv_cache_manager.get_computed_blocks(
                        request)
                    if self.connector is not None:
                        ext, load_async = self.connector.get_num_new_matched_tokens(
                            request, num_local)
                        if ext is None:
                            break
                        assert not load_async, "the stand-in has no asynchronous KV loads"
                        num_external = ext
                    num_computed = num_local + num_external
                else:
                    num_computed = request.num_computed_tokens
                assert num_computed <= request.num_tokens
                num_new = min(request.num_tokens - num_computed, budget)
                assert num_new > 0
                new_blocks = self.kv_cache_manager.allocate_slots(
                    request, num_new, num_local, computed_blocks,
                    num_external_computed_tokens=num_external)
                if new_blocks is None:
                    break
                rid = request.request_id
                if self.connector is not None:
                    self.connector.update_state_after_alloc(
                        request, self.kv_cache_manager.get_blocks(rid), num_external)
                self.waiting.popleft()
                self.running.append(request)
                if request.status == RequestStatus.WAITING:
                    scheduled_new.append(request)
                else:
                    scheduled_resumed.append(request)
                req_to_new_blocks[rid] = self.kv_cache_manager.get_blocks(rid)
                num_scheduled[rid] = num_new
                budget -= num_new
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed
                self.admissions.append((rid, num_local, num_external))

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
            num_common_prefix_blocks=[0], finished_req_ids=self.finished_req_ids,
            free_encoder_mm_hashes=[], preempted_req_ids=self.reset_preempted_req_ids)
        if self.connector is not None:
            output.kv_connector_metadata = self.connector.build_connector_meta(output)
        for rid, n in num_scheduled.items():
            self.requests[rid].num_computed_tokens += n
        self.finished_req_ids = set()
        self.reset_preempted_req_ids = set()
        return output

    def _preempt_request(self, request) -> None:
        assert request.status == RequestStatus.RUNNING
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.reset_preempted_req_ids.add(request.request_id)
        self.waiting.appendleft(request)

    def _invalid_block_rollback(self, invalid: set[int]) -> set[str]:
        """Requests whose blocks failed to load recompute from the first failed block."""
        affected = set()
        for request in self.running:
            ids = self.kv_cache_manager.get_block_ids(request.request_id)[0]
            bad = [i for i, b in enumerate(ids) if b in invalid]
            if bad and bad[0] * self.block_size < request.num_computed_tokens:
                request.num_computed_tokens = bad[0] * self.block_size
                affected.add(request.request_id)
        for blk in self.kv_cache_manager.blocks:
            if blk.block_id in invalid and blk.block_hash is not None:
                self.kv_cache_manager.evict_cached([blk.block_hash])
        return affected

    def update_from_output(self, scheduler_output, model_runner_output) -> list[str]:
        """Returns the ids of the requests that finished in this step."""
        kv_out = model_runner_output.kv_connector_output
        affected = self._invalid_block_rollback(kv_out.invalid_block_ids) if (
            kv_out and kv_out.invalid_block_ids) else set()
        finished = []
        for rid, tokens in zip(model_runner_output.req_ids,
                               model_runner_output.sampled_token_ids):
            request = self.requests.get(rid)
            if request is None or request.status != RequestStatus.RUNNING or rid in affected:
                continue
            if not tokens:
                continue
            request.append_output_token_ids(tokens)
            if request.num_output_tokens >= request.max_tokens:
                self.running.remove(request)
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                self._free_request(request)
                finished.append(rid)
        if kv_out is not None:
            for rid in kv_out.finished_sending or ():
                self._free_blocks(self.requests[rid])
            if self.connector is not None:
                self.connector.update_connector_output(kv_out)
        return finished

    def _free_request(self, request) -> None:
        delay = False
        if self.connector is not None:
            block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
                request.request_id, request.num_computed_tokens)
            delay, _params = self.connector.request_finished(request, block_ids[0])
        self.finished_req_ids.add(request.request_id)
        if not delay:
            self._free_blocks(request)

    def _free_blocks(self, request) -> None:
        assert request.is_finished()
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def has_requests(self) -> bool:
        return bool(self.waiting or self.running or self.finished_req_ids or
                    len(self.requests) > len(self.waiting) + len(self.running))
