"""flatcake.vllm under vLLM's hybrid KV cache manager (SupportsHMA): a model whose even layers
attend to every earlier token and whose odd layers to the last 32 (a sliding-window KV cache
group), as vLLM main at 00f4240e (the stand-in) drives it with block ids per group."""

import dataclasses

import pytest
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec

import flatcake.vllm as fv
from vllm_util import (Engine, ModelShape, attention_spec, no_store_outlives_its_test,  # noqa: F401
                       prompt, vllm_config)

DRAM = {"dram_bytes": "64MiB"}
WINDOW = 32


def hybrid(swa_block_size=None, **kw):
    shape = ModelShape(sliding_window=WINDOW, swa_block_size=swa_block_size)
    kw.setdefault("load_failure_policy", "recompute")
    return Engine(DRAM, hma=True, model_shape=shape, **kw)


def stored_events(engine):
    return [ev for batch in engine.scheduler.kv_event_batches for ev in batch.events
            if type(ev).__name__ == "BlockStored"]


def leading(engine, keys):
    worker = engine.workers[0].connector
    return worker._store.lookup([k + worker._suffix for k in keys]).leading_hits


def test_it_supports_the_hybrid_manager():
    assert supports_hma(fv.FlatCakeConnector)
    e = hybrid()
    assert supports_hma(e.connector) and len(e.workers[0].connector._caches) == 2
    e.close()


