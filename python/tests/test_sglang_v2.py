"""The v2 interface of hybrid models: FlatCakeStorage registered with a HostPoolGroup, named
auxiliary pools (Mamba states, a DSA indexer, DeepSeek-V4 pools under a logical anchor, a draft
pool) stored and restored, and hit counts per pool under the all_pages / trailing_pages policies.

The stand-in SGLang (sglang_standin/, SGLang main at 8905cbd) carries the v2 types, HostPoolGroup
and the storage path of HybridCacheController; the tests drive the backend both through that
controller (as SGLang does for a hybrid model) and with direct v2 calls."""

import pytest
import torch

import flatcake.sglang as fs
from isolated import run_without
from hybrid_pools import EmulatedIndexerPool, EmulatedKVPool, EmulatedMambaPool, make_group
from sglang.srt.mem_cache.hicache_storage import (
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.utils import get_hash_str
from sglang_util import LOADER_CONFIG, load_backend, page_hashes

TRAILING = PoolHitPolicy.TRAILING_PAGES
ALL = PoolHitPolicy.ALL_PAGES


def store_config(ssd_dir, **extra):
    config = {"ssd_dirs": [ssd_dir], "ssd_bytes": "128MiB", "ssd_file_bytes": "32MiB",
              "dram_bytes": "32MiB"}
    config.update(extra)
    return config


def kv_pool(page_num=32, mla=False, layout="page_first_direct"):
    pool = EmulatedKVPool(mla=mla, layout=layout, layer_num=4, page_size=16, page_num=page_num,
                          heads=2, head_dim=64)
    pool.fill_random(11)
    return pool


def mamba_pool(slots=8, layers=4):
    # Unequal buffers, as Qwen3-Next's: a float32 temporal state and two bf16 conv states.
    pool = EmulatedMambaPool(layers=layers, slots=slots, temporal_shape=(4, 16, 16),
                             conv_shapes=[(3, 256), (3, 64)])
    pool.fill_random(12)
    return pool


def indexer_pool(anchor, layers=4):
    pool = EmulatedIndexerPool(anchor, layer_num=layers)
    pool.fill_random(13)
    return pool


def controller(ssd_dir, group, **fields):
    extra = dict(LOADER_CONFIG, **store_config(ssd_dir, **fields.pop("extra", {})))
    return HybridCacheController(group, group.page_size, storage_backend="dynamic",
                                 storage_backend_extra_config=extra, prefetch_threshold=0,
                                 **fields)


def tokens(request, pages, page_size=16):
    return list(range(request * 100_000, request * 100_000 + pages * page_size))


def mamba_backup(slot, keys):
    return PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([slot]), keys=[keys[-1]],
                        hit_policy=TRAILING)


def mamba_prefetch(slot):
    # SGLang allocates the slot and leaves a placeholder key; the hit query only counts the keys.
    return PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([slot]),
                        keys=["__placeholder__"], hit_policy=TRAILING)


def indexer_sidecar():
    return PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV, hit_policy=ALL)


def test_hybrid_model_starts_through_hybrid_cache_controller(ssd_dir):
    """SGLang hands a hybrid model's backend a HostPoolGroup (no layer_num); the old backend
    refused it ("host pool HostPoolGroup lacks 'layer_num'"), so the model could not start."""
    kv = kv_pool()
    group = make_group(kv, {PoolName.MAMBA: mamba_pool(), PoolName.INDEXER: indexer_pool(kv)})
    assert not hasattr(group, "layer_num")
    ctrl = controller(ssd_dir, group)
    backend = ctrl.storage_backend
    assert isinstance(backend, fs.FlatCakeStorage)
    assert backend.mem_pool_host is group
    assert set(backend.registered_pools) == {PoolName.KV, PoolName.MAMBA, PoolName.INDEXER}
    assert backend._layout == fs.flatcake.KvLayout(4, 2, 16 * 256)  # the anchor's KV pages
    mamba = backend._side_pools["mamba"]
    assert mamba.gather and mamba.page_bytes == 4 * (4 * 16 * 16 * 4 + 3 * 256 * 2 + 3 * 64 * 2)
    assert not backend._side_pools["indexer"].gather  # one buffer per page: in place
    backend.close()


