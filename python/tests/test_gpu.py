"""The GPU data path from Python (docs/gpu.md): Store.gpu, GpuPath.restore into per-layer K and V
buffers plus page indices, GpuPath.put from them, and the per-layer events. Runs on the fake
device (CPU tensors standing in for device memory) everywhere; the CUDA tests skip without a GPU."""

import pytest
import torch

import flatcake

LAYOUT = flatcake.KvLayout(num_layers=4, num_planes=2, slice_bytes=16 << 10)  # 128 KiB blocks
PAGES = 24


def open_store(ssd_dir):
    return flatcake.open({"ssd_dirs": [ssd_dir], "ssd_bytes": "64MiB", "ssd_file_bytes": "16MiB",
                          "dram_bytes": "32MiB"})


def blocks(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, LAYOUT.block_bytes), dtype=torch.uint8, generator=g)


def pool(device):
    """Per-layer K and V buffers: [PAGES, slice_bytes] bytes each."""
    def plane():
        return [torch.zeros(PAGES, LAYOUT.slice_bytes, dtype=torch.uint8, device=device)
                for _ in range(LAYOUT.num_layers)]
    return plane(), plane()


def page_of(k, v, layer, page):
    """Block content of one page, as stored: [layer][plane] slices, from the pool's buffers."""
    return torch.cat([k[layer][page].cpu(), v[layer][page].cpu()])


def expect_pages(k, v, data, pages):
    S = LAYOUT.slice_bytes
    for i, page in enumerate(pages):
        for layer in range(LAYOUT.num_layers):
            want = data[i][layer * 2 * S:(layer + 1) * 2 * S]
            assert torch.equal(page_of(k, v, layer, page), want), (i, layer)


def test_probe_names_a_mode_and_why():
    p = flatcake.gpu_probe()
    assert p["mode"] in ("gds", "cufile-compat", "bounce", "none")
    if p["mode"] == "none":
        assert p["reason"]
    assert flatcake.gpu_probe("fake")["mode"] == "fake"
    with pytest.raises(ValueError):
        flatcake.gpu_probe("warp")


def test_no_gpu_refuses_the_device_path(ssd_dir):
    if flatcake.gpu_probe()["mode"] != "none":
        pytest.skip("a GPU is present")
    with open_store(ssd_dir) as store:
        with pytest.raises(flatcake.Error) as e:
            store.gpu()
        assert e.value.code == "Unsupported"


def test_fake_device_restore_into_paged_buffers(ssd_dir):
    with open_store(ssd_dir) as store:
        dram = [f"d{i}" for i in range(5)]
        ssd = [f"s{i}" for i in range(6)]
        dram_data, ssd_data = blocks(5, 1), blocks(6, 2)
        assert store.put(dram, LAYOUT, dram_data, force_medium="dram").written == 5
        assert store.put(ssd, LAYOUT, ssd_data, force_medium="ssd").written == 6
        path = store.gpu("fake", slot_bytes=3 * 2 * LAYOUT.slice_bytes)
        assert path.info()["mode"] == "fake"
        k, v = pool("cpu")
        keys = ssd[:3] + dram + ssd[3:] + ["missing"]
        data = torch.cat([ssd_data[:3], dram_data, ssd_data[3:]])
        pages = [PAGES - 1 - i for i in range(len(keys))]
        h = path.restore(keys, LAYOUT, k, v, pages=torch.tensor(pages))
        h.wait_layer(0)
        assert h.layer_event(LAYOUT.num_layers - 1) != 0
        r = h.wait()
        assert r.hits == len(keys) - 1 and r.corrupt == 0
        assert list(r.found) == [True] * (len(keys) - 1) + [False]
        expect_pages(k, v, data, pages[:-1])
        assert path.stats()["chunks"] >= 2 * LAYOUT.num_layers
        assert store.stats()["hits"] >= len(keys) - 1


def test_fake_device_put_then_host_get(ssd_dir):
    with open_store(ssd_dir) as store:
        path = store.gpu("fake", slot_bytes=LAYOUT.block_bytes)  # two blocks per store put
        k, v = pool("cpu")
        keys = [f"p{i}" for i in range(7)]
        data = blocks(7, 3)
        pages = [2 * i + 1 for i in range(7)]
        S = LAYOUT.slice_bytes
        for i, page in enumerate(pages):
            for layer in range(LAYOUT.num_layers):
                k[layer][page] = data[i][(2 * layer) * S:(2 * layer + 1) * S]
                v[layer][page] = data[i][(2 * layer + 1) * S:(2 * layer + 2) * S]
        r = path.put(keys, LAYOUT, k, v, pages=pages, force_medium="ssd")
        assert r.written == 7
        out = torch.zeros_like(data)
        got = store.get(keys, LAYOUT, out)
        assert all(got.found)
        assert torch.equal(out, data)
        assert path.put(keys, LAYOUT, k, v, pages=pages).already_present == 7


def test_bad_buffers_are_refused(ssd_dir):
    with open_store(ssd_dir) as store:
        path = store.gpu("fake")
        k, v = pool("cpu")
        with pytest.raises(ValueError):
            path.restore(["a"], LAYOUT, k[:-1], v, pages=[0])
        with pytest.raises(ValueError):
            path.restore(["a"], LAYOUT, k, v, pages=[PAGES])
        with pytest.raises(ValueError):
            path.restore(["a", "b"], LAYOUT, k, v, pages=[0])


def test_store_close_closes_its_gpu_paths(ssd_dir):
    store = open_store(ssd_dir)
    path = store.gpu("fake")
    store.close()
    with pytest.raises(flatcake.Error):
        path.stats()


@pytest.mark.skipif(not torch.cuda.is_available() or flatcake.gpu_probe()["mode"] == "none",
                    reason="no GPU for the device path")
def test_cuda_restore_and_stream_wait(ssd_dir):
    with open_store(ssd_dir) as store:
        keys = [f"c{i}" for i in range(8)]
        data = blocks(8, 4)
        store.put(keys[:4], LAYOUT, data[:4], force_medium="dram")
        store.put(keys[4:], LAYOUT, data[4:], force_medium="ssd")
        path = store.gpu()
        k, v = pool("cuda")
        pages = [PAGES - 1 - i for i in range(8)]
        h = path.restore(keys, LAYOUT, k, v, pages=pages)
        compute = torch.cuda.Stream()
        h.stream_wait_layer(LAYOUT.num_layers - 1, compute)
        with torch.cuda.stream(compute):
            seen = k[LAYOUT.num_layers - 1][pages[0]].clone()
        compute.synchronize()
        S = LAYOUT.slice_bytes
        last = LAYOUT.num_layers - 1
        assert torch.equal(seen.cpu(), data[0][2 * last * S:(2 * last + 1) * S])
        assert h.wait().hits == 8
        expect_pages(k, v, data, pages)
        k2, v2 = pool("cuda")
        keys2 = [f"q{i}" for i in range(8)]
        for layer in range(LAYOUT.num_layers):
            k2[layer].copy_(k[layer])
            v2[layer].copy_(v[layer])
        assert path.put(keys2, LAYOUT, k2, v2, pages=pages).written == 8
        out = torch.zeros_like(data)
        assert all(store.get(keys2, LAYOUT, out).found)
        assert torch.equal(out, data)
