"""flatcake.vllm.FlatCakeConnector driven as vLLM drives a KV connector.

The engine is vllm_standin (vLLM 00f4240e's connector interface and the scheduler, executor and
worker paths around it; see vllm_standin/README.md) with the fake model of vllm_util.py, whose
attention checks every byte of every earlier position of every layer before it computes. The
round trips run over vLLM main's KV cache views (PACKED: one buffer per group, a strided 4D
view per layer, in the layouts LBNHC (vLLM's default), LBHNC, BLHNC, BLNHC; "mla_<layout>") and
the per-layer tensors of vLLM 003df296 and before (SHAPES).
"""

import dataclasses
import inspect

import pytest
import torch

import flatcake
import flatcake.vllm as fv
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorBase_V1, KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.request import RequestStatus
from isolated import run_without
from vllm_util import (PACKED, SHAPES, Engine, is_mla, no_store_outlives_its_test,  # noqa: F401
                       paged_cache, prompt, vllm_config)

DRAM = {"dram_bytes": "64MiB"}
BS = 16
NAMED_METHODS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                 "request_finished", "register_kv_caches", "start_load_kv", "wait_for_layer_load",
                 "save_kv_layer", "wait_for_save", "get_finished")
KV_FORMS = SHAPES + PACKED + ("mla_LBNHC", "mla_BLHNC")  # every form vLLM registers
needs_daemon = pytest.mark.skipif(not getattr(flatcake._core, "has_daemon_client", False),
                                  reason="built without the daemon")


class SpyStore:
    """Forwards to a store and records puts and the restores' per-layer waits."""

    def __init__(self, store, events):
        self._store, self.events, self.puts = store, events, []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def put(self, keys, layout, buffers, **hints):
        self.puts.append((list(keys), hints))
        return self._store.put(keys, layout, buffers, **hints)

    def restore(self, keys, layout, buffers, **kw):
        handle, events = self._store.restore(keys, layout, buffers, **kw), self.events

        class Handle:
            def __getattr__(self, name):
                return getattr(handle, name)

            def wait_layer(self, layer):
                handle.wait_layer(layer)
                events.append(("restored", layer))

        return Handle()


def spy(engine, rank=0):
    worker = engine.workers[rank]
    worker.connector._store = SpyStore(worker.connector._store, worker.events)
    return worker.connector._store


def test_the_connector_has_every_method_with_vllm_signatures():
    assert issubclass(fv.FlatCakeConnector, KVConnectorBase_V1)
    assert fv.KVConnectorBase_V1 is KVConnectorBase_V1  # the installed (stand-in) vLLM's
    for name in NAMED_METHODS:
        ours = inspect.signature(getattr(fv.FlatCakeConnector, name))
        theirs = inspect.signature(getattr(KVConnectorBase_V1, name))
        assert list(ours.parameters) == list(theirs.parameters), name
    assert list(inspect.signature(fv.FlatCakeConnector).parameters) == [
        "vllm_config", "role", "kv_cache_config"]
    assert fv.FlatCakeConnector.requires_piecewise_for_cudagraph({}) is True


def test_vllms_factory_builds_it_from_the_kv_transfer_config():
    config = vllm_config(DRAM)
    kv = KVCacheConfig(num_blocks=8)
    sched = KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv)
    worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv)
    assert isinstance(sched, fv.FlatCakeConnector) and sched.role == KVConnectorRole.SCHEDULER
    assert worker.role == KVConnectorRole.WORKER
    assert sched._store is worker._store  # one process, one embedded store
    worker.shutdown()
    sched.shutdown()
    assert sched._store.closed
    hma = dataclasses.replace(config, scheduler_config=dataclasses.replace(
        config.scheduler_config, disable_hybrid_kv_cache_manager=False))
    # SupportsHMA: the factory accepts it with the hybrid KV cache manager on.
    hybrid = KVConnectorFactory.create_connector(hma, KVConnectorRole.SCHEDULER, kv)
    assert supports_hma(hybrid)
    hybrid.shutdown()


