"""flatcake.vllm's asynchronous loads, its answers to vLLM's block-freeing and delivery questions,
and what it does when a save fails, driven through vllm_standin (vLLM 00f4240e's scheduler and
worker paths: a request whose load is asynchronous waits in WAITING_FOR_REMOTE_KVS, runs no
forward, and is scheduled once every worker reported it in finished_recving)."""

import logging

import pytest

import flatcake
import flatcake.vllm as fv
from vllm.v1.request import RequestStatus
from vllm_util import Engine, no_store_outlives_its_test, prompt  # noqa: F401

BS = 16


def written(cfg, medium, tokens, **engine):
    """An engine that wrote the blocks of ``tokens`` to ``medium`` of the store ``cfg`` opens
    (one store per configuration in this process); close it after."""
    writer = Engine(dict(cfg, force_medium=medium), **engine)
    writer.serve("writer", tokens, max_tokens=2)
    return writer


def ssd_store(ssd_dir):
    return {"dram_bytes": "64MiB", "ssd_dirs": [ssd_dir], "ssd_bytes": "256MiB",
            "ssd_file_bytes": "16MiB"}


@pytest.mark.parametrize("shape", ["LBNHC", "mha"])
def test_an_ssd_hit_loads_asynchronously_while_another_request_runs(ssd_dir, shape):
    cfg = ssd_store(ssd_dir)
    p = prompt(80, seed=31)
    writer = written(cfg, "ssd", p, shape=shape)  # its 5 full blocks on SSD
    e = Engine(cfg, shape=shape)  # the same store
    e.add("other", prompt(40, seed=32), max_tokens=8)
    e.step()  # "other" prefills
    req = e.add("x", p, max_tokens=3)
    so = e.step()  # x admitted: its load starts after the forward, x itself is not scheduled
    assert e.scheduler.admissions[-1] == ("x", 0, 64)
    assert "x" not in so.num_scheduled_tokens and "other" in so.num_scheduled_tokens
    assert all("x" not in f for w in e.workers for f in w.forwards)
    waited = 0
    while req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
        assert "other" in e.step().num_scheduled_tokens or "other" in e.outputs
        waited += 1
        assert waited < 50, "the asynchronous load never finished"
    out = e.run()
    assert e.mismatches == [] and e.workers[0].checked_slots > 0
    ref = Engine({}, shape=shape)
    assert ref.serve("x", p, max_tokens=3) == out["x"]
    c = e.workers[0].connector.counters
    assert c["blocks_loaded"] == 4 and c["load_errors"] == 0
    for eng in (writer, e, ref):
        eng.close()


def test_a_dram_hit_loads_in_the_step_layer_by_layer(ssd_dir):
    cfg = ssd_store(ssd_dir)
    p = prompt(80, seed=33)
    writer = written(cfg, "dram", p)
    e = Engine(cfg)
    req = e.add("x", p, max_tokens=3)
    so = e.step()  # a synchronous load: x runs in the step that loads it
    assert so.has_sync_kv_loads and so.num_scheduled_tokens == {"x": 16}
    assert req.status == RequestStatus.RUNNING and e.scheduler.admissions == [("x", 0, 64)]
    e.run()
    assert e.mismatches == []
    writer.close()
    e.close()


def test_async_load_always_and_never(ssd_dir):
    cfg = ssd_store(ssd_dir)
    p = prompt(64, seed=34)
    writer = written(cfg, "dram", p)
    always = Engine(dict(cfg, async_load="always"))  # even a DRAM hit waits for its load
    req = always.add("x", p, max_tokens=2)
    so = always.step()
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and so.num_scheduled_tokens == {}
    always.run()
    assert always.mismatches == [] and always.scheduler.admissions[0] == ("x", 0, 48)
    writer.close()
    always.close()
    writer = Engine(dict(cfg, force_medium="ssd"))
    writer.serve("w2", prompt(64, seed=35), max_tokens=2)
    never = Engine(dict(cfg, async_load="never"))  # even an SSD hit loads in the step
    so = never.add("y", prompt(64, seed=35), max_tokens=2) and never.step()
    assert so.has_sync_kv_loads and so.num_scheduled_tokens == {"y": 16}
    never.run()
    assert never.mismatches == []
    writer.close()
    never.close()


