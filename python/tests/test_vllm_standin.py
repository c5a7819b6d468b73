"""The vLLM stand-in's engine (vllm_standin/, vLLM 00f4240e): the scheduler's connector paths
driven by a scripted connector (vllm_scripted_connector.py, not FlatCake), the two KV cache
groups of the hybrid manager and the layouts of the KV cache views."""

import math

import pytest
import torch

from vllm.distributed.kv_transfer.kv_connector.utils import copy_kv_blocks
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.request import RequestStatus
from vllm_scripted_connector import SCRIPTED, SCRIPTED_HMA, ScriptedConnector, _stored, calls
from vllm_util import PACKED, Engine, ModelShape, packed_kv_caches, prompt, slot


def engine(opts, *, hma=False, **kw) -> Engine:
    """An engine whose connector is the scripted one, its workers' loads writing the model's
    KV."""
    e = Engine(opts, kv_transfer=SCRIPTED_HMA if hma else SCRIPTED, hma=hma, **kw)
    for w in e.workers:
        w.connector.fake_worker = w
    return e


def reference_outputs(p, max_tokens, **kw):
    """What an engine with a connector that never hits samples for the prompt."""
    ref = engine({}, **kw)
    return ref.serve("ref", p, max_tokens=max_tokens)


# ---- the scheduler's connector paths ---------------------------------------------------------
def test_the_scheduler_binds_its_manager_and_announces_requests():
    e = engine({})
    sched = e.connector
    assert calls(sched, "bind_kv_cache_manager") == [
        ("bind_kv_cache_manager", e.scheduler.kv_cache_manager)]
    assert sched._kv_cache_manager is e.scheduler.kv_cache_manager
    e.add("r", prompt(40), max_tokens=1)
    assert calls(sched, "on_new_request") == [("on_new_request", "r")]
    assert e.scheduler.requires_kv_delivery is True  # kv_both: vLLM's default
    w = e.workers[0].connector
    assert [c[0] for c in w.calls[:2]] == ["register_kv_caches", "set_host_xfer_buffer_ops"]
    assert w.calls[1][1] is copy_kv_blocks


def test_an_asynchronous_load_waits_for_every_worker_and_runs_no_forward_meanwhile():
    p = prompt(80, seed=1)
    e = engine({"offer": 64, "async": True, "report_after": {"0": 1, "1": 2}}, tp=2)
    req = e.add("r", p, max_tokens=3)
    so = e.step()  # admitted: blocks allocated, the load started, nothing computed
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and req.num_computed_tokens == 64
    assert so.num_scheduled_tokens == {} and not so.has_sync_kv_loads
    assert e.scheduler.admissions == [("r", 0, 64)]
    assert all(w.forwards == [] for w in e.workers)
    so = e.step()  # rank 0 reports the load, rank 1 not yet: vLLM waits for every worker
    reported = [calls(w.connector, "get_transfer_results")[-1][2].finished_recving
                for w in e.workers]
    assert reported == [{"r"}, set()] and so.num_scheduled_tokens == {}
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert "r" not in e.scheduler.finished_recving_kv_req_ids
    e.step()  # rank 1 reports: the request is ready, for the next step
    assert "r" in e.scheduler.finished_recving_kv_req_ids
    assert all(w.forwards == [] for w in e.workers)
    so = e.step()
    assert so.num_scheduled_tokens == {"r": 16} and not so.has_sync_kv_loads
    assert [n.num_computed_tokens for n in so.scheduled_new_reqs] == [64]
    allocs = calls(e.connector, "update_state_after_alloc")
    assert [(c[1], c[3]) for c in allocs] == [("r", 64), ("r", 0)]  # again after the load
    assert allocs[1][2][0][:4] == allocs[0][2][0][:4]
    w = e.workers[0]
    assert w.checked_slots == 64 * 4 * 2 and w.mismatches == []  # the loaded KV, every byte
    assert e.run()["r"] == reference_outputs(p, 3) and e.mismatches == []


