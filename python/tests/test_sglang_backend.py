"""flatcake.sglang.FlatCakeStorage against emulated SGLang host pools (MHA and MLA, each layout)."""

import os

import pytest
import torch

import flatcake
from flatcake.sglang import FlatCakeStorage, HiCacheStorageExtraInfo
from host_pool import LAYOUTS, EmulatedHostPool
from sglang_util import load_backend, page_hashes

CASES = [(layout, mla) for layout in LAYOUTS for mla in (False, True)]
IDS = [f"{layout}-{'mla' if mla else 'mha'}" for layout, mla in CASES]


def small_pool(layout, mla, seed=None, page_num=32):
    pool = EmulatedHostPool(mla=mla, layout=layout, layer_num=4, page_size=16, page_num=page_num,
                            heads=2, head_dim=64)
    if seed is not None:
        pool.fill_random(seed)
    return pool


def store_config(ssd_dir, **extra):
    config = {"ssd_dirs": [ssd_dir], "ssd_bytes": "128MiB", "ssd_file_bytes": "16MiB",
              "dram_bytes": "32MiB"}
    config.update(extra)
    return config


def backend(ssd_dir, pool, mla, **fields):
    extra = fields.pop("extra", {})
    b = load_backend(store_config(ssd_dir, **extra), is_mla_model=mla, **fields)
    if pool is not None:
        b.register_mem_pool_host(pool)
    return b


@pytest.mark.parametrize("layout, mla", CASES, ids=IDS)
def test_round_trip_byte_for_byte(ssd_dir, layout, mla):
    pool = small_pool(layout, mla, seed=11)
    b = backend(ssd_dir, pool, mla)
    src_pages = [3, 7, 1, 30, 12, 0]  # scattered, out of order
    dst_pages = [5, 2, 31, 8, 19, 27]
    keys = page_hashes(len(src_pages))
    expected = [pool.page_bytes(p) for p in src_pages]

    assert b.batch_exists(keys) == 0
    assert b.batch_set_v1(keys, pool.page_indices(src_pages)) == [True] * len(keys)
    assert b.batch_exists(keys) == len(keys)

    pool.kv_buffer.zero_()
    assert b.batch_get_v1(keys, pool.page_indices(dst_pages)) == [True] * len(keys)
    for page, want in zip(dst_pages, expected):
        assert pool.page_bytes(page) == want
    untouched = set(range(pool.page_num)) - set(dst_pages)
    assert all(not any(pool.page_bytes(p)) for p in untouched)
    b.close()