def test_two_ranks_report_an_asynchronous_load_each_through_the_daemon(daemon):
    p = prompt(96, seed=36)
    writer = Engine({"daemon": daemon, "force_medium": "ssd"}, tp=2)
    writer.serve("w", p, max_tokens=2)
    e = Engine({"daemon": daemon}, tp=2)
    req = e.add("x", p, max_tokens=3)
    e.step()
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    out = e.run()
    assert e.scheduler.admissions[0] == ("x", 0, 80) and e.mismatches == []
    assert [w.connector.counters["blocks_loaded"] for w in e.workers] == [5, 5]
    ref = Engine({}, tp=1)
    assert ref.serve("x", p, max_tokens=3) == out["x"]
    for eng in (writer, e, ref):
        eng.close()


def test_requires_no_delivery_and_holds_blocks_only_for_a_pending_save():
    e = Engine({"dram_bytes": "64MiB"})
    conn = e.scheduler.connector
    assert conn.requires_kv_delivery is False and e.scheduler.requires_kv_delivery is False
    assert not conn.has_pending_block_frees()
    # A request that ends with a full block not saved yet (its last step filled it after the
    # plan) is held until the workers report the save.
    req = e.add("r", prompt(48, seed=37), max_tokens=2)
    e.step()
    state = conn._reqs["r"]
    state.stored_blocks = 1  # as if block 1 and 2's saves were still owed
    req.num_computed_tokens = 48
    held, _ = conn.request_finished(req, state.block_ids[0])
    assert held and conn.has_pending_block_frees()
    from vllm.v1.outputs import KVConnectorOutput
    conn.update_connector_output(KVConnectorOutput(finished_sending={"r"}))
    assert not conn.has_pending_block_frees()
    e.close()


def test_the_fail_policy_is_warned_about_at_start(caplog):
    with caplog.at_level(logging.WARNING, logger="flatcake.vllm"):
        e = Engine({"dram_bytes": "64MiB"}, load_failure_policy="fail")
    assert any("kv_load_failure_policy" in r.getMessage() for r in caplog.records)
    e.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flatcake.vllm"):
        e = Engine({"dram_bytes": "64MiB"}, load_failure_policy="recompute")
    assert not any("kv_load_failure_policy" in r.getMessage() for r in caplog.records)
    e.close()


def test_a_failed_save_writes_none_of_the_requests_later_blocks():
    e = Engine({"dram_bytes": "64MiB"})
    worker = e.workers[0].connector
    real = worker._store

    class FailingOnce:
        failed = False

        def __getattr__(self, name):
            return getattr(real, name)

        def put(self, keys, layout, buffers, **hints):
            if not FailingOnce.failed and hints.get("context_tokens") == 2 * BS:
                FailingOnce.failed = True  # the save of block 2 fails
                raise flatcake.Error("NoSpace: injected")
            return real.put(keys, layout, buffers, **hints)

    worker._store = FailingOnce()
    p = prompt(40, seed=38)
    e.serve("r", p, max_tokens=40)  # blocks 0-1 at prefill, then 2 and 3 as decoding fills them
    worker._store = real
    assert FailingOnce.failed
    c = worker.counters
    assert c["save_errors"] == 1 and c["saves_skipped"] == 1 and c["blocks_saved"] == 2
    # Nothing past the gap is in the store: the lookup's leading run is the two blocks before it.
    keys = [k + worker._suffix for k in worker_keys(e, "r", 4)]
    assert [real.exists([k]) for k in keys] == [1, 1, 0, 0]
    e.close()


def worker_keys(engine, req_id, n):
    """The store keys (without worker suffix) of the request's first n blocks."""
    return engine.scheduler.connector._block_keys(engine._reqs[req_id], n)