def test_without_vllm_it_subclasses_its_own_interface():
    run_without("vllm_standin", """
        from types import SimpleNamespace as NS
        import torch
        import flatcake.vllm as fv
        from flatcake import _vllm_iface
        assert fv.KVConnectorBase_V1 is _vllm_iface.KVConnectorBase_V1, fv.KVConnectorBase_V1
        assert issubclass(fv.FlatCakeConnector, _vllm_iface.KVConnectorBase_V1)
        kv = NS(kv_role="kv_both", is_kv_producer=True,
                kv_connector_extra_config={"dram_bytes": "16MiB"})
        cfg = NS(kv_transfer_config=kv, cache_config=NS(block_size=16),
                 model_config=NS(model="m", use_mla=False),
                 parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1))
        c = fv.FlatCakeConnector(cfg, fv.KVConnectorRole.WORKER, None)
        c.register_kv_caches({f"model.layers.{i}.attn": torch.zeros(2, 4, 16, 1, 8)
                              for i in range(2)})
        assert (c._layout.num_layers, c._layout.num_planes) == (2, 2)
        req = NS(request_id="r", block_hashes=[b"x" * 32], num_tokens=20,
                 skip_reading_prefix_cache=False)
        assert c.get_num_new_matched_tokens(req, 0) == (0, False)
        c.shutdown()
        print("ok")
    """)


@pytest.mark.parametrize("staged", [False, True], ids=["in_place", "staged"])
@pytest.mark.parametrize("shape", KV_FORMS)
def test_a_request_saved_then_loaded_layer_by_layer(shape, staged):
    """Engine A computes a 4-layer request and saves it; engine B (same store, empty GPU cache)
    loads its prefix: each layer's restore has landed before that layer's attention runs, every
    byte of every layer matches, and B samples what A sampled. `staged` runs the CUDA path's
    host staging and copies (on CPU tensors: there is no GPU here)."""
    a = Engine(DRAM, shape=shape, staged=staged)
    p = prompt(100, seed=1)
    want = a.serve("a", p, max_tokens=20)
    assert a.mismatches == [] and a.workers[0].checked_slots > 0
    # 6 prompt blocks written by the prefill, 1 reply block at the end (119 tokens computed).
    assert a.workers[0].connector.counters["blocks_saved"] == 7
    b = Engine(DRAM, shape=shape, staged=staged)
    store = spy(b)
    b.add("b", p, max_tokens=20)
    b.step()  # the load step
    w = b.workers[0]
    assert b.scheduler.admissions == [("b", 0, 96)]  # (100 - 1) // 16 whole blocks from FlatCake
    layers = list(range(4))
    assert [w.layer_waits[i] for i in layers] == [f"model.layers.{i}.self_attn.attn"
                                                  for i in layers]
    assert w.events == [e for l in layers for e in (("restored", l), ("attention", l))]
    planes = 1 if is_mla(shape) else 2
    assert w.checked_slots == 96 * 4 * planes and w.mismatches == []
    assert b.run()["b"] == want and b.mismatches == []
    assert w.connector.counters["blocks_loaded"] == 6
    # The prompt's 6 blocks came from the store; nothing was written again but the reply's block.
    assert [len(k) for k, _ in store.puts] == [1] and w.connector.counters["blocks_saved"] == 0
    a.close()
    b.close()


@pytest.mark.parametrize("shape", ["mha", "LBNHC"])
def test_a_partial_prefix_hit_loads_only_the_blocks_beyond_the_local_hit(shape):
    a = Engine(DRAM, shape=shape)
    base = prompt(100, seed=2)
    a.serve("a", base, max_tokens=2)
    b = Engine(DRAM, shape=shape)
    # Shares 1 block with `base`: FlatCake supplies it; vLLM's own prefix cache then holds it.
    b.serve("q", base[:20] + prompt(40, seed=3), max_tokens=2)
    assert b.scheduler.admissions == [("q", 0, 16)]
    # Shares 3 blocks (and 2 tokens) with `base`: 1 block is local, 2 come from FlatCake.
    out = b.serve("r", base[:50] + prompt(50, seed=4), max_tokens=3)
    assert b.scheduler.admissions[-1] == ("r", 16, 32)
    assert b.mismatches == [] and b.workers[0].connector.counters["blocks_loaded"] == 1 + 2
    c = Engine({}, shape=shape)  # the same request, computed from scratch with its own store
    assert c.serve("r", base[:50] + prompt(50, seed=4), max_tokens=3) == out
    for e in (a, b, c):
        e.close()


@pytest.mark.parametrize("shape,v2", [("mha", False), ("LBNHC", False), ("LBNHC", True)],
                         ids=["mha", "LBNHC", "LBNHC_v2_runner"])