@pytest.mark.parametrize("layout, mla", CASES, ids=IDS)
def test_copy_interface_reads_zero_copy_data_and_back(ssd_dir, layout, mla):
    pool = small_pool(layout, mla, seed=5)
    b = backend(ssd_dir, pool, mla)
    k1, k2 = page_hashes(2, seed=9)
    # Zero-copy write, copy-based read (flat page, as SGLang's generic path uses them).
    assert b.batch_set_v1([k1], pool.page_indices([4]))
    flat = b.get(k1)
    assert flat is not None
    # Bytes, not values: random bits include NaNs, which never compare equal.
    assert flat.view(torch.uint8).numpy().tobytes() == pool.page_bytes(4)
    # Copy-based write, zero-copy read.
    assert b.set(k2, pool.get_data_page(9 * pool.page_size).clone())
    assert b.exists(k2)
    before = pool.page_bytes(9)
    pool.kv_buffer.zero_()
    assert b.batch_get_v1([k2], pool.page_indices([1])) == [True]
    assert pool.page_bytes(1) == before
    # batch_get into caller buffers; a missing key is None.
    dst = [pool.get_dummy_flat_data_page(), pool.get_dummy_flat_data_page()]
    got = b.batch_get([k2, "f" * 64], dst)
    assert got[0] is dst[0] and got[1] is None
    assert b.get("e" * 64) is None and not b.exists("e" * 64)
    assert b.batch_set([k1, k2], [dst[0], dst[0]]) is True  # present: write-once success
    b.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_mha_tp_ranks_keep_their_own_heads(ssd_dir, layout):
    pools = [small_pool(layout, False, seed=100 + r) for r in range(2)]
    ranks = [backend(ssd_dir, pools[r], False, tp_rank=r, tp_size=2) for r in range(2)]
    assert ranks[0]._store is ranks[1]._store  # one store per process, shared by its workers
    keys = page_hashes(4, seed=3)
    pages = [0, 1, 2, 3]
    expected = [[p.page_bytes(x) for x in pages] for p in pools]
    for r in range(2):
        assert all(ranks[r].batch_set_v1(keys, pools[r].page_indices(pages)))
    assert ranks[0].store_stats()["index_size"] == 2 * len(keys)  # distinct keys per rank
    for r in range(2):
        pools[r].kv_buffer.zero_()
        assert all(ranks[r].batch_get_v1(keys, pools[r].page_indices(pages)))
        assert [pools[r].page_bytes(x) for x in pages] == expected[r]
    assert expected[0] != expected[1]
    for b in ranks:
        b.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_mla_tp_ranks_share_pages(ssd_dir, layout):
    pools = [small_pool(layout, True, seed=7), small_pool(layout, True)]
    ranks = [backend(ssd_dir, pools[r], True, tp_rank=r, tp_size=2) for r in range(2)]
    keys = page_hashes(5, seed=4)
    src = [6, 7, 8, 9, 10]
    expected = [pools[0].page_bytes(p) for p in src]
    # SGLang lets only rank 0 back up MLA pages; every rank loads them.
    assert all(ranks[0].batch_set_v1(keys, pools[0].page_indices(src)))
    assert ranks[1].batch_exists(keys) == len(keys)
    assert all(ranks[1].batch_get_v1(keys, pools[1].page_indices([0, 1, 2, 3, 4])))
    assert [pools[1].page_bytes(p) for p in range(5)] == expected
    assert ranks[0].store_stats()["index_size"] == len(keys)
    for b in ranks:
        b.close()


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_context_parallel_ranks_keep_their_own_slices(ssd_dir, mla):
    """Under attention context parallelism each CP rank holds its own slice of every page (MLA
    too), so each rank stores and restores its own bytes. (Keys shared by CP ranks would keep the
    first rank's slice and hand it to the other: write-once.)"""
    pools = [small_pool("page_first", mla, seed=40 + r) for r in range(2)]
    ranks = [backend(ssd_dir, pools[r], mla, attn_cp_rank=r, attn_cp_size=2) for r in range(2)]
    keys = page_hashes(3, seed=41)
    expected = [[p.page_bytes(x) for x in range(3)] for p in pools]
    assert expected[0] != expected[1]
    for r in range(2):
        assert all(ranks[r].batch_set_v1(keys, pools[r].page_indices(range(3))))
    for r in range(2):
        pools[r].kv_buffer.zero_()
        assert all(ranks[r].batch_get_v1(keys, pools[r].page_indices(range(3))))
        assert [pools[r].page_bytes(x) for x in range(3)] == expected[r]
    for b in ranks:
        b.close()


@pytest.mark.parametrize("layout, mla", CASES, ids=IDS)
def test_partial_prefix_hit(ssd_dir, layout, mla):
    pool = small_pool(layout, mla, seed=21)
    b = backend(ssd_dir, pool, mla)
    keys = page_hashes(8, seed=8)
    expected = [pool.page_bytes(p) for p in range(8)]
    assert all(b.batch_set_v1(keys[:5], pool.page_indices(range(5))))
    assert b.batch_exists(keys) == 5
    assert b.batch_exists(keys[5:]) == 0

    pool.kv_buffer.zero_()
    result = b.batch_get_v1(keys, pool.page_indices(range(8, 16)))
    assert result == [True] * 5 + [False] * 3
    assert [pool.page_bytes(p) for p in range(8, 13)] == expected[:5]
    assert all(not any(pool.page_bytes(p)) for p in range(13, 16))
    b.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_write_once(ssd_dir, layout):
    pool = small_pool(layout, False, seed=31)
    b = backend(ssd_dir, pool, False)
    keys = page_hashes(3, seed=1)
    first = [pool.page_bytes(p) for p in range(3)]
    assert all(b.batch_set_v1(keys, pool.page_indices(range(3))))
    pool.fill_random(32)  # new contents under the same keys
    assert b.batch_set_v1(keys, pool.page_indices(range(3))) == [True] * 3
    assert b.store_stats()["blocks_skipped_present"] >= 3
    assert all(b.batch_get_v1(keys, pool.page_indices(range(3))))
    assert [pool.page_bytes(p) for p in range(3)] == first
    b.close()