def test_the_packed_view_keys_one_plane_per_layer():
    e = Engine({"dram_bytes": "64MiB"}, shape="LBNHC")
    e.serve("r", prompt(40, seed=39), max_tokens=2)
    layout = e.workers[0].connector._layout
    assert layout.num_planes == 1 and layout.slice_bytes == BS * 2 * 2 * 16 * 2  # heads 2, K|V
    assert e.mismatches == []
    e.close()


class FakeMetric:
    """A prometheus_client metric as vLLM's metric_types hand them over: labels() gives a child
    that counts or observes."""

    made: dict = {}

    def __init__(self, name, documentation, labelnames, buckets=None):
        self.name, self.labelnames, self.children = name, list(labelnames), {}
        FakeMetric.made[name] = self

    def labels(self, *values):
        assert len(values) == len(self.labelnames), (self.name, values)
        return self.children.setdefault(values, FakeChild())


class FakeChild:
    def __init__(self):
        self.total, self.observed = 0, []

    def inc(self, n):
        self.total += n

    def observe(self, v):
        self.observed.append(v)


def test_statistics_reach_vllms_logger_and_prometheus(ssd_dir):
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (Counter, Gauge, Histogram,
                                                                      KVConnectorLogging)
    cfg = ssd_store(ssd_dir)
    on_ssd, in_dram = prompt(80, seed=40), prompt(64, seed=41)
    writer = written(cfg, "ssd", on_ssd)
    writer.close()
    writer = written(cfg, "dram", in_dram)
    e = Engine(cfg)
    e.serve("x", on_ssd, max_tokens=2)  # 4 blocks from SSD, asynchronously
    e.serve("y", in_dram, max_tokens=2)  # 3 blocks from DRAM, in the step
    e.serve("z", prompt(40, seed=42), max_tokens=2)  # a miss: its 2 full blocks are saved
    steps = e.scheduler.kv_connector_stats  # per step, the merged to_dict() vLLM publishes
    assert steps and all(isinstance(d, dict) for d in steps)
    logging_ = KVConnectorLogging(type(e.scheduler.connector))
    for d in steps:
        logging_.observe(d)
    total = logging_.transfer_stats_accumulator.reduce()
    assert total["lookups"] == 3 and total["hit_blocks"] == 7
    assert total["loads_ssd"] == 1 and total["loads_dram"] == 1
    assert total["blocks_loaded"] == 7 and total["load_errors"] == 0
    layout = e.workers[0].connector._layout
    assert total["load_bytes_ssd"] > 0 and \
        total["load_bytes_ssd"] + total["load_bytes_dram"] == 7 * layout.block_bytes
    assert total["blocks_saved"] == 2 and total["save_errors"] == 0  # x's and y's were there
    logging_.log()
    assert logging_.lines and "loads_ssd=1" in logging_.lines[0]
    FakeMetric.made = {}
    prom = type(e.scheduler.connector).build_prom_metrics(
        e.scheduler.vllm_config, {Gauge: FakeMetric, Counter: FakeMetric, Histogram: FakeMetric},
        ["model_name", "engine"], {0: ["m", "0"]})
    for d in steps:
        prom.observe(d, 0)
    loaded = FakeMetric.made["vllm:flatcake_blocks_loaded"].children[("m", "0")]
    assert loaded.total == 7
    latency = FakeMetric.made["vllm:flatcake_load_seconds"].children
    assert len(latency[("m", "0", "ssd")].observed) == 1
    assert len(latency[("m", "0", "dram")].observed) == 1
    writer.close()
    e.close()


def stored_events(engine):
    return [ev for batch in engine.scheduler.kv_event_batches for ev in batch.events
            if type(ev).__name__ == "BlockStored"]