def test_controller_round_trip_kv_mamba_indexer(ssd_dir):
    """Backups of three requests (KV through v1; a Mamba state at each request's last page and
    indexer pages for every page through v2), the pools wiped, then prefetches into other slots:
    every byte comes back, and pool_storage_result counts each pool's pages."""
    kv = kv_pool(page_num=32)
    mamba, indexer = mamba_pool(slots=8), indexer_pool(kv)
    group = make_group(kv, {PoolName.MAMBA: mamba, PoolName.INDEXER: indexer})
    ctrl = controller(ssd_dir, group)
    anchor = group.get_pool(PoolName.KV)
    requests = [(r, 3 + r) for r in range(3)]  # (request, pages)
    expected = {}
    page = 0
    for r, pages in requests:
        toks = tokens(r, pages)
        keys = get_hash_str(toks, None, page_size=16)
        slots = anchor.page_indices(range(page, page + pages))
        ctrl.write_storage(slots, toks, hash_value=keys,
                           extra_pools=[mamba_backup(r, keys), indexer_sidecar()])
        op = ctrl.ack_backup_queue[-1]
        assert op.completed_tokens == pages * 16
        assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.MAMBA: 1,
                                                              PoolName.INDEXER: pages}
        expected[r] = ([anchor.page_bytes(p) for p in range(page, page + pages)],
                       mamba.slot_bytes(r),
                       [indexer.page_bytes(p) for p in range(page, page + pages)])
        page += pages

    anchor.kv_buffer.zero_()
    mamba.temporal_buffer.zero_()
    for c in mamba.conv_buffer:
        c.zero_()
    indexer.index_k_with_scale_buffer.zero_()
    page = 20
    for r, pages in requests:
        dst = anchor.page_indices(range(page, page + pages))
        op = ctrl.prefetch(f"req-{r}", tokens(r, pages), host_indices=dst,
                           extra_pools=[mamba_prefetch(4 + r), indexer_sidecar()])
        assert op.completed_tokens == pages * 16
        assert op.pool_storage_result.kv_hit_pages == pages
        assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.MAMBA: 1,
                                                              PoolName.INDEXER: pages}
        kv_bytes, state, idx = expected[r]
        assert [anchor.page_bytes(p) for p in range(page, page + pages)] == kv_bytes
        assert mamba.slot_bytes(4 + r) == state
        assert [indexer.page_bytes(p) for p in range(page, page + pages)] == idx
        page += pages
    ctrl.storage_backend.close()


def test_trailing_pages_end_the_prefix_where_the_state_is(ssd_dir):
    """A Mamba state exists only at the pages where a radix node ended: the usable prefix ends at
    the longest such page (trailing window 1). A sliding window of 2 needs both of its pages."""
    kv = kv_pool()
    mamba = mamba_pool()
    b = load_backend(store_config(ssd_dir))
    b.register_mem_pool_host(make_group(kv, {PoolName.MAMBA: mamba}))
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    keys = page_hashes(12, seed=5)
    assert all(b.batch_set_v1(keys, kv.page_indices(range(12))))
    # States after pages 4 and 10 (two nodes: [0, 4), [4, 10)), none after 12.
    for slot, end in ((0, 4), (1, 10)):
        assert b.batch_set_v2([mamba_backup(slot, keys[:end])]) == {PoolName.MAMBA: [True]}

    result = b.batch_exists_v2(keys, [mamba_prefetch(2)])
    assert isinstance(result, PoolTransferResult)
    assert result.kv_hit_pages == 10
    assert result.extra_pool_hit_pages == {PoolName.KV: 12, PoolName.MAMBA: 10}
    assert b.batch_exists_v2(keys[:9], [mamba_prefetch(2)]).kv_hit_pages == 4
    assert b.batch_exists_v2(keys[:3], [mamba_prefetch(2)]).kv_hit_pages == 0

    window = PoolTransfer(name=PoolName.MAMBA, keys=["__placeholder__"] * 2, hit_policy=TRAILING)
    assert b.batch_exists_v2(keys, [window]).kv_hit_pages == 0  # pages 9 and 10 never both
    assert b.batch_set_v2([mamba_backup(3, keys[:9])])[PoolName.MAMBA] == [True]
    assert b.batch_exists_v2(keys, [window]).kv_hit_pages == 10
    b.close()


def test_a_missing_all_pages_page_shrinks_the_prefix(ssd_dir):
    kv = kv_pool()
    indexer = indexer_pool(kv)
    b = load_backend(store_config(ssd_dir))
    b.register_mem_pool_host(make_group(kv, {PoolName.INDEXER: indexer}))
    b.register_mem_host_pool_v2(indexer, PoolName.INDEXER)
    keys = page_hashes(8, seed=6)
    assert all(b.batch_set_v1(keys, kv.page_indices(range(8))))
    stored = [i for i in range(8) if i != 5]
    t = PoolTransfer(name=PoolName.INDEXER, host_indices=kv.page_indices(stored),
                     keys=[keys[i] for i in stored], hit_policy=ALL)
    assert b.batch_set_v2([t]) == {PoolName.INDEXER: [True] * 7}
    result = b.batch_exists_v2(keys, [PoolTransfer(name=PoolName.INDEXER, hit_policy=ALL)])
    assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (
        5, {PoolName.KV: 8, PoolName.INDEXER: 5})
    # A KV miss bounds every pool; no hit at all leaves KV out, as SGLang's backends do.
    assert b.batch_exists_v2(keys[:3] + page_hashes(2, seed=99), [t]).kv_hit_pages == 3
    miss = b.batch_exists_v2(page_hashes(2, seed=98), [t])
    assert (miss.kv_hit_pages, miss.extra_pool_hit_pages) == (0, {})
    b.close()


