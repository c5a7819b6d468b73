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


def _stand_in():
    from sglang.srt.managers.cache_controller import HiCacheController
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
    from sglang.srt.mem_cache.utils import get_hash_str
    return (HiCacheController, HybridCacheController, PoolHitPolicy, PoolName, PoolTransfer,
            get_hash_str)


def _ssd_only(ssd_dir, ssd_bytes):
    from sglang_util import LOADER_CONFIG
    return dict(LOADER_CONFIG, ssd_dirs=[ssd_dir], ssd_bytes=ssd_bytes, ssd_file_bytes="64MiB",
                dram_bytes="16MiB", huge_pages="none", force_medium="ssd")


def _digest_tensors(tensors):
    h = hashlib.blake2b()
    for t in tensors:
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def test_256mib_round_trip_through_v2_with_two_pools(ssd_dir):
    """A hybrid model through SGLang's HybridCacheController (stand-in): 64 requests of 8 KV
    pages (128 MiB, v1) each with a Mamba state (2.3 MiB, unequal buffers: gathered) and DSA
    indexer pages beside every KV page (61 layers: 257 KiB a page, in place): more than 256 MiB
    through batch_set_v2 / batch_get_v2 in two pools, through SSD, then every byte compared."""
    from hybrid_pools import EmulatedIndexerPool, EmulatedKVPool, EmulatedMambaPool, make_group
    (_, HybridCacheController, PoolHitPolicy, PoolName, PoolTransfer,
     get_hash_str) = _stand_in()
    requests, pages, page_size = 64, 8, 32
    kv = EmulatedKVPool(mla=False, layout="page_first_direct", layer_num=8, page_size=page_size,
                        page_num=2 * requests * pages, heads=2, head_dim=128)
    mamba = EmulatedMambaPool(layers=8, slots=2 * requests, temporal_shape=(32, 64, 32),
                              conv_shapes=[(3, 4096), (3, 2048)])
    indexer = EmulatedIndexerPool(kv, layer_num=61)
    for i, p in enumerate((kv, mamba, indexer)):
        p.fill_random(500 + i)
    group = make_group(kv, {PoolName.MAMBA: mamba, PoolName.INDEXER: indexer})
    ctrl = HybridCacheController(group, page_size, storage_backend="dynamic",
                                 storage_backend_extra_config=_ssd_only(ssd_dir, "640MiB"),
                                 prefetch_threshold=0)
    backend = ctrl.storage_backend
    half = requests * pages  # restores land in the second half of each pool
    before = [_digest_tensors([kv.kv_buffer[:, :half]]), _digest_tensors(
        [mamba.temporal_buffer[:requests]] + [c[:requests] for c in mamba.conv_buffer]),
        _digest_tensors([indexer.index_k_with_scale_buffer[:half]])]

    def toks(r):
        return list(range(r * 1_000_000, r * 1_000_000 + pages * page_size))

    start = time.perf_counter()
    for r in range(requests):
        keys = get_hash_str(toks(r), None, page_size=page_size)
        ctrl.write_storage(kv.page_indices(range(r * pages, (r + 1) * pages)), toks(r),
                           hash_value=keys, extra_pools=[
                               PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([r]),
                                            keys=[keys[-1]],
                                            hit_policy=PoolHitPolicy.TRAILING_PAGES),
                               PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV,
                                            hit_policy=PoolHitPolicy.ALL_PAGES)])
        result = ctrl.ack_backup_queue[-1].pool_storage_result.extra_pool_hit_pages
        assert result == {PoolName.MAMBA: 1, PoolName.INDEXER: pages}
    write_s = time.perf_counter() - start

    start = time.perf_counter()
    for r in range(requests):
        dst = kv.page_indices(range(half + r * pages, half + (r + 1) * pages))
        op = ctrl.prefetch(f"r{r}", toks(r), host_indices=dst, extra_pools=[
            PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([requests + r]),
                         keys=["__placeholder__"], hit_policy=PoolHitPolicy.TRAILING_PAGES),
            PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV,
                         hit_policy=PoolHitPolicy.ALL_PAGES)])
        assert op.completed_tokens == pages * page_size
        assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.MAMBA: 1,
                                                              PoolName.INDEXER: pages}
    read_s = time.perf_counter() - start
    after = [_digest_tensors([kv.kv_buffer[:, half:]]), _digest_tensors(
        [mamba.temporal_buffer[requests:]] + [c[requests:] for c in mamba.conv_buffer]),
        _digest_tensors([indexer.index_k_with_scale_buffer[half:]])]
    stats = backend.store_stats()
    backend.close()

    kv_bytes = requests * pages * 2 * 8 * page_size * 2 * 128 * 2
    mamba_bytes = requests * backend._side_pools["mamba"].page_bytes
    index_bytes = requests * pages * indexer.page_stride_bytes
    total = kv_bytes + mamba_bytes + index_bytes
    print(f"\n[flatcake-sglang] v2: {requests} requests; KV {kv_bytes / MiB:.0f} MiB (v1), "
          f"mamba {mamba_bytes / MiB:.0f} MiB + indexer {index_bytes / MiB:.0f} MiB (v2); "
          f"write {total / MiB / write_s:.0f} MiB/s, read {total / MiB / read_s:.0f} MiB/s; "
          f"pools equal {[a == b for a, b in zip(before, after)]}; ssd delivered "
          f"{stats['ssd']['delivered_bytes'] // MiB} MiB")
    assert mamba_bytes + index_bytes >= TOTAL
    assert after == before
    assert stats["ssd"]["delivered_bytes"] == total
    assert stats["checksum_mismatches"] == 0