def test_every_block_stored_is_announced_once_with_vllms_hashes(ssd_dir):
    cfg = ssd_store(ssd_dir)
    e = Engine(dict(cfg, force_medium="ssd"))
    p = prompt(40, seed=43)
    req = e.add("r", p, max_tokens=30)
    e.run()
    ours = [ev for ev in stored_events(e) if ev.medium in ("CPU", "STORAGE")]
    # Blocks 0-1 at prefill, 2 and 3 as decoding filled them: one event per write.
    assert [len(ev.block_hashes) for ev in ours] == [2, 1, 1]
    assert all(ev.medium == "STORAGE" and ev.block_size == BS for ev in ours)
    hashes = [h for ev in ours for h in ev.block_hashes]
    assert hashes == list(req.block_hashes[:4])
    assert [ev.parent_block_hash for ev in ours] == [None, hashes[1], hashes[2]]
    tokens = [t for ev in ours for t in ev.token_ids]
    assert tokens == list(req.all_token_ids[:4 * BS])
    e.close()
    # Blocks already stored are written by nobody: no second announcement.
    again = Engine(cfg)
    again.serve("r2", p, max_tokens=2)
    assert [ev for ev in stored_events(again) if ev.medium in ("CPU", "STORAGE")] == []
    again.close()


def removed_events(engine):
    return [ev for batch in engine.scheduler.kv_event_batches for ev in batch.events
            if type(ev).__name__ == "BlockRemoved"]


def test_blocks_the_store_reclaims_are_announced_removed():
    e = Engine({"dram_bytes": "64MiB", "events_probe_s": 0})
    a = e.add("a", prompt(64, seed=44), max_tokens=2)
    e.run()
    stored = [h for ev in stored_events(e) if ev.medium == "CPU" for h in ev.block_hashes]
    assert len(stored) >= 3 and set(stored) <= set(a.block_hashes) and removed_events(e) == []
    # Nothing reclaimed yet: a step's probe finds every announced block.
    e.serve("b", prompt(20, seed=45), max_tokens=2)
    assert removed_events(e) == []
    before = sorted(h for ev in stored_events(e) for h in ev.block_hashes)  # a's and b's
    store = e.workers[0].connector._store
    assert store.reclaim("dram", 0.0) > 0
    e.serve("c", prompt(20, seed=46), max_tokens=2)
    removed = removed_events(e)
    assert all(ev.medium == "CPU" for ev in removed)
    assert sorted(h for ev in removed for h in ev.block_hashes) == before
    # Each block is taken back once.
    e.serve("d", prompt(20, seed=47), max_tokens=2)
    assert len(removed_events(e)) == len(removed)
    e.close()


def test_a_run_is_removed_from_its_first_missing_block_and_lookup_errors_remove_nothing():
    runs = fv._AnnouncedRuns(0.0)
    runs.add(fv.BlockStored(block_hashes=[1, 2, 3], parent_block_hash=None, token_ids=[],
                            block_size=16, lora_id=None, medium="STORAGE", lora_name=None))

    def out_of_reach(hashes, group):
        raise flatcake.Error("IOError: the daemon is restarting")

    assert runs.probe(out_of_reach) == []
    got = runs.probe(lambda hashes, group: 1)  # block 2 gone: 3 can never be a hit
    assert [(ev.block_hashes, ev.medium) for ev in got] == [([2, 3], "STORAGE")]
    assert [ev.block_hashes for ev in runs.probe(lambda hashes, group: 0)] == [[1]]
    assert runs.probe(lambda hashes, group: 0) == []  # nothing left announced
    with pytest.raises(ValueError, match="events_probe_s"):
        Engine({"dram_bytes": "64MiB", "events_probe_s": -1})


def test_two_ranks_announce_a_block_once_both_stored_it(daemon):
    e = Engine({"daemon": daemon, "force_medium": "dram"}, tp=2)
    req = e.add("r", prompt(48, seed=44), max_tokens=2)
    e.run()
    ours = [ev for ev in stored_events(e) if ev.medium in ("CPU", "STORAGE")]
    assert [list(ev.block_hashes) for ev in ours] == [list(req.block_hashes[:3])]
    assert ours[0].medium == "CPU"
    e.close()