@pytest.mark.parametrize("staged", [False, True], ids=["in_place", "staged"])
@pytest.mark.parametrize("swa_block_size", [None, 32], ids=["equal_blocks", "swa_32"])
def test_a_hybrid_model_round_trips_through_the_store(swa_block_size, staged):
    """Engine A computes and saves both groups' blocks (keys "_g0", "_g1"); engine B, same
    store, loads the prefix into the hybrid manager's block layout: every full-attention block,
    and of the sliding-window group only the blocks of the window the next token reads (vLLM
    gives the others the null block). The fake model checks every byte each layer reads.
    `staged`: the CUDA path's host staging, on CPU tensors."""
    a = hybrid(swa_block_size, staged=staged)
    p = prompt(100, seed=21)
    want = a.serve("a", p, max_tokens=20)
    assert a.mismatches == [] and a.workers[0].checked_slots > 0
    conn, req = a.connector, a._reqs["a"]
    swa_bs = swa_block_size or 16
    full_keys = conn._block_keys(req, 119 // 16, 0)
    swa_keys = conn._block_keys(req, 119 // swa_bs, 1)
    assert all(k.endswith("_g0") for k in full_keys) and all(k.endswith("_g1") for k in swa_keys)
    # Every block was saved as it filled (prompt and reply), in both groups.
    assert leading(a, full_keys) == len(full_keys) and leading(a, swa_keys) == len(swa_keys)
    events = stored_events(a)
    assert {ev.group_idx for ev in events} == {0, 1}
    assert all(ev.block_size == (16 if ev.group_idx == 0 else swa_bs) for ev in events)
    assert [h for ev in events if ev.group_idx == 0 for h in ev.block_hashes] == \
        list(req.block_hashes[:len(full_keys)])

    b = hybrid(swa_block_size, staged=staged)
    assert b.serve("b", p, max_tokens=20) == want
    assert b.scheduler.admissions == [("b", 0, 96)]  # (100 - 1) // 16 (or 32) whole blocks
    assert b.mismatches == [] and b.workers[0].checked_slots > 0
    window_blocks = 96 // swa_bs - (96 - WINDOW + 1) // swa_bs
    assert b.workers[0].connector.counters["blocks_loaded"] == 96 // 16 + window_blocks
    assert b.workers[0].connector.counters["load_errors"] == 0
    a.close()
    b.close()


def test_a_sliding_window_group_needs_only_its_window():
    """The lookup rule: a hit of n tokens needs every full-attention block before n, but of the
    sliding-window group only those its window reads at n; a block the window needs that the
    store lacks shortens the hit to before it."""
    a = hybrid()
    p = prompt(100, seed=22)
    a.serve("a", p, max_tokens=2)
    req = a._reqs["a"]
    conn = a.connector
    assert conn._hit_tokens(req, 96) == (96, False)
    # Block 1 of the sliding group is out of the window at 96 tokens: a store without it is
    # still a hit of 96 (a fresh store holding all but that block).
    real = conn._leading_hits
    gone = conn._block_keys(req, 2, 1)[1]

    def without(keys):
        if gone in keys:
            keys = keys[:keys.index(gone)]
        return real(keys)

    conn._leading_hits = without
    assert conn._hit_tokens(req, 96)[0] == 96
    # A block inside the window (block 5 at 96 tokens) missing: the hit ends before it.
    gone = conn._block_keys(req, 6, 1)[5]
    assert conn._hit_tokens(req, 96)[0] == 80
    conn._leading_hits = real
    a.close()


def test_a_preempted_request_resumes_from_flatcake():
    """21 blocks for both groups of two requests (a prefill takes 6 of each group): when the
    first needs more blocks to decode, vLLM preempts the second, which resumes by loading the
    80 tokens whose blocks it had saved (both groups) instead of recomputing them."""
    e = hybrid(num_blocks=21, prefix_caching=False)
    pa, pb = prompt(90, seed=5), prompt(90, seed=6)
    ra = e.add("a", pa, max_tokens=12)
    rb = e.add("b", pb, max_tokens=12)
    out = e.run()
    assert (ra.num_preemptions, rb.num_preemptions) == (0, 1)
    assert [x for x in e.scheduler.admissions if x[0] == "b"] == [("b", 0, 0), ("b", 0, 80)]
    assert e.mismatches == []
    ref = hybrid(num_blocks=64)
    ref.add("a", pa, max_tokens=12)
    ref.add("b", pb, max_tokens=12)
    assert ref.run() == out
    e.close()
    ref.close()


def test_a_lost_block_fails_the_load_as_a_request_and_is_recomputed():
    """With several groups vLLM takes a failed load only as a request (failed_recving), never
    as block ids; under "recompute" the request computes again and samples what it would
    have."""
    a = hybrid()
    p = prompt(100, seed=10)
    want = a.serve("a", p, max_tokens=5)
    b = hybrid()
    b.add("b", p, max_tokens=5)
    so = b.scheduler.schedule()  # the lookup found 6 blocks (every load is asynchronous)...
    assert b.scheduler.admissions == [("b", 0, 96)]
    b.connector._store.clear()  # ...which are gone before the worker restores them
    out = b.aggregator.aggregate([w.execute_model(so) for w in b.workers])
    kv = out.kv_connector_output
    failed = set(kv.failed_recving or ())
    for _ in range(5):  # an asynchronous load is reported once it is done
        if failed:
            break
        b.scheduler.update_from_output(so, out)
        so = b.scheduler.schedule()
        out = b.aggregator.aggregate([w.execute_model(so) for w in b.workers])
        kv = out.kv_connector_output
        failed = set(kv.failed_recving or ())
    assert failed == {"b"} and not kv.invalid_block_ids
    b.scheduler.update_from_output(so, out)
    assert b.workers[0].connector.counters["load_errors"] > 0
    assert b.run()["b"] == want and b.mismatches == []
    a.close()
    b.close()


def test_a_group_flatcake_cannot_serve_is_refused_at_start():
    @dataclasses.dataclass(frozen=True)
    class MambaSpec:
        block_size: int = 16

    full = attention_spec("mha", 16, 2, 16)
    kv = KVCacheConfig(num_blocks=8, kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"], full),
        KVCacheGroupSpec(["model.layers.1.mixer"], MambaSpec())])
    config = vllm_config(DRAM, hma=True)
    with pytest.raises(ValueError, match=r"group 1 \(MambaSpec, layers model.layers.1.mixer\)"):
        KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv)


def test_one_group_keeps_its_keys():
    """Without a second group the keys are namespace, hash, the group's format (no "_g<i>"),
    worker suffix."""
    e = Engine(DRAM)
    e.serve("r", prompt(40, seed=3), max_tokens=2)
    req = e._reqs["r"]
    keys = e.connector._block_keys(req, 2)
    fmt = e.connector._group_suffix[0]
    assert len(fmt) == 9 and fmt.startswith("@")
    assert keys == ["org/test-model/" + h.hex() + fmt for h in req.block_hashes[:2]]
    assert leading(e, keys) == 2 and e.workers[0].connector._suffix == "_tp0of1"
    e.close()