def test_logical_anchor_deepseek_v4_pools(ssd_dir):
    """DeepSeek-V4: the KV anchor is logical (page slots, no bytes); its compressed pools hold the
    data. KV pages 'move' without storage; the prefix is what the pools hold."""
    shape = kv_pool()
    c4, c128 = indexer_pool(shape, layers=3), indexer_pool(shape, layers=2)
    group = make_group(shape, {PoolName.DEEPSEEK_V4_C4: c4, PoolName.DEEPSEEK_V4_C128: c128},
                       anchor_logical=True)
    ctrl = controller(ssd_dir, group, is_mla_model=True)
    backend = ctrl.storage_backend
    assert backend._logical_kv and backend._side_pools["deepseek_v4_c4"].shared
    toks = tokens(7, 4)
    keys = get_hash_str(toks, None, page_size=16)
    sidecars = [PoolTransfer(name=n, indices_from_pool=PoolName.KV, hit_policy=ALL)
                for n in (PoolName.DEEPSEEK_V4_C4, PoolName.DEEPSEEK_V4_C128)]
    slots = shape.page_indices(range(4))
    ctrl.write_storage(slots, toks, hash_value=keys, extra_pools=sidecars)
    op = ctrl.ack_backup_queue[-1]
    assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.DEEPSEEK_V4_C4: 4,
                                                          PoolName.DEEPSEEK_V4_C128: 4}
    assert backend.store_stats()["index_size"] == 8  # no KV blocks, two pools x four pages
    expected = [[p.page_bytes(i) for i in range(4)] for p in (c4, c128)]
    for p in (c4, c128):
        p.index_k_with_scale_buffer.zero_()
    dst = shape.page_indices(range(10, 14))
    sidecars = [PoolTransfer(name=t.name, indices_from_pool=PoolName.KV, hit_policy=ALL)
                for t in sidecars]
    op = ctrl.prefetch("v4", toks, host_indices=dst, extra_pools=sidecars)
    assert op.completed_tokens == 64 and op.pool_storage_result.kv_hit_pages == 4
    assert [[p.page_bytes(i) for i in range(10, 14)] for p in (c4, c128)] == expected
    assert backend.batch_exists(keys) == 0  # without the pools, nothing is known to be there
    backend.close()


def test_draft_pool_through_v2(ssd_dir):
    """A draft model's pool registered as 'draft' (SGLang's Mooncake path): its pages, of another
    shape than the target's, round-trip through v2, apart from the generic <hash>.draft pages."""
    target = kv_pool()
    draft = EmulatedKVPool(mla=False, layout="page_first", layer_num=1, page_size=16,
                           page_num=32, heads=4, head_dim=32)
    draft.fill_random(21)
    b = load_backend(store_config(ssd_dir))
    b.register_mem_pool_host(target)
    b.register_mem_host_pool_v2(draft, PoolName.DRAFT)
    keys = page_hashes(4, seed=22)
    t = PoolTransfer(name=PoolName.DRAFT, host_indices=draft.page_indices(range(4)), keys=keys)
    assert b.batch_set_v2([t]) == {PoolName.DRAFT: [True] * 4}
    want = [draft.page_bytes(i) for i in range(4)]
    t = PoolTransfer(name=PoolName.DRAFT, host_indices=draft.page_indices(range(8, 12)), keys=keys)
    assert b.batch_get_v2([t]) == {PoolName.DRAFT: [True] * 4}
    assert [draft.page_bytes(i) for i in range(8, 12)] == want
    # The generic path's keys are another namespace: no such pages there.
    assert b.batch_get([f"{k}.draft" for k in keys],
                       [draft.get_dummy_flat_data_page() for _ in keys]) == [None] * 4
    b.close()


