"""flatcake.vllm through the store's GPU path (docs/gpu.md) on the fake device: CPU tensors stand
in for device memory, and the connector runs the code it runs on CUDA KV caches: restores
straight into vLLM's paged KV tensors at the metadata's block ids (GpuPath.restore, one event per
layer, wait_for_layer_load waiting on layer l's), saves gathered from them (GpuPath.put). The
fake model of vllm_util.py checks every byte of every earlier position of every layer before it
computes, so a layer read before its restore landed is a mismatch."""

import logging

import pytest

from vllm_util import Engine, no_store_outlives_its_test, prompt  # noqa: F401

GPU = {"dram_bytes": "64MiB", "gpu_path": "fake"}


def gpu_stats(engine):
    return engine.workers[0].connector._gpu.stats()


@pytest.mark.parametrize("shape", ["LBNHC", "BLHNC", "mha", "mha_hnd", "mla_LBNHC"])
def test_loads_and_saves_go_through_the_gpu_path(shape, caplog):
    with caplog.at_level(logging.INFO, logger="flatcake.vllm"):
        a = Engine(GPU, shape=shape)
    assert any("GPU path (the fake device" in r.getMessage() for r in caplog.records)
    p = prompt(80, seed=51)
    out_a = a.serve("a", p, max_tokens=3)
    assert gpu_stats(a)["puts"] >= 1  # the prompt's blocks, gathered from the paged tensors
    b = Engine(GPU, shape=shape)  # the same store, another engine: the prefix comes back
    out_b = b.serve("b", p, max_tokens=3)
    assert b.scheduler.admissions == [("b", 0, 64)]
    assert out_b == out_a and a.mismatches == [] and b.mismatches == []
    stats = gpu_stats(b)
    assert stats["restores"] == 1 and stats["chunks"] >= b.workers[0].connector._layout.num_layers
    assert b.workers[0].connector.counters["blocks_loaded"] == 4
    a.close()
    b.close()


def test_an_asynchronous_ssd_load_through_the_gpu_path(ssd_dir):
    cfg = dict(GPU, ssd_dirs=[ssd_dir], ssd_bytes="256MiB", ssd_file_bytes="16MiB")
    p = prompt(96, seed=52)
    writer = Engine(dict(cfg, force_medium="ssd"))
    writer.serve("w", p, max_tokens=2)
    e = Engine(cfg)
    e.serve("x", p, max_tokens=3)
    assert e.scheduler.admissions[0] == ("x", 0, 80) and e.mismatches == []
    assert gpu_stats(e)["ssd_bytes"] > 0 and gpu_stats(e)["restores"] == 1
    writer.close()
    e.close()


def test_gpu_path_none_keeps_cpu_tensors_in_place_and_bad_values_fail():
    e = Engine(dict(GPU, gpu_path="none"))
    e.serve("r", prompt(40, seed=53), max_tokens=2)
    assert e.workers[0].connector._gpu is None and e.mismatches == []
    e.close()
    with pytest.raises(ValueError, match="gpu_path"):
        Engine(dict(GPU, gpu_path="warp"))


def test_the_daemons_client_loads_and_saves_through_the_gpu_path(daemon, caplog):
    """Through the daemon, the GPU path runs in the engine's process on its own mapping of the
    daemon's arena and its own reads of the pool files (RemoteStore's read leases): DRAM hits
    and an asynchronous SSD load land in the paged tensors, and saves go through the daemon."""
    p = prompt(64, seed=54)
    with caplog.at_level(logging.INFO, logger="flatcake.vllm"):
        a = Engine({"daemon": daemon, "gpu_path": "fake", "force_medium": "dram"}, tp=2)
    assert any("GPU path (the fake device" in r.getMessage() for r in caplog.records)
    a.serve("a", p, max_tokens=2)
    assert all(w.connector._gpu.stats()["puts"] >= 1 for w in a.workers)
    b = Engine({"daemon": daemon, "gpu_path": "fake"}, tp=2)
    b.serve("b", p, max_tokens=2)
    assert b.scheduler.admissions == [("b", 0, 48)] and b.mismatches == []
    assert all(w.connector._gpu.stats()["restores"] == 1 for w in b.workers)
    assert all(w.connector._gpu.stats()["dram_bytes"] > 0 for w in b.workers)
    # Written to SSD by one engine, loaded asynchronously by another through the GPU path.
    q = prompt(96, seed=55)
    w = Engine({"daemon": daemon, "gpu_path": "fake", "force_medium": "ssd"}, tp=2)
    w.serve("w", q, max_tokens=2)
    c = Engine({"daemon": daemon, "gpu_path": "fake"}, tp=2)
    c.serve("c", q, max_tokens=3)
    assert c.scheduler.admissions[0] == ("c", 0, 80) and c.mismatches == []
    assert all(x.connector._gpu.stats()["ssd_bytes"] > 0 for x in c.workers)
    for e in (a, b, w, c):
        e.close()