def test_a_preempted_request_resumes_from_flatcake(shape, v2):
    """Two requests fill the GPU cache; when the first needs a 7th block to decode, vLLM preempts
    the second and frees its blocks. Without a local prefix cache, the resumed request loads
    every full block it had computed from FlatCake instead of recomputing them: its 5 prompt
    blocks (saved by its prefill) and the 6th, which decoding filled (saved in the step that
    filled it): 96 of its 98 tokens, where saving reply blocks only at the end gave 80. (The V2
    model runner hands the resumed request to the workers as a new one.)"""
    e = Engine(DRAM, num_blocks=13, prefix_caching=False, shape=shape, v2=v2)  # 12 + null
    pa, pb = prompt(90, seed=5), prompt(90, seed=6)
    ra = e.add("a", pa, max_tokens=12)
    rb = e.add("b", pb, max_tokens=12)
    out = e.run()
    assert rb.num_preemptions == 1 and ra.num_preemptions == 0
    assert [x for x in e.scheduler.admissions if x[0] == "b"] == [("b", 0, 0), ("b", 0, 96)]
    assert e.mismatches == []
    ref = Engine({}, shape=shape)  # room for both: no preemption
    ref.add("a", pa, max_tokens=12)
    ref.add("b", pb, max_tokens=12)
    assert ref.run() == out
    assert e.scheduler.kv_cache_manager.num_free_blocks == 12  # every block returned
    e.close()
    ref.close()


@pytest.mark.parametrize("staged", [False, True], ids=["in_place", "staged"])
def test_reply_blocks_are_saved_as_they_fill_and_nothing_is_held_at_the_end(staged):
    e = Engine(DRAM, staged=staged)
    store = spy(e)
    turn1 = prompt(40, seed=7)
    req = e.add("s", turn1, max_tokens=30,
                kv_transfer_params={"flatcake_session": "conv-9", "flatcake_turn": 3})
    finished = []
    while not finished:
        e.step()
        finished = list(e.outputs)
    # Every full block was saved in the step that filled it: nothing is left to save, so vLLM
    # frees the request's blocks at once.
    assert req.num_computed_tokens == 69 and "s" not in e.scheduler.requests
    assert not e.scheduler.connector.has_pending_block_frees()
    free = 64 - 1  # all but vLLM's null block
    assert e.scheduler.kv_cache_manager.num_free_blocks == free
    puts = store.puts
    # Prompt blocks 0-1 at prefill; blocks 2 and 3 (tokens 32..63) as decoding filled them.
    assert [len(k) for k, _ in puts] == [2, 1, 1]
    (k0, h0), (k1, h1), (k2, h2) = puts
    assert h0["prefix_tail"] is None and h1["prefix_tail"] == k0[-1] and h2["prefix_tail"] == k1[0]
    assert (h1["context_tokens"], h2["context_tokens"]) == (32, 48)
    assert {h["session"] for _, h in puts} == {"conv-9"} and h2["turn"] == 3
    keys = k0 + k1 + k2
    assert e.workers[0].connector._store.lookup(keys).leading_hits == 4
    assert keys[0].startswith("org/test-model/") and keys[0].endswith("_tp0of1")
    # The next turn's prompt is this turn's prompt, reply and more: with vLLM's own cache gone,
    # FlatCake supplies the reply blocks too, byte for byte.
    e.scheduler.kv_cache_manager.evict_cached(req.block_hashes)
    e.serve("s2", turn1 + list(req.output_token_ids) + prompt(20, seed=17), max_tokens=2)
    assert e.scheduler.admissions[-1] == ("s2", 0, 64) and e.mismatches == []
    e.close()
    off = Engine(dict(DRAM, save_decode=False))
    spied = spy(off)
    r = off.add("s", prompt(40, seed=7), max_tokens=30)
    off.run()
    assert r.request_id == "s" and [len(k) for k, _ in spied.puts] == [2]
    assert spied.puts[0][1]["session"] == "s"  # the request id, when vLLM names no session
    off.close()


@pytest.mark.parametrize("staged", [False, True], ids=["in_place", "staged"])
def test_a_finish_save_and_a_prompt_save_in_one_step_keep_their_bytes(staged):
    """vLLM 00f4240e starts a step's transfers after the forward when the step loads nothing
    synchronously: request a's end-of-request save then runs after b's prompt blocks were
    copied out layer by layer in the same step; both must reach the store intact."""
    e = Engine(DRAM, staged=staged)
    e.add("a", prompt(40, seed=21), max_tokens=30)
    while "a" not in e.outputs:
        e.step()
    e.add("b", prompt(80, seed=22), max_tokens=2)
    so = e.step()  # b's prefill and a's finish save, no synchronous load
    assert [n.req_id for n in so.scheduled_new_reqs] == ["b"] and not so.has_sync_kv_loads
    e.run()
    f = Engine(DRAM)  # the same store: b's prompt comes back from it
    f.serve("b2", prompt(80, seed=22), max_tokens=2)
    assert f.scheduler.admissions == [("b2", 0, 64)] and f.mismatches == []
    e.close()
    f.close()