def test_an_abort_during_an_asynchronous_load_frees_the_blocks_when_the_load_ends():
    e = engine({"offer": 64, "async": True, "report_after": {"0": 3}})
    req = e.add("r", prompt(80, seed=2), max_tokens=3)
    e.step()
    held = e.scheduler.kv_cache_manager.num_free_blocks
    assert held == 63 - 4  # the blocks of the 64 loaded tokens only
    e.scheduler.abort("r")
    assert req.status == RequestStatus.FINISHED_ABORTED and "r" in e.scheduler.requests
    (finished,) = calls(e.connector, "request_finished")
    assert finished[1] == "r" and len(finished[2]) == 4  # the blocks of its 64 tokens
    e.step()
    e.step()
    assert "r" in e.scheduler.requests and e.scheduler.kv_cache_manager.num_free_blocks == held
    e.step()  # the worker reports the load: only now are the blocks free
    assert "r" not in e.scheduler.requests
    assert e.scheduler.kv_cache_manager.num_free_blocks == 63
    assert not e.scheduler.has_requests()


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_failed_asynchronous_load_is_recomputed_or_fails_the_request(policy):
    p = prompt(80, seed=3)
    e = engine({"offer": 64, "async": True, "fail_recv": True}, load_failure_policy=policy)
    req = e.add("r", p, max_tokens=3)
    out = e.run()
    if policy == "fail":
        assert req.status == RequestStatus.FINISHED_ERROR and out["r"] == []
    else:  # asked again: nothing offered, computed from scratch
        assert e.scheduler.admissions == [("r", 0, 64), ("r", 0, 0)]
        assert out["r"] == reference_outputs(p, 3) and e.mismatches == []
    assert e.scheduler.kv_cache_manager.num_free_blocks == 63


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_block_a_synchronous_load_lost_is_recomputed_or_fails_the_request(policy):
    p = prompt(80, seed=4)
    e = engine({"offer": 64, "lose_block": 2}, load_failure_policy=policy)
    req = e.add("r", p, max_tokens=3)
    so = e.step()
    assert so.has_sync_kv_loads and e.scheduler.admissions == [("r", 0, 64)]
    w = e.workers[0]
    assert {pos // 16 for _, _, pos in w.mismatches} == {2}  # the step read the lost block
    w.mismatches.clear()
    if policy == "fail":
        assert req.status == RequestStatus.FINISHED_ERROR and "r" not in e.scheduler.requests
        assert e.scheduler.kv_cache_manager.num_free_blocks == 63
        e.run()  # the workers hear of the end
        assert e.outputs["r"] == [] and calls(e.connector, "request_finished")
        return
    assert req.status == RequestStatus.RUNNING and req.num_computed_tokens == 32
    assert req.output_token_ids == ()  # the step's sample is dropped
    assert e.run()["r"] == reference_outputs(p, 3) and e.mismatches == []


@pytest.mark.parametrize("pending_frees", [True, False])
def test_pending_block_frees_stop_scheduling_instead_of_preempting(pending_frees):
    """Request a ends at once and the connector holds its 4 blocks for a while; b fills the
    other 4 and needs a 5th to decode. If the connector's held blocks will come free, vLLM waits
    for them; otherwise it preempts b."""
    e = engine({"hold_steps": 6, "pending_frees": pending_frees}, num_blocks=9)
    pa, pb = prompt(60, seed=5), prompt(60, seed=6)
    e.add("a", pa, max_tokens=1)
    b = e.add("b", pb, max_tokens=10)
    waited = 0  # steps b stayed running but was not scheduled
    while e.scheduler.has_requests():
        so = e.step()
        waited += b.status == RequestStatus.RUNNING and "b" not in so.num_scheduled_tokens
    if pending_frees:
        assert b.num_preemptions == 0 and waited >= 2
    else:
        assert b.num_preemptions == 1 and b.drop_stale_output is e.scheduler.requires_kv_delivery
    assert e.outputs["b"] == reference_outputs(pb, 10) and e.mismatches == []
    assert e.scheduler.kv_cache_manager.num_free_blocks == 8


def test_stats_and_events_reach_the_scheduler_merged_over_workers():
    e = engine({"offer": 64, "async": True, "stats": True, "events": True}, tp=2)
    e.serve("r", prompt(80, seed=7), max_tokens=2)
    assert {"lookups": 1, "reported": 2} in e.scheduler.kv_connector_stats
    log = KVConnectorLogging(ScriptedConnector)
    for data in e.scheduler.kv_connector_stats:
        log.observe(data)
    log.log()
    assert log.lines and log.lines[0].startswith("KV Transfer metrics: ")
    # Each worker emitted the load's event; the scheduler publishes the one every worker had.
    assert [b.events for b in e.scheduler.kv_event_batches] == [[_stored("r")]]


@pytest.mark.parametrize("v2", [False, True], ids=["v1_runner", "v2_runner"])
def test_the_worker_drives_the_connector_in_vllms_order(v2):
    """A step with a synchronous load starts it before the forward; the others start loading
    after it (a step without a forward too); the V2 runner adds handle_preemptions and
    finish_forward."""
    e = engine({"offer": 32}, v2=v2)
    e.serve("r", prompt(50, seed=8), max_tokens=2)  # load + prefill, decode, the finish step
    w = e.workers[0].connector
    names = [c[0] for c in w.calls[2:]]  # after register_kv_caches, set_host_xfer_buffer_ops
    pre, fin = ["handle_preemptions"] * v2, ["finish_forward"] * v2
    report = ["wait_for_save", "get_transfer_results"]
    later = pre + fin + ["start_load_kv"] + report
    assert names == pre + ["start_load_kv"] + fin + report + later + later
    # Attention calls seen when start_load_kv ran: none in the load step, 4 layers later.
    assert [c[1] for c in calls(w, "start_load_kv")] == [0, 8, 8]


# ---- two KV cache groups -------------------------------------------------------------------
@pytest.mark.parametrize("swa_block_size", [16, 32])
def test_two_kv_cache_groups_full_attention_and_sliding_window(swa_block_size):
    """Even layers attend to everything, odd ones to the last 32 tokens (a second KV cache
    group). Block ids are per group; the sliding-window group's blocks that left the window are
    vLLM's null block (id 0)."""
    shape = ModelShape(sliding_window=32, swa_block_size=swa_block_size)
    e = engine({}, hma=True, model_shape=shape)
    sizes = (e.scheduler.block_size, e.scheduler.hash_block_size)
    assert sizes == (math.lcm(16, swa_block_size), 16)
    assert sizes == resolve_kv_cache_block_sizes(e.kv_cache_config, e.config)
    p = prompt(100, seed=9)
    want = e.serve("a", p, max_tokens=20)
    assert e.mismatches == [] and e.workers[0].checked_slots > 0
    assert len(e._reqs["a"].block_hashes) == 119 // 16  # at the hash block size
    (finished,) = calls(e.connector, "request_finished_all_groups")
    full, swa = finished[2]
    assert len(full) == math.ceil(119 / 16) and len(swa) == math.ceil(119 / swa_block_size)
    out_of_window = (119 - 32 + 1) // swa_block_size
    assert swa[:out_of_window] == [0] * out_of_window and 0 not in swa[out_of_window:]
    assert 0 not in full
    # vLLM's prefix cache: both groups hit the prompt's whole blocks.
    assert e.serve("b", p, max_tokens=20) == want
    assert e.scheduler.admissions[-1] == ("b", 96, 0) and e.mismatches == []
    # A connector load into both groups: only the window's blocks of the sliding group.
    c = engine({"offer": 64}, hma=True, model_shape=shape)
    assert c.serve("c", p, max_tokens=20) == want
    (alloc,) = [a for a in calls(c.connector, "update_state_after_alloc") if a[3]]
    skipped = (64 - 32 + 1) // swa_block_size
    assert alloc[2][1][:skipped] == [0] * skipped and 0 not in alloc[2][0]
    assert c.scheduler.admissions == [("c", 0, 64)] and c.mismatches == []


def test_with_two_kv_cache_groups_a_connector_without_hma_is_refused():
    with pytest.raises(ValueError, match="disable-hybrid-kv-cache-manager"):
        Engine({}, kv_transfer=SCRIPTED, hma=True, model_shape=ModelShape(sliding_window=32))


# ---- KV cache views --------------------------------------------------------------------------
def _physical_offset(layout, l, b, h, n, c, dims):
    """Byte offset of logical (layer, block, head, token, content byte) in the group's buffer,
    written out per layout name."""
    L, B, H, N, C = dims
    return {"LBNHC": (((l * B + b) * N + n) * H + h) * C + c,
            "LBHNC": (((l * B + b) * H + h) * N + n) * C + c,
            "BLHNC": (((b * L + l) * H + h) * N + n) * C + c,
            "BLNHC": (((b * L + l) * N + n) * H + h) * C + c}[layout]


@pytest.mark.parametrize("layout", PACKED)
@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_each_layer_is_a_strided_view_into_its_groups_one_buffer(layout, mla):
    heads, head, bs, nb, names = 2, 4, 8, 5, ["l0", "l1", "l2"]
    spec = (MLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=head, dtype=torch.float16)
            if mla else FullAttentionSpec(block_size=bs, num_kv_heads=heads, head_size=head,
                                          dtype=torch.float16))
    caches, tensor, raw = packed_kv_caches(layout, spec, names, nb)
    H = 1 if mla else heads
    C = (1 if mla else 2) * head  # elements
    dims = (len(names), nb, H, bs, C * 2)
    for view in caches.values():
        assert tuple(view.shape) == (nb, H, bs, C) and view.dtype == torch.float16
        assert view.storage().data_ptr() == raw.storage().data_ptr()  # one buffer
    assert tensor.size == raw.numel() == math.prod(dims)
    assert KVCacheLayout[layout].is_block_compact
    shape = f"mla_{layout}" if mla else layout
    for l, name in enumerate(names):
        for (b, h, n, plane) in [(0, 0, 0, 0), (3, H - 1, 5, 0), (4, 0, 7, 1 - mla)]:
            raw.zero_()
            caches[name][b, h, n, plane * head:(plane + 1) * head] = 1.0
            hits = raw.nonzero().flatten().tolist()
            start = _physical_offset(layout, l, b, h, n, plane * head * 2, dims)
            assert hits[0] // 2 * 2 == start and hits[-1] < start + head * 2
            raw.zero_()
            slot(caches[name], shape, plane, b, n).fill_(7)
            hits = raw.nonzero().flatten().tolist()
            assert len(hits) == H * head * 2  # one token of one plane of every head
            assert min(hits) == _physical_offset(layout, l, b, 0, n, plane * head * 2, dims)
