"""The flatcake Python module: options, tensors and raw pointers, errors, GIL release."""

import threading

import pytest
import torch

import flatcake


def small_store(ssd_dir, **extra):
    config = {"ssd_dirs": [ssd_dir], "ssd_bytes": "64MiB", "ssd_file_bytes": "16MiB",
              "dram_bytes": "32MiB"}
    config.update(extra)
    return flatcake.open(config)


def random_bytes(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def test_options_cover_every_field_and_round_trip(ssd_dir):
    names = flatcake.option_names()
    for required in ("ssd_dirs", "ssd_bytes", "dram_bytes", "huge_pages", "direct_io",
                     "tau_tokens", "l_agent_tokens", "tokens_per_block", "high_watermark",
                     "low_watermark", "io_engine", "verify_checksums", "max_gap_bytes"):
        assert required in names
    assert set(flatcake.default_options()) == set(names)
    with small_store(ssd_dir, huge_pages="none", io_workers=1, verify_checksums=True) as store:
        opts = store.options()
        assert opts["ssd_bytes"] == 64 << 20
        assert opts["huge_pages"] == "none"
        assert opts["io_workers"] == 1
        assert opts["ssd_dirs"] == [ssd_dir]


def test_size_strings():
    assert flatcake.parse_size("64GiB") == 64 << 30
    assert flatcake.parse_size("512M") == 512 << 20
    assert flatcake.parse_size("1.5k") == 1536
    assert flatcake.parse_size("2GB") == 2 * 10**9
    assert flatcake.parse_size(4096) == 4096
    with pytest.raises(ValueError, match="cannot parse size"):
        flatcake.parse_size("12 parsecs", "ssd_bytes")
    with pytest.raises(TypeError):
        flatcake.parse_size(True)


@pytest.mark.parametrize("config, error, match", [
    ({"ssd_byte": 1}, ValueError, "unknown store option 'ssd_byte'"),
    ({"dram_bytes": -1}, ValueError, "must not be negative"),
    ({"huge_pages": "sometimes"}, ValueError, "huge_pages"),
    ({"io_workers": "two"}, TypeError, "io_workers"),
    ({"verify_checksums": "yes"}, TypeError, "verify_checksums"),
    ({"low_watermark": 0.99, "high_watermark": 0.5}, ValueError, "watermark"),
])
def test_bad_options_are_rejected_before_opening(config, error, match):
    with pytest.raises(error, match=match):
        flatcake.normalize_config(config)


def test_missing_ssd_dir_is_a_clear_error(tmp_path):
    with pytest.raises((flatcake.Error, ValueError), match="nowhere"):
        flatcake.open({"ssd_dirs": [str(tmp_path / "nowhere")], "ssd_bytes": "16MiB",
                       "ssd_file_bytes": "16MiB", "dram_bytes": "16MiB"})


@pytest.mark.parametrize("medium", ["dram", "ssd"])
def test_tensor_round_trip_and_write_once(ssd_dir, medium):
    layout = flatcake.KvLayout(num_layers=4, num_planes=2, slice_bytes=8192)
    keys = [f"blk-{i}" for i in range(5)]
    data = random_bytes(5 * layout.block_bytes, seed=1)
    with small_store(ssd_dir) as store:
        r = store.put(keys, layout, data, force_medium=medium)
        assert (r.written, r.already_present, r.medium) == (5, 0, medium)
        assert store.exists(keys + ["absent"]) == 5
        assert store.exists(["absent"] + keys) == 0

        # Write-once: a second put of the same keys with other bytes changes nothing.
        r2 = store.put(keys, layout, random_bytes(5 * layout.block_bytes, seed=2))
        assert (r2.written, r2.already_present) == (0, 5)

        out = torch.zeros_like(data)
        got = store.get(keys, layout, out)
        assert got.found == [True] * 5 and got.leading_hits == 5
        assert torch.equal(out, data)
        stats = store.stats()
        assert stats["blocks_skipped_present"] >= 5
        assert stats[medium]["blocks_live"] == 5


def test_raw_pointers_and_partial_hits(ssd_dir):
    layout = flatcake.KvLayout(num_layers=3, num_planes=1, slice_bytes=4096)
    data = random_bytes(4 * layout.block_bytes, seed=3)
    with small_store(ssd_dir) as store:
        ptrs = [data.data_ptr() + i * layout.block_bytes for i in range(2)]
        store.put(["p0", "p1"], layout, ptrs, kind="block_contiguous")
        out = torch.full((4 * layout.block_bytes,), 7, dtype=torch.uint8)
        optrs = [out.data_ptr() + i * layout.block_bytes for i in range(4)]
        got = store.get(["p0", "p1", "p2", "p3"], layout, optrs, kind="block_contiguous")
        assert got.found == [True, True, False, False]
        assert got.leading_hits == 2 and got.hits == 2
        assert torch.equal(out[: 2 * layout.block_bytes], data[: 2 * layout.block_bytes])
        assert bool((out[2 * layout.block_bytes:] == 7).all())  # misses leave memory untouched


def test_per_slice_tensors_round_trip(ssd_dir):
    layout = flatcake.KvLayout(num_layers=2, num_planes=2, slice_bytes=1024)
    slices = [random_bytes(1024, seed=10 + i) for i in range(3 * 4)]
    with small_store(ssd_dir) as store:
        store.put(["a", "b", "c"], layout, slices)  # kind inferred: slice_pointers
        out = [torch.zeros(1024, dtype=torch.uint8) for _ in slices]
        assert store.get(["a", "b", "c"], layout, out, kind="slice_pointers").hits == 3
        assert all(torch.equal(x, y) for x, y in zip(out, slices))
        # The same blocks read back whole, in [layer][plane] order.
        whole = torch.zeros(3 * layout.block_bytes, dtype=torch.uint8)
        store.get(["a", "b", "c"], layout, whole)
        assert torch.equal(whole, torch.cat(slices))


def test_bad_buffers_raise(ssd_dir):
    layout = flatcake.KvLayout(num_layers=2, num_planes=2, slice_bytes=1024)
    with small_store(ssd_dir) as store:
        with pytest.raises(ValueError, match="need"):
            store.put(["a"], layout, torch.zeros(100, dtype=torch.uint8))
        with pytest.raises(ValueError, match="contiguous"):
            store.put(["a"], layout, torch.zeros(2 * layout.block_bytes, dtype=torch.uint8)[::2])
        with pytest.raises(ValueError, match="pointer"):
            store.put(["a"], layout, [0], kind="block_contiguous")  # null address
        with pytest.raises(ValueError, match="unknown buffer"):
            store.put(["a"], layout, [1], kind="zigzag")
        with pytest.raises(ValueError, match="zero dimension"):
            store.put(["a"], flatcake.KvLayout(0, 2, 1024), torch.zeros(1, dtype=torch.uint8))
        with pytest.raises(TypeError, match="key 1"):
            store.exists(["ok", 5])
        # A stored block read with another layout is an error, not garbage.
        store.put(["a"], layout, torch.zeros(layout.block_bytes, dtype=torch.uint8))
        other = flatcake.KvLayout(num_layers=4, num_planes=1, slice_bytes=1024)
        with pytest.raises(ValueError):
            store.get(["a"], other, torch.zeros(other.block_bytes, dtype=torch.uint8))
        assert store.exists(["a"]) == 1  # the store stays usable


def test_closed_store_raises(ssd_dir):
    store = small_store(ssd_dir)
    store.close()
    assert store.closed
    with pytest.raises(flatcake.Error) as info:
        store.exists(["a"])
    assert info.value.code == "Aborted"


def test_gil_is_released_during_io(ssd_dir):
    """While one thread is inside a large get, another Python thread keeps running."""
    layout = flatcake.KvLayout(num_layers=8, num_planes=2, slice_bytes=256 << 10)  # 4 MiB blocks
    n = 12
    data = random_bytes(n * layout.block_bytes, seed=4)
    keys = [f"g{i}" for i in range(n)]
    with small_store(ssd_dir, ssd_bytes="128MiB", ssd_file_bytes="64MiB") as store:
        store.put(keys, layout, data, force_medium="ssd")
        out = torch.zeros_like(data)
        inside = threading.Event()
        done = threading.Event()
        ticks = 0

        def reader():
            for _ in range(5):
                inside.set()
                store.get(keys, layout, out)
            done.set()

        t = threading.Thread(target=reader)
        t.start()
        inside.wait()
        while not done.is_set():
            ticks += 1
        t.join()
        assert torch.equal(out, data)
        # With the GIL held for the whole call this loop could barely run.
        assert ticks > 1000, ticks


def test_a_directory_serves_one_store_at_a_time(ssd_dir):
    with small_store(ssd_dir):
        with pytest.raises(flatcake.Error, match="lock|use"):
            small_store(ssd_dir, io_workers=1)
    small_store(ssd_dir).close()  # free again once the first store closed


def test_a_reopened_store_recovers_its_ssd_blocks(tmp_path):
    """flatcake.open recovers the SSD pool by default; recover=False starts empty."""
    import torch
    cfg = {"ssd_dirs": [str(tmp_path)], "ssd_bytes": "64MiB", "ssd_file_bytes": "16MiB",
           "dram_bytes": "16MiB"}
    layout = flatcake.KvLayout(4, 2, 8192)
    data = torch.arange(6 * layout.block_bytes, dtype=torch.int64).to(torch.uint8)
    keys = [f"block-{i}" for i in range(6)]
    with flatcake.open(cfg) as s:
        s.put(keys, layout, data, force_medium="ssd")
    with flatcake.open(cfg) as s:
        info = s.info()
        assert info["recovered"] and info["recovered_blocks"] == 6
        out = torch.zeros_like(data)
        assert all(s.get(keys, layout, out).found)
        assert torch.equal(out, data)
    with flatcake.open(dict(cfg, recover=False)) as s:
        assert s.exists(keys) == 0