def test_prefix_keys_continue_the_session_scope(ssd_dir):
    def scopes(b, medium):
        return b.store_stats()[medium]["scopes_live"]

    pool = small_pool("page_first_direct", False, seed=41)
    b = backend(ssd_dir, pool, False, extra={"tau_tokens": 128})
    keys = page_hashes(16, seed=12)
    assert all(b.batch_set_v1(keys[:4], pool.page_indices(range(4))))  # a chain head: SSD
    info = HiCacheStorageExtraInfo(prefix_keys=keys[:4])
    # It continues the chain's end: a later turn of 64 tokens (< tau): DRAM, the same session.
    assert all(b.batch_set_v1(keys[4:8], pool.page_indices(range(4, 8)), info))
    assert (scopes(b, "ssd"), scopes(b, "dram")) == (1, 1)
    # A long later turn (128 tokens, not < tau) joins the session's SSD scope.
    info = HiCacheStorageExtraInfo(prefix_keys=keys[:8])
    assert all(b.batch_set_v1(keys[8:16], pool.page_indices(range(8, 16)), info))
    assert (scopes(b, "ssd"), scopes(b, "dram")) == (1, 1)

    other = page_hashes(8, seed=13)
    assert all(b.batch_set_v1(other[:4], pool.page_indices(range(4))))
    assert all(b.batch_set_v1(other[4:], pool.page_indices(range(4, 8))))  # no prefix given
    assert (scopes(b, "ssd"), scopes(b, "dram")) == (3, 1)  # two sessions of their own
    b.close()


def test_pages_several_requests_looked_up_before_they_were_stored_go_to_dram(ssd_dir):
    """A shared prefix in a burst: two requests look the prompt's pages up (misses) before the
    first stores them; those pages go to DRAM, the rest of its own pages to SSD. A page one
    request looked up is its own: SSD."""
    pool = small_pool("page_first", False, seed=42)
    b = backend(ssd_dir, pool, False)
    system = page_hashes(3, seed=14)
    mine = page_hashes(4, seed=15, prior=system[-1])
    theirs = page_hashes(4, seed=16, prior=system[-1])
    assert b.batch_exists(system + mine) == 0
    assert b.batch_exists(system + theirs) == 0
    assert all(b.batch_set_v1(system + mine, pool.page_indices(range(7))))
    assert b._store.lookup([b._store_key(k) for k in system]).slowest_medium == "dram"
    assert b._store.lookup([b._store_key(k) for k in mine]).dram_bytes == 0
    info = HiCacheStorageExtraInfo(prefix_keys=system)  # a branch off the shared prefix
    assert all(b.batch_set_v1(theirs, pool.page_indices(range(7, 11)), info))
    assert b._store.lookup([b._store_key(k) for k in theirs]).dram_bytes == 0
    b.close()


def test_stats_and_clear(ssd_dir):
    pool = small_pool("page_first", False, seed=51)
    b = backend(ssd_dir, pool, False)
    keys = page_hashes(4, seed=2)
    assert all(b.batch_set_v1(keys, pool.page_indices(range(4))))
    assert all(b.batch_get_v1(keys, pool.page_indices(range(4, 8))))
    m = b.get_stats()
    assert m.backup_pgs == [4] and m.prefetch_pgs == [4]
    assert len(m.backup_bandwidth) == 1 and m.backup_bandwidth[0] > 0
    assert b.get_stats().backup_pgs == []  # reset per interval
    st = b.store_stats()
    assert st["hits"] == 4
    # Loads are restore requests scheduled by the store's FC-MAS: classified by medium.
    assert st["restores_dram_ready"] + st["restores_ssd"] == st["gets"] == 1
    b.clear()
    assert b.batch_exists(keys) == 0
    b.close()


def test_extra_config_options_reach_the_store(ssd_dir):
    pool = small_pool("layer_first", False, seed=1)
    b = backend(ssd_dir, pool, False,
                extra={"io_workers": 1, "max_gap_bytes": "32KiB", "tau_tokens": 128,
                       "huge_pages": "none", "namespace": "modelA/", "force_medium": "dram"})
    opts = b._store.options()
    assert (opts["io_workers"], opts["max_gap_bytes"], opts["tau_tokens"]) == (1, 32 << 10, 128)
    assert opts["tokens_per_block"] == pool.page_size  # defaults to the SGLang page size
    keys = page_hashes(2)
    assert all(b.batch_set_v1(keys, pool.page_indices([0, 1])))
    assert b.store_stats()["dram"]["blocks_live"] == 2  # force_medium honoured
    # namespace + hash + the page's format (the layer-major order, 8 hex) + rank suffix
    assert b._format.startswith("l") and len(b._format) == 9
    assert b._store.exists(["modelA/" + keys[0] + "@" + b._format + "_0"]) == 1
    b.close()