def test_rank_shared_and_per_rank_pools(ssd_dir):
    """Two TP ranks in one process: Mamba states are per rank (each rank's heads), MLA-side pools
    (the DSA indexer) are stored once and read by every rank."""
    kvs = [kv_pool(mla=True) for _ in range(2)]
    mambas = [mamba_pool() for _ in range(2)]
    mambas[1].fill_random(77)
    indexers = [indexer_pool(kvs[r]) for r in range(2)]
    ranks = []
    for r in range(2):
        b = load_backend(store_config(ssd_dir), is_mla_model=True, tp_rank=r, tp_size=2)
        b.register_mem_pool_host(make_group(kvs[r], {}))
        b.register_mem_host_pool_v2(mambas[r], PoolName.MAMBA)
        b.register_mem_host_pool_v2(indexers[r], PoolName.INDEXER)
        ranks.append(b)
    keys = page_hashes(2, seed=30)
    for r in range(2):
        assert ranks[r].batch_set_v2([mamba_backup(0, keys)])[PoolName.MAMBA] == [True]
    idx = PoolTransfer(name=PoolName.INDEXER, host_indices=kvs[0].page_indices([0, 1]), keys=keys)
    assert ranks[0].batch_set_v2([idx])[PoolName.INDEXER] == [True, True]
    assert ranks[0].store_stats()["index_size"] == 4  # 2 Mamba states + 2 shared indexer pages
    for r in range(2):
        want = mambas[r].slot_bytes(0)
        assert ranks[r].batch_get_v2([mamba_backup(5, keys)])[PoolName.MAMBA] == [True]
        assert mambas[r].slot_bytes(5) == want
    idx = PoolTransfer(name=PoolName.INDEXER, host_indices=kvs[1].page_indices([6, 7]), keys=keys)
    assert ranks[1].batch_get_v2([idx])[PoolName.INDEXER] == [True, True]
    assert [indexers[1].page_bytes(p) for p in (6, 7)] == [indexers[0].page_bytes(p)
                                                         for p in (0, 1)]
    for b in ranks:
        b.close()


def test_bad_v2_input_fails_that_pool_only(ssd_dir, caplog):
    kv = kv_pool()
    mamba, indexer = mamba_pool(), indexer_pool(kv)
    b = load_backend(store_config(ssd_dir))
    with pytest.raises(RuntimeError, match="register the KV pool first"):
        b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    b.register_mem_pool_host(make_group(kv, {}))
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    b.register_mem_host_pool_v2(indexer, PoolName.INDEXER)
    keys = page_hashes(2, seed=40)
    good = PoolTransfer(name=PoolName.INDEXER, host_indices=kv.page_indices([0, 1]), keys=keys)
    short = PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([0]), keys=keys)
    unknown = PoolTransfer(name=PoolName.SWA, host_indices=kv.page_indices([0]), keys=keys[:1])
    assert b.batch_set_v2([short, unknown, good]) == {
        PoolName.MAMBA: [False, False], PoolName.SWA: [False], PoolName.INDEXER: [True, True]}
    assert "2 keys need 2 host indices" in caplog.text
    assert "never registered" in caplog.text
    # Missing pools count no hit; the store keeps working.
    assert b.batch_exists_v2(keys, [PoolTransfer(name=PoolName.SWA)]).kv_hit_pages == 0
    with pytest.raises(ValueError, match="lacks 'get_page_buffer_meta'"):
        b.register_mem_host_pool_v2(object(), PoolName.SWA)
    assert b.batch_get_v2([good]) == {PoolName.INDEXER: [True, True]}
    b.close()


def test_without_sglang_the_fallback_interface_serves_v2(ssd_dir):
    """With no SGLang importable, flatcake.sglang binds its own copy of the interface (v2 types
    included) and the direct v2 calls work the same."""
    run_without("sglang_standin", f"""
        import torch
        import flatcake.sglang as fs
        assert fs.HiCacheStorage.__module__ == "flatcake._hicache_iface", fs.HiCacheStorage
        assert fs.PoolTransfer.__module__ == "flatcake._hicache_iface"
        from host_pool import EmulatedHostPool
        from sglang_util import load_backend, page_hashes
        kv = EmulatedHostPool(mla=False, layout="page_first", layer_num=2, page_size=8,
                              page_num=8, heads=2, head_dim=32)
        side = EmulatedHostPool(mla=True, layout="page_first", layer_num=1, page_size=8,
                                page_num=8, head_dim=32)
        side.fill_random(1)
        b = load_backend({store_config(ssd_dir)!r})
        b.register_mem_pool_host(kv)
        b.register_mem_host_pool_v2(side, fs.PoolName.SWA)
        keys = page_hashes(2, seed=1)
        assert all(b.batch_set_v1(keys, kv.page_indices([0, 1])))
        t = fs.PoolTransfer(name=fs.PoolName.SWA, host_indices=side.page_indices([0, 1]),
                            keys=keys, hit_policy=fs.PoolHitPolicy.TRAILING_PAGES)
        assert b.batch_set_v2([t]) == {{fs.PoolName.SWA: [True, True]}}
        r = b.batch_exists_v2(keys, [t])
        assert r.kv_hit_pages == 2, r
        want = [side.page_bytes(i) for i in (0, 1)]
        t.host_indices = side.page_indices([4, 5])
        assert b.batch_get_v2([t]) == {{fs.PoolName.SWA: [True, True]}}
        assert [side.page_bytes(i) for i in (4, 5)] == want
        b.close()
        print("ok")
    """)