def test_256mib_round_trip_through_the_draft_pool(ssd_dir, storage):
    """Speculative decoding: SGLang's generic draft path (the one a dynamic backend gets) moves
    256 MiB of draft-model pages (1 layer, another shape than the target's) under <hash>.draft
    keys beside the target's pages, through SSD."""
    HiCacheController, _, _, _, _, get_hash_str = _stand_in()
    page_size, pages = 32, 512
    target = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=page_size,
                              page_num=pages, heads=1, head_dim=64)
    draft = EmulatedHostPool(mla=False, layout="page_first", layer_num=1, page_size=page_size,
                             page_num=pages, heads=32, head_dim=128, storage=storage)
    draft_page = draft.planes * page_size * draft.token_bytes
    assert pages * draft_page >= TOTAL
    target.fill_random(600)
    draft.fill_random(601)
    ctrl = HiCacheController(target, page_size, storage_backend="dynamic",
                             storage_backend_extra_config=_ssd_only(ssd_dir, "320MiB"),
                             prefetch_threshold=0)
    ctrl.set_draft_kv_pool(None, draft)
    assert ctrl.draft_page_set_func == ctrl._draft_page_set_generic
    tokens = list(range(pages * page_size))
    keys = get_hash_str(tokens, None, page_size=page_size)
    want = [draft.page_bytes(p) for p in range(pages)]
    start = time.perf_counter()
    ctrl.write_storage(target.page_indices(range(pages)), tokens, hash_value=keys)
    write_s = time.perf_counter() - start
    assert ctrl.ack_backup_queue[-1].completed_tokens == len(tokens)
    target_want = digest(target)
    target.kv_buffer.zero_()
    draft.kv_buffer.zero_()
    start = time.perf_counter()
    op = ctrl.prefetch("draft", tokens, host_indices=target.page_indices(range(pages)))
    read_s = time.perf_counter() - start
    assert op.completed_tokens == len(tokens)
    assert digest(target) == target_want
    mismatched = sum(draft.page_bytes(p) != want[p] for p in range(pages))
    stats = ctrl.storage_backend.store_stats()
    ctrl.storage_backend.close()
    draft_mib = pages * draft_page / MiB
    print(f"\n[flatcake-sglang] draft: {pages} pages x {draft_page // 1024} KiB = "
          f"{draft_mib:.0f} MiB (+ {pages} target pages); write {draft_mib / write_s:.0f} MiB/s, "
          f"read {draft_mib / read_s:.0f} MiB/s; mismatched draft pages {mismatched}")
    assert mismatched == 0
    assert stats["index_size"] == 2 * pages  # target and draft pages, apart by key
    assert stats["checksum_mismatches"] == 0