def test_close_releases_the_shared_store(ssd_dir):
    pool = small_pool("page_first", False)
    a = backend(ssd_dir, pool, False, tp_rank=0, tp_size=2)
    c = backend(ssd_dir, pool, False, tp_rank=1, tp_size=2)
    store = a._store
    assert store.info()["ssd_dirs"] == [os.path.join(ssd_dir, "tp0")]  # per-worker directory
    a.close()
    assert not store.closed
    c.close()
    assert store.closed


# --- bad input ------------------------------------------------------------------------------------

def test_unknown_layout_is_rejected(ssd_dir):
    pool = small_pool("page_first", False)
    pool.layout = "page_head"
    b = backend(ssd_dir, None, False)
    with pytest.raises(ValueError, match="unsupported host memory layout 'page_head'"):
        b.register_mem_pool_host(pool)


def test_missing_pool_is_a_clear_error(ssd_dir):
    b = backend(ssd_dir, None, False)
    keys = page_hashes(1)
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        b.batch_set_v1(keys, torch.arange(16))
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        b.batch_get_v1(keys, torch.arange(16))
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        b.set(keys[0], torch.zeros(4))
    with pytest.raises(ValueError, match="None"):
        b.register_mem_pool_host(None)
    assert b.batch_exists(keys) == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_wrong_sizes_are_rejected(ssd_dir, layout):
    pool = small_pool(layout, False, seed=3)
    b = backend(ssd_dir, pool, False)
    keys = page_hashes(2)
    with pytest.raises(ValueError, match="host indices"):
        b.batch_set_v1(keys, pool.page_indices([0]))  # one page of indices for two keys
    with pytest.raises(ValueError, match="outside the host pool"):
        b.batch_get_v1(keys, pool.page_indices([pool.page_num, pool.page_num + 1]))
    with pytest.raises(ValueError, match="bytes"):
        b.set(keys[0], torch.zeros(10))
    with pytest.raises(ValueError, match="keys but"):
        b.batch_set(keys, [pool.get_dummy_flat_data_page()])
    assert b.batch_exists(keys) == 0  # nothing half-written
    b.close()


def test_mla_flag_must_match_the_pool(ssd_dir):
    with pytest.raises(ValueError, match="is_mla_model=True"):
        backend(ssd_dir, small_pool("page_first", mla=False), True)
    with pytest.raises(ValueError, match="is_mla_model=False"):
        backend(ssd_dir, small_pool("layer_first", mla=True), False)


@pytest.mark.parametrize("extra, match", [
    ({"ssd_bites": "1GiB"}, "unknown store option 'ssd_bites'"),
    ({"ssd_bytes": "lots"}, "cannot parse size"),
    ({"force_medium": "tape"}, "force_medium"),
])
def test_bad_extra_config_fails_at_construction(ssd_dir, extra, match):
    with pytest.raises(ValueError, match=match):
        backend(ssd_dir, None, False, extra=extra)


def test_layout_mismatch_between_workers_reports_misses(ssd_dir):
    """A page stored with one block shape and read with another is a miss, never garbage."""
    small = small_pool("page_first", False, seed=1)
    wide = EmulatedHostPool(mla=False, layout="page_first", layer_num=4, page_size=16,
                            page_num=8, heads=4, head_dim=64)
    a = backend(ssd_dir, small, False)
    keys = page_hashes(1)
    assert a.batch_set_v1(keys, small.page_indices([0])) == [True]
    c = FlatCakeStorage(a.storage_config, {})
    c.register_mem_pool_host(wide)
    assert c.batch_get_v1(keys, wide.page_indices([0])) == [False]
    assert not any(wide.page_bytes(0))
    a.close()
    c.close()


def test_flatcake_error_is_importable():
    assert issubclass(flatcake.Error, RuntimeError)


def test_a_restarted_worker_finds_its_pages(ssd_dir):
    """An engine restart: a new backend with the same config recovers the store's SSD pages."""
    pool = small_pool("page_first_direct", False, seed=60)
    keys = page_hashes(5, seed=61)
    b = backend(ssd_dir, pool, False, extra={"force_medium": "ssd"})
    assert all(b.batch_set_v1(keys, pool.page_indices(range(5))))
    expected = [pool.page_bytes(p) for p in range(5)]
    b.close()
    pool.kv_buffer.zero_()
    b = backend(ssd_dir, pool, False, extra={"force_medium": "ssd"})
    assert b.batch_exists(keys) == 5
    assert all(b.batch_get_v1(keys, pool.page_indices(range(5))))
    assert [pool.page_bytes(p) for p in range(5)] == expected
    assert b.store_stats()["recovered_blocks"] == 5
    b.close()
