"""A KV connector for testing the vLLM stand-in itself (not FlatCake): it does what its
kv_connector_extra_config scripts and records every call vLLM makes, so that a test can drive
the scheduler's connector paths (asynchronous loads, failed loads, held blocks, stats, events,
two KV cache groups) and check them. Its "store" is the fake model of vllm_util.py: a load
writes the KV the model would have computed (FakeWorker.fill_kv), so the model's attention
checks every loaded byte.

Options (kv_connector_extra_config):
  offer         tokens offered to a request's lookup (whole blocks, never its last token;
                each request is offered a load once)
  async         answer load_kv_async=True: the workers load between steps
  report_after  {rank: steps} after start_load_kv before a worker reports an asynchronous load
                (default 1: the next step)
  fail_recv     report asynchronous loads in failed_recving (nothing written)
  lose_block    index of the loaded block a synchronous load fails to write and reports
  hold_steps    request_finished keeps the blocks; the workers report finished_sending this
                many steps after they see the request finish
  pending_frees has_pending_block_frees answers True while blocks are held
  delivery      requires_kv_delivery (default vLLM's: the producer role)
  stats, events report KVConnectorStats / KV cache events
"""

from dataclasses import dataclass, field

from vllm.distributed.kv_events import BlockStored, KVConnectorKVEvents, KVEventAggregator
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole,
                                                               KVConnectorTransferResults,
                                                               SupportsHMA)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats


def _stored(req_id: str) -> BlockStored:
    """The event a load of req_id publishes (a stand-in block hash: the request id)."""
    return BlockStored(block_hashes=[req_id.encode()], parent_block_hash=None, token_ids=[],
                       block_size=16, lora_id=None, medium="CPU", lora_name=None)


@dataclass
class ScriptedMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)  # (req_id, block ids per group, start, end)
    holds: list = field(default_factory=list)  # request ids whose blocks request_finished kept


@dataclass
class ScriptedStats(KVConnectorStats):
    def aggregate(self, other):
        return ScriptedStats({k: self.data.get(k, 0) + other.data.get(k, 0)
                              for k in set(self.data) | set(other.data)})

    def reduce(self):
        return dict(self.data)

    def is_empty(self):
        return not self.data

    def reset(self):
        self.data = {}


class ScriptedEvents(KVConnectorKVEvents):
    def __init__(self, num_workers: int = 1) -> None:
        self._aggregator = KVEventAggregator(num_workers)

    def add_events(self, events):
        self._aggregator.add_events(events)

    def aggregate(self):
        common = self._aggregator.get_common_events()
        self._aggregator.clear_events()
        self._aggregator.add_events(common)
        self._aggregator.reset_workers()
        return self

    def increment_workers(self, count=1):
        self._aggregator.increment_workers(count)

    def get_all_events(self):
        return self._aggregator.get_all_events()

    def get_number_of_workers(self):
        return self._aggregator.get_number_of_workers()

    def clear_events(self):
        self._aggregator.clear_events()


class ScriptedConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self.opts = dict(self._kv_transfer_config.kv_connector_extra_config)
        self.calls: list[tuple] = []  # (method, details) in call order
        self.fake_worker = None  # the FakeWorker (set by the test), whose KV a load writes
        # Scheduler side.
        self._lookups: dict[str, int] = {}  # request -> the local hit its lookup was given
        self._offered: set[str] = set()
        self._loads: list = []
        self._holds: list = []
        self.holding: set[str] = set()
        self.block_states: list[dict] = []  # per build_connector_meta: req -> block ids
        self._events_out: list = []
        # Worker side.
        self._inflight: list = []  # [steps left, load]
        self._sends: dict[str, int] = {}
        self._seen_finished: set[str] = set()
        self._errors: set[int] = set()
        self._reported: list = []  # loads reported, all steps
        self._reported_now: list = []  # ... in this step

    def _rank(self):
        return self._vllm_config.parallel_config.rank

    @property
    def requires_kv_delivery(self) -> bool:
        if "delivery" in self.opts:
            return self.opts["delivery"]
        return super().requires_kv_delivery

    # ---- scheduler side ----
    def bind_kv_cache_manager(self, kv_cache_manager) -> None:
        self.calls.append(("bind_kv_cache_manager", kv_cache_manager))
        super().bind_kv_cache_manager(kv_cache_manager)

    def on_new_request(self, request) -> None:
        self.calls.append(("on_new_request", request.request_id))

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        rid = request.request_id
        self._lookups[rid] = num_computed_tokens
        block_size = self._kv_cache_manager.block_size
        top = min(self.opts.get("offer", 0), (request.num_tokens - 1) // block_size * block_size)
        if rid in self._offered or top <= num_computed_tokens:
            return 0, False
        return top - num_computed_tokens, bool(self.opts.get("async", False))

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        block_ids = blocks.get_block_ids()
        self.calls.append(("update_state_after_alloc", rid, block_ids, num_external_tokens))
        if num_external_tokens > 0:
            self._offered.add(rid)
            start = self._lookups[rid]
            self._loads.append((rid, block_ids, start, start + num_external_tokens))

    def build_connector_meta(self, scheduler_output):
        state = scheduler_output.kv_connector_block_state
        self.block_states.append({rid: state.get_block_ids(rid) for rid in state.req_ids})
        meta = ScriptedMetadata(self._loads, self._holds)
        self._loads, self._holds = [], []
        return meta

    def _finished(self, request, block_ids):
        if not self.opts.get("hold_steps"):
            return False, None
        self.holding.add(request.request_id)
        self._holds.append(request.request_id)
        return True, {"held": True}

    def request_finished(self, request, block_ids):
        self.calls.append(("request_finished", request.request_id, block_ids))
        return self._finished(request, block_ids)

    def update_connector_output(self, connector_output):
        self.calls.append(("update_connector_output", connector_output))
        self.holding -= connector_output.finished_sending or set()
        if connector_output.kv_cache_events is not None:
            # The events every worker emitted (MooncakeStore's pattern).
            self._events_out += connector_output.kv_cache_events.aggregate().get_all_events()

    def has_pending_block_frees(self) -> bool:
        return bool(self.opts.get("pending_frees")) and bool(self.holding)

    def take_events(self):
        events, self._events_out = self._events_out, []
        return events

    def get_kv_connector_stats(self):
        if not self.opts.get("stats"):
            return None
        if self.role == KVConnectorRole.SCHEDULER:
            return ScriptedStats({"lookups": len(self._lookups)})
        return ScriptedStats({"reported": len(self._reported)})

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return ScriptedStats(dict(data or {}))

    # ---- worker side ----
    def register_kv_caches(self, kv_caches):
        self.calls.append(("register_kv_caches", {n: tuple(t.shape) for n, t in kv_caches.items()}))

    def set_host_xfer_buffer_ops(self, copy_operation):
        self.calls.append(("set_host_xfer_buffer_ops", copy_operation))

    def handle_preemptions(self, kv_connector_metadata):
        self.calls.append(("handle_preemptions",))

    def finish_forward(self):
        self.calls.append(("finish_forward",))

    def _fill(self, load, skip_block=None):
        rid, block_ids, start, end = load
        if skip_block is None:
            self.fake_worker.fill_kv(rid, block_ids, start, end)
            return
        bs = self._vllm_config.cache_config.block_size
        self.fake_worker.fill_kv(rid, block_ids, start, skip_block * bs)
        self.fake_worker.fill_kv(rid, block_ids, (skip_block + 1) * bs, end)
        self._errors.add(block_ids[0][skip_block])

    def start_load_kv(self, forward_context, **kwargs):
        self.calls.append(("start_load_kv", len(self.fake_worker.events)))
        meta = self._get_connector_metadata()
        for load in meta.loads:
            if self.opts.get("async"):
                after = self.opts.get("report_after", {}).get(str(self._rank()), 1)
                self._inflight.append([after, load])
            else:
                self._fill(load, self.opts.get("lose_block"))
        for rid in meta.holds:
            self._sends[rid] = self.opts["hold_steps"]

    def wait_for_layer_load(self, layer_name):
        return

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return

    def wait_for_save(self):
        self.calls.append(("wait_for_save",))

    def get_transfer_results(self, finished_req_ids):
        self._seen_finished |= set(finished_req_ids)
        out = KVConnectorTransferResults()
        self._reported_now = []
        for item in list(self._inflight):
            if item[0] <= 0:
                self._inflight.remove(item)
                rid = item[1][0]
                out.finished_recving.add(rid)
                if self.opts.get("fail_recv"):
                    out.failed_recving.add(rid)
                else:
                    self._fill(item[1])
                self._reported.append(rid)
                self._reported_now.append(rid)
            else:
                item[0] -= 1
        for rid in list(self._sends):
            if rid in self._seen_finished:
                if self._sends[rid] <= 0:
                    del self._sends[rid]
                    out.finished_sending.add(rid)
                else:
                    self._sends[rid] -= 1
        self.calls.append(("get_transfer_results", set(finished_req_ids), out))
        return out

    def get_block_ids_with_load_errors(self):
        errors, self._errors = self._errors, set()
        return errors

    def get_kv_connector_kv_cache_events(self):
        if not self.opts.get("events") or not self._reported_now:
            return None
        events = ScriptedEvents()
        events.add_events([_stored(rid) for rid in self._reported_now])
        return events


class ScriptedHMAConnector(ScriptedConnector, SupportsHMA):
    def request_finished_all_groups(self, request, block_ids):
        self.calls.append(("request_finished_all_groups", request.request_id, block_ids))
        return self._finished(request, block_ids)


SCRIPTED = {"kv_connector": "ScriptedConnector",
            "kv_connector_module_path": "vllm_scripted_connector"}
SCRIPTED_HMA = {"kv_connector": "ScriptedHMAConnector",
                "kv_connector_module_path": "vllm_scripted_connector"}


def calls(connector, name):
    """The recorded calls of one method."""
    return [c for c in connector.calls if c[0] == name]
