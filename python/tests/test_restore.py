"""Restores as requests: Store.lookup, Store.restore and its handle (wait, wait_layer, done,
cancel, result), scheduled by the store's FC-MAS."""

import threading
import time

import pytest
import torch

import flatcake

LAYOUT = flatcake.KvLayout(num_layers=8, num_planes=2, slice_bytes=32 << 10)  # 512 KiB blocks


def open_store(ssd_dir, **extra):
    config = {"ssd_dirs": [ssd_dir], "ssd_bytes": "256MiB", "ssd_file_bytes": "64MiB",
              "dram_bytes": "64MiB"}
    config.update(extra)
    return flatcake.open(config)


def content(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, LAYOUT.block_bytes), dtype=torch.uint8, generator=g)


def put(store, prefix, n, medium, seed):
    keys = [f"{prefix}-{i}" for i in range(n)]
    data = content(n, seed)
    r = store.put(keys, LAYOUT, data, session=prefix, force_medium=medium)
    assert r.written == n
    return keys, data


def test_lookup_reports_leading_hits_slowest_medium_and_bytes(ssd_dir):
    with open_store(ssd_dir) as store:
        dram, _ = put(store, "d", 2, "dram", 1)
        ssd, _ = put(store, "s", 3, "ssd", 2)
        r = store.lookup(dram + ssd + ["missing"] + dram)
        assert r.leading_hits == 5
        assert r.slowest_medium == "ssd"
        assert r.dram_bytes == 2 * LAYOUT.block_bytes
        assert r.ssd_bytes == 3 * LAYOUT.block_bytes
        only_dram = store.lookup(dram)
        assert (only_dram.leading_hits, only_dram.slowest_medium) == (2, "dram")
        assert store.lookup(["nope"]).leading_hits == 0


def test_two_threads_restore_and_read_layers_in_order(ssd_dir):
    """Two threads submit restores concurrently and consume them layer by layer."""
    with open_store(ssd_dir) as store:
        sessions = [put(store, f"sess{i}", 6, "ssd" if i % 2 == 0 else "dram", 10 + i)
                    for i in range(4)]
        errors = []
        layers_seen = {0: [], 1: []}

        def client(t):
            try:
                for rep in range(6):
                    keys, want = sessions[(t + rep) % len(sessions)]
                    out = torch.zeros_like(want)
                    h = store.restore(keys, LAYOUT, out, arrival_ns=time.monotonic_ns())
                    for layer in range(LAYOUT.num_layers):
                        h.wait_layer(layer)
                        # The layer's slices of every block are in place once it is reported.
                        lo, hi = layer * 2 * (32 << 10), (layer + 1) * 2 * (32 << 10)
                        assert torch.equal(out[:, lo:hi], want[:, lo:hi]), (t, rep, layer)
                        layers_seen[t].append(layer)
                    assert h.wait(timeout=30)
                    assert h.done()
                    r = h.result
                    assert r.hits == len(keys) and all(r.found)
                    assert torch.equal(out, want)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=client, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert not errors, errors
        for t in range(2):
            assert layers_seen[t] == list(range(LAYOUT.num_layers)) * 6
        stats = store.stats()
        assert stats["restores_dram_ready"] >= 1 and stats["restores_ssd"] >= 1


def test_wait_with_timeout_cancel_and_result_errors(ssd_dir):
    # A window of one block: the second SSD restore waits for the first one's reads.
    with open_store(ssd_dir, read_window_bytes=LAYOUT.block_bytes) as store:
        keys, want = put(store, "big", 64, "ssd", 3)
        out = torch.zeros_like(want)
        h = store.restore(keys, LAYOUT, out)
        assert h.wait(timeout=60)
        assert h.result.hits == 64
        assert torch.equal(out, want)
        # Cancel a fresh one: it ends Aborted (or, had it already finished, with all its hits).
        h2 = store.restore(keys, LAYOUT, torch.zeros_like(want))
        h2.cancel()
        assert h2.wait(timeout=60)
        try:
            assert h2.result.hits == 64
        except flatcake.Error as e:
            assert e.code == "Aborted"
        with pytest.raises(IndexError):
            h.wait_layer(LAYOUT.num_layers)
        with pytest.raises(ValueError):
            h.wait(timeout=-1)


def test_result_of_a_running_restore_raises_busy_and_close_finishes_it(ssd_dir):
    store = open_store(ssd_dir, read_window_bytes=LAYOUT.block_bytes)
    keys, want = put(store, "s", 128, "ssd", 4)
    out = torch.zeros_like(want)
    h = store.restore(keys, LAYOUT, out)
    if not h.done():
        with pytest.raises(flatcake.Error) as e:
            _ = h.result
        assert e.value.code == "Busy"
    store.close()  # cancels and waits for what is still running
    assert h.done()
    with pytest.raises(flatcake.Error):
        store.restore(keys, LAYOUT, out)


def test_bad_restore_arguments_raise(ssd_dir):
    with open_store(ssd_dir) as store:
        keys, want = put(store, "s", 2, "ssd", 5)
        with pytest.raises(ValueError):
            store.restore(keys, LAYOUT, torch.zeros(10, dtype=torch.uint8))
        with pytest.raises(ValueError):
            store.restore(keys, LAYOUT, torch.zeros_like(want), arrival_ns=-5)
        other = flatcake.KvLayout(num_layers=4, num_planes=2, slice_bytes=32 << 10)
        with pytest.raises(ValueError, match="stored as 8 layers"):
            store.restore(keys, other, torch.zeros(2, other.block_bytes, dtype=torch.uint8))


@pytest.mark.parametrize("policy", ["flat", "tiered"])
def test_either_policy_runs_through_the_same_interface(ssd_dir, policy):
    """The tiered baseline is a Store too: put, lookup, restore (its handle), stats."""
    with flatcake.open({"ssd_dirs": [ssd_dir], "ssd_bytes": "256MiB", "ssd_file_bytes": "64MiB",
                        "dram_bytes": "64MiB"}, policy=policy) as store:
        keys, want = put(store, "p", 4, None, 7)
        r = store.lookup(keys)
        assert r.leading_hits == 4
        assert r.dram_bytes + r.ssd_bytes == 4 * LAYOUT.block_bytes
        out = torch.zeros_like(want)
        h = store.restore(keys, LAYOUT, out)
        for layer in range(LAYOUT.num_layers):
            h.wait_layer(layer)
        assert h.wait(timeout=30) and h.done()
        assert h.result.hits == 4 and torch.equal(out, want)
        stats = store.stats()
        assert stats["hits"] == 4 and stats["restores_dram_ready"] + stats["restores_ssd"] == 1
    with pytest.raises(ValueError, match="unknown policy"):
        flatcake.open({"ssd_dirs": [ssd_dir]}, policy="lru")
