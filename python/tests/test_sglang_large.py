"""A >= 256 MiB round trip through batch_set_v1 / batch_get_v1 in each host layout, MHA and MLA,
through the SSD medium, in SGLang's batches of 128 pages chained by prefix_keys."""

import hashlib
import time

import pytest
import torch

from flatcake.sglang import HiCacheStorageExtraInfo
from host_pool import LAYOUTS, EmulatedHostPool
from sglang_util import load_backend, page_hashes

MiB = 1 << 20
TOTAL = 256 * MiB
BATCH = 128  # SGLang's pages per storage call


@pytest.fixture(scope="module")
def storage():
    # One buffer reused by every case: first-touching 256 MiB costs seconds on a busy machine.
    return torch.empty(TOTAL + 2 * MiB, dtype=torch.uint8)


def digest(pool):
    return hashlib.blake2b(pool.kv_buffer.view(-1).view(torch.uint8).numpy()).hexdigest()


def count_mismatches(pool, seed):
    expected = EmulatedHostPool(mla=pool.is_mla, layout=pool.layout, layer_num=pool.layer_num,
                                page_size=pool.page_size, page_num=pool.page_num,
                                heads=pool.head_num, head_dim=pool.head_dim)
    expected.fill_random(seed)
    return int((pool.kv_buffer.view(torch.uint8) != expected.kv_buffer.view(torch.uint8)).sum())


def pool_for(layout, mla, storage):
    # A small model's shape: 16 layers, page of 32 tokens, bf16. MHA 4 heads x 128: 1 MiB pages;
    # MLA one 576-wide latent: 576 KiB pages.
    if mla:
        pool = EmulatedHostPool(mla=True, layout=layout, layer_num=16, page_size=32,
                                page_num=1, head_dim=576)
    else:
        pool = EmulatedHostPool(mla=False, layout=layout, layer_num=16, page_size=32,
                                page_num=1, heads=4, head_dim=128)
    page_bytes = pool.planes * pool.layer_num * pool.page_size * pool.token_bytes
    pages = -(-TOTAL // page_bytes)
    pool = EmulatedHostPool(mla=mla, layout=layout, layer_num=16, page_size=32, page_num=pages,
                            heads=pool.head_num, head_dim=pool.head_dim, storage=storage)
    return pool, pages, page_bytes


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_256mib_round_trip(ssd_dir, storage, layout, mla):
    pool, pages, page_bytes = pool_for(layout, mla, storage)
    assert pages * page_bytes >= TOTAL
    seed = 1000 + pages
    pool.fill_random(seed)
    expected = digest(pool)

    b = load_backend({"ssd_dirs": [ssd_dir], "ssd_bytes": "320MiB", "ssd_file_bytes": "64MiB",
                      "dram_bytes": "16MiB", "huge_pages": "none", "force_medium": "ssd"},
                     is_mla_model=mla)
    b.register_mem_pool_host(pool)
    keys = page_hashes(pages, seed=pages)

    start = time.perf_counter()
    for i in range(0, pages, BATCH):
        batch = keys[i:i + BATCH]
        info = HiCacheStorageExtraInfo(prefix_keys=keys[:i] or None)
        assert all(b.batch_set_v1(batch, pool.page_indices(range(i, i + len(batch))), info))
    write_s = time.perf_counter() - start
    assert b.batch_exists(keys) == pages

    pool.kv_buffer.zero_()
    start = time.perf_counter()
    for i in range(0, pages, BATCH):
        batch = keys[i:i + BATCH]
        info = HiCacheStorageExtraInfo(prefix_keys=keys[:i] or None)
        assert all(b.batch_get_v1(batch, pool.page_indices(range(i, i + len(batch))), info))
    read_s = time.perf_counter() - start

    # Digest first (cheap); count the differing bytes only when there are some.
    mismatched = 0 if digest(pool) == expected else max(1, count_mismatches(pool, seed))
    stats = b.store_stats()
    b.close()
    total_mib = pages * page_bytes / MiB
    print(f"\n[flatcake-sglang] {layout:17s} {'MLA' if mla else 'MHA'}: {pages} pages x "
          f"{page_bytes // 1024} KiB = {total_mib:.0f} MiB; write {total_mib / write_s:.0f} MiB/s, "
          f"read {total_mib / read_s:.0f} MiB/s; mismatched bytes {mismatched}; "
          f"ssd delivered {stats['ssd']['delivered_bytes'] // MiB} MiB, "
          f"scopes {stats['ssd']['scopes_live']}")
    assert mismatched == 0
    assert stats["ssd"]["delivered_bytes"] == pages * page_bytes
    assert stats["checksum_mismatches"] == 0