def test_kv_roles_producer_only_saves_consumer_only_loads():
    a = Engine(DRAM, role="kv_producer")
    p = prompt(64, seed=8)
    a.serve("a", p, max_tokens=2)
    a.scheduler.kv_cache_manager.evict_cached(a._reqs["a"].block_hashes)
    a.serve("a2", p, max_tokens=2)
    assert a.scheduler.admissions[-1] == ("a2", 0, 0)  # a producer never loads
    c = Engine(DRAM, role="kv_consumer")
    c.serve("c", p, max_tokens=2)
    assert c.scheduler.admissions == [("c", 0, 48)] and c.mismatches == []
    c.serve("d", prompt(64, seed=9), max_tokens=2)
    assert c.workers[0].connector.counters["blocks_saved"] == 0  # a consumer never saves
    a.close()
    c.close()


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_block_the_store_lost_is_reported_then_recomputed_or_failed(policy):
    """vLLM's kv_load_failure_policy decides: "recompute" computes the lost blocks again and
    the request samples what it would have; "fail" (vLLM's default) ends it with an error."""
    a = Engine(DRAM)
    p = prompt(100, seed=10)
    want = a.serve("a", p, max_tokens=5)
    b = Engine(DRAM, load_failure_policy=policy)
    req = b.add("b", p, max_tokens=5)
    so = b.scheduler.schedule()  # the lookup found 6 blocks...
    b.connector._store.clear()  # ...which are gone before the worker restores them
    out = b.aggregator.aggregate([w.execute_model(so) for w in b.workers])
    assert len(out.kv_connector_output.invalid_block_ids) == 6
    finished = b.scheduler.update_from_output(so, out)
    b.workers[0].mismatches.clear()  # that step's attention read the unrestored blocks
    assert b.workers[0].connector.counters["load_errors"] == 6
    if policy == "fail":
        assert finished == ["b"] and req.status == RequestStatus.FINISHED_ERROR
        b.run()
        assert req.output_token_ids == () and "b" not in b.scheduler.requests
        assert b.scheduler.kv_cache_manager.num_free_blocks == 64 - 1
    else:
        assert finished == [] and b.run()["b"] == want and b.mismatches == []
    a.close()
    b.close()


@needs_daemon
@pytest.mark.parametrize("shape", ["mha", "mla", "LBNHC", "mla_LBNHC"])
def test_two_ranks_through_the_daemon(daemon, shape):
    """TP 2: one scheduler, two workers, one daemon. MHA ranks keep their own heads under their
    own keys (a rank never receives the other's bytes); MLA ranks share one copy."""
    cfg = {"daemon": daemon}
    a = Engine(cfg, shape=shape, tp=2)
    p = prompt(80, seed=11)
    want = a.serve("a", p, max_tokens=3)
    assert a.mismatches == []
    w0, w1 = (w.connector for w in a.workers)
    assert (w0._suffix, w1._suffix) == (("", "") if is_mla(shape) else ("_tp0of2", "_tp1of2"))
    keys = a.connector._block_keys(a._reqs["a"], 4)  # namespace, hash, the group's format
    assert keys[0] == w0._namespace + a._reqs["a"].block_hashes[0].hex() + w0._group_suffix[0]
    layout = w0._layout
    blocks = []
    for w in (w0, w1):
        assert w._store.lookup([k + w._suffix for k in keys]).leading_hits == 4
        buf = torch.zeros(layout.block_bytes, dtype=torch.uint8)
        assert w._store.get([keys[0] + w._suffix], layout, buf).hits == 1
        blocks.append(buf)
    assert torch.equal(blocks[0], blocks[1]) == is_mla(shape)
    b = Engine(cfg, shape=shape, tp=2)
    assert b.serve("b", p, max_tokens=3) == want
    assert b.scheduler.admissions == [("b", 0, 64)] and b.mismatches == []
    assert all(w.connector.counters["blocks_loaded"] == 4 for w in b.workers)
    if not is_mla(shape):
        # Blocks that only rank 0 holds: the scheduler offers nothing, since rank 1 lacks them.
        q = prompt(80, seed=12)
        req = b.add("q", q, max_tokens=1)
        ks = [k + "_tp0of2" for k in b.connector._block_keys(req, 2)]
        w0._store.put(ks, layout, torch.zeros(2 * layout.block_bytes, dtype=torch.uint8))
        b.run()
        assert b.scheduler.admissions[-1] == ("q", 0, 0)
    a.close()
    b.close()


