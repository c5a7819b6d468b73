"""DP attention: SGLang's HiCacheStorageConfig has no dp rank, so every DP worker gets the same
config. Two worker processes with identical configs must both start and keep apart."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from host_pool import EmulatedHostPool
from sglang_util import load_backend, page_hashes

HERE = os.path.dirname(os.path.abspath(__file__))


def store_config(ssd_dir):
    return {"ssd_dirs": [ssd_dir], "ssd_bytes": "64MiB", "ssd_file_bytes": "16MiB",
            "dram_bytes": "32MiB", "force_medium": "ssd"}


def worker_script(ssd_dir, tp_size):
    # A second DP worker: same config (tp_rank 0 of its attention TP group), another process.
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {HERE!r})
        from host_pool import EmulatedHostPool
        from sglang_util import load_backend, page_hashes
        p = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=16,
                             page_num=32, heads=2, head_dim=64)
        p.fill_random(7)
        b = load_backend({store_config(ssd_dir)!r}, is_mla_model=False, tp_size={tp_size})
        b.register_mem_pool_host(p)
        keys = page_hashes(4, seed=21)
        assert all(b.batch_set_v1(keys, p.page_indices(range(4))))
        assert all(b.batch_get_v1(keys, p.page_indices(range(4, 8))))
        print("DIRS", b._store.options()["ssd_dirs"][0])
        b.close()
    """)


def run_second_worker(ssd_dir, tp_size):
    p = subprocess.run([sys.executable, "-c", worker_script(ssd_dir, tp_size)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stdout + p.stderr
    return [line.split(" ", 1)[1] for line in p.stdout.splitlines() if line.startswith("DIRS ")][0]


def test_two_dp_workers_with_identical_configs_both_start(ssd_dir):
    for tp_size in (1, 2):
        pool = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=16,
                                page_num=32, heads=2, head_dim=64)
        pool.fill_random(3)
        first = load_backend(store_config(ssd_dir), is_mla_model=False, tp_size=tp_size)
        first.register_mem_pool_host(pool)
        keys = page_hashes(4, seed=20)
        assert all(first.batch_set_v1(keys, pool.page_indices(range(4))))
        mine = first._store.options()["ssd_dirs"][0]
        theirs = run_second_worker(ssd_dir, tp_size)  # while `first` holds its directory
        assert theirs != mine and os.path.dirname(theirs.rstrip("/")).startswith(ssd_dir)
        assert os.path.basename(theirs).endswith("w1"), theirs
        # The first worker's data is untouched by the second.
        assert first.batch_exists(keys) == 4
        assert all(first.batch_get_v1(keys, pool.page_indices(range(8, 12))))
        first.close()


def test_draft_pages_round_trip_through_the_generic_path(ssd_dir):
    """Speculative decoding: SGLang's generic draft path stores the draft pool's flat pages under
    `<hash>.draft` keys with batch_set and reads them back with batch_get into the draft pool's
    dummy pages (cache_controller._draft_page_set_generic / _get_generic at SGLang 8905cbd). The
    draft pool's pages have another shape than the target pool's."""
    target = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=16,
                              page_num=32, heads=2, head_dim=64)
    draft = EmulatedHostPool(mla=False, layout="page_first", layer_num=1, page_size=16,
                             page_num=32, heads=4, head_dim=32)
    target.fill_random(1)
    draft.fill_random(2)
    b = load_backend(store_config(ssd_dir), is_mla_model=False)
    b.register_mem_pool_host(target)
    hashes = page_hashes(6, seed=30)
    assert all(b.batch_set_v1(hashes, target.page_indices(range(6))))
    draft_keys = [f"{h}.draft" for h in hashes]
    pages = [draft.get_data_page(i * draft.page_size) for i in range(6)]
    assert pages[0].numel() * pages[0].element_size() != b._layout.block_bytes  # another shape
    assert b.batch_set(draft_keys, pages) is True
    dummies = [draft.get_dummy_flat_data_page() for _ in draft_keys]
    got = b.batch_get(draft_keys, dummies)
    assert all(g is not None for g in got)
    for i, g in enumerate(got):
        assert torch.equal(g.view(torch.uint8), pages[i].view(torch.uint8)), i  # bytes (NaNs)
    # The target pages are untouched, and a batch that mixes the two is refused.
    assert all(b.batch_get_v1(hashes, target.page_indices(range(8, 14))))
    with pytest.raises(ValueError, match="mixes draft"):
        b.batch_set([draft_keys[0], hashes[0]], [pages[0], pages[1]])
    b.close()