def test_bad_configuration_fails_at_startup_with_a_clear_error():
    kv = KVCacheConfig(num_blocks=8)

    def build(extra, role=KVConnectorRole.SCHEDULER, **kw):
        return fv.FlatCakeConnector(vllm_config(extra, **kw), role, kv)

    with pytest.raises(ValueError, match="dram_byte"):
        build({"dram_byte": "1GiB"})
    with pytest.raises(ValueError, match="kv_connector_extra_config"):
        build({"dram_bytes": "lots"})
    with pytest.raises(ValueError, match="belong to the daemon"):
        build({"daemon": "/run/fc.sock", "ssd_bytes": "1GiB"})
    with pytest.raises(ValueError, match="'tenant' needs 'daemon'"):
        build({"tenant": "x"})
    with pytest.raises(ValueError, match="force_medium"):
        build({"force_medium": "tape"})
    with pytest.raises(ValueError, match="save_decode"):
        build({"save_decode": "yes"})
    with pytest.raises(ValueError, match="async_load"):
        build({"async_load": "sometimes"})
    with pytest.raises(ValueError, match="daemon"):
        build(DRAM, tp=2)  # an embedded store cannot serve two worker processes
    with pytest.raises(ValueError, match="daemon"):
        build(DRAM, dp=2)
    worker = build(DRAM, role=KVConnectorRole.WORKER)
    with pytest.raises(ValueError, match="MHA layer"):
        worker.register_kv_caches({"model.layers.0.attn": torch.zeros(8, 16, 64)})
    with pytest.raises(ValueError, match="uniform"):
        worker.register_kv_caches({"model.layers.0.attn": paged_cache("mha", 8, 16, 2, 16),
                                   "model.layers.1.attn": paged_cache("mha", 8, 16, 4, 16)})
    with pytest.raises(ValueError, match="dense"):  # heads outside the block: not one range
        worker.register_kv_caches({"model.layers.0.attn": torch.zeros(16, 2, 2, 8, 16).permute(
            1, 2, 0, 3, 4)})
    worker.shutdown()
    mla = build(DRAM, role=KVConnectorRole.WORKER, mla=True)
    with pytest.raises(ValueError, match="MLA layer"):
        mla.register_kv_caches({"model.layers.0.attn": paged_cache("mha", 8, 16, 2, 16)})
    mla.shutdown()


# Every pair of KV cache forms (vllm_util's shapes): blocks written under one and read under
# another are served only where their bytes mean the same (the same order of heads and tokens in
# a block, K and V packed or not), and are a miss elsewhere: never scrambled KV.
_FORMS = ("LBNHC", "LBHNC", "BLNHC", "mha", "mha_hnd", "mla", "mla_LBNHC")
_SAME_BYTES = {("LBNHC", "BLNHC"), ("BLNHC", "LBNHC")}


@pytest.mark.parametrize("written", _FORMS)
def test_blocks_of_another_kv_layout_are_a_miss_never_scrambled(written):
    p = prompt(64, seed=61)
    for read in _FORMS:
        if is_mla(read) != is_mla(written):
            continue  # another model altogether
        a = Engine(DRAM, shape=written)
        a.serve("a", p, max_tokens=2)
        b = Engine(DRAM, shape=read)
        b.serve("b", p, max_tokens=2)
        hit = read == written or (written, read) in _SAME_BYTES
        assert b.scheduler.admissions == [("b", 0, 48 if hit else 0)], (written, read)
        assert a.mismatches == [] and b.mismatches == [], (written, read)
        a.close()
        b.close()


def test_another_model_or_tp_size_is_another_format_and_a_worker_against_its_config_fails(
        monkeypatch):
    p = prompt(64, seed=62)
    a = Engine(DRAM, shape="LBNHC")
    a.serve("a", p, max_tokens=2)
    b = Engine(dict(DRAM, namespace="org/test-model/"), shape="LBNHC", model="org/other")
    b.serve("b", p, max_tokens=2)  # the same namespace, another model: other keys
    assert b.scheduler.admissions == [("b", 0, 0)] and b.mismatches == []
    group = a.connector._groups[0]
    fmt = dict(model="m", mla=False, order="NH", packed=True, cache_dtype="auto")
    assert fv._group_format(group, tp_size=1, **fmt) != fv._group_format(group, tp_size=2, **fmt)
    mla = dict(fmt, mla=True)
    assert fv._group_format(group, tp_size=1, **mla) == fv._group_format(group, tp_size=2, **mla)
    a.close()
    b.close()
    # Workers whose tensors put heads before tokens under a configuration that says tokens lead.
    monkeypatch.setattr(fv, "_config_cell_order", lambda *args: "NH")
    for shape in ("LBHNC", "mha_hnd"):
        with pytest.raises(ValueError, match="heads before tokens"):
            Engine(DRAM, shape=shape)
