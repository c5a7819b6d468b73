"""A page is never served as the same page under another interpretation of its bytes.

SGLang servers restarted with another --hicache-mem-layout, page size, KV dtype, TP size or
model, against a recovered pool and against the same daemon (SGLang 8905cbd's host pool
layouts, emulated in host_pool.py): pages of the layouts that hold the same bytes permuted
(page_first, page_first_direct, layer_first) come back converted and byte-exact, compared by
their logical (plane, layer, token, head, dim) order; every other change is a miss, and the pool
is left untouched."""

import pytest
import torch

from host_pool import LAYOUTS, EmulatedHostPool
from sglang_util import load_backend, page_hashes

PAGES = [3, 7, 1, 12]  # where the writer's pages are
DST = [5, 2, 9, 0]  # where the reader asks for them


def pool_of(layout, mla, *, page_size=16, dtype=torch.bfloat16, heads=2, seed=None):
    pool = EmulatedHostPool(mla=mla, layout=layout, layer_num=4, page_size=page_size,
                            page_num=16, heads=heads, head_dim=32, dtype=dtype)
    if seed is not None:
        pool.fill_random(seed)
    return pool


def embedded(ssd_dir):
    return {"ssd_dirs": [ssd_dir], "ssd_bytes": "64MiB", "ssd_file_bytes": "8MiB",
            "dram_bytes": "16MiB", "force_medium": "ssd"}


def write_then_read(extra, writer_pool, reader_pool, mla, *, writer=None, reader=None,
                    restart=True):
    """Stores PAGES of writer_pool, then reads them with another backend (after the first has
    closed when `restart`: a recovered pool) into reader_pool's DST: (exists, found per page,
    the copy interface's pages)."""
    keys = page_hashes(len(PAGES), seed=71)
    a = load_backend(extra, is_mla_model=mla, **(writer or {}))
    a.register_mem_pool_host(writer_pool)
    assert a.batch_set_v1(keys, writer_pool.page_indices(PAGES)) == [True] * len(PAGES)
    if restart:
        a.close()
    b = load_backend(extra, is_mla_model=mla, **(reader or {}))
    b.register_mem_pool_host(reader_pool)
    exists = b.batch_exists(keys)
    found = b.batch_get_v1(keys, reader_pool.page_indices(DST))
    flats = b.batch_get(keys)
    b.close()
    if not restart:
        a.close()
    return exists, found, flats


def assert_converted(writer_pool, reader_pool, exists, found, flats):
    assert exists == len(PAGES) and found == [True] * len(PAGES)
    for src, dst, flat in zip(PAGES, DST, flats):
        assert reader_pool.logical_page(dst) == writer_pool.logical_page(src)
        # The copy interface's flat page, in the reader's order, holds the same page.
        reader_pool.set_from_flat_data_page(15 * reader_pool.page_size,
                                            flat.view(reader_pool.dtype))
        assert reader_pool.logical_page(15) == writer_pool.logical_page(src)


def assert_missed(reader_pool, exists, found, flats):
    assert exists == 0 and found == [False] * len(PAGES) and flats == [None] * len(PAGES)
    assert not any(any(reader_pool.logical_page(p)) for p in range(reader_pool.page_num))


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("stored", LAYOUTS)
@pytest.mark.parametrize("read", LAYOUTS)
def test_every_layout_pair_through_a_recovered_pool_is_converted(ssd_dir, stored, read, mla):
    writer, reader = pool_of(stored, mla, seed=72), pool_of(read, mla)
    assert_converted(writer, reader,
                     *write_then_read(embedded(ssd_dir), writer, reader, mla))


def test_every_layout_pair_through_the_same_daemon_is_converted_and_other_pages_miss(daemon):
    """One daemon, servers restarted against it with each layout (MHA and MLA, each pair under a
    tenant of its own so that every pair starts empty), then with another page size, dtype and
    model."""
    n = 0
    for mla in (False, True):
        for stored in LAYOUTS:
            for read in LAYOUTS:
                n += 1
                writer, reader = pool_of(stored, mla, seed=73 + n), pool_of(read, mla)
                extra = {"daemon": daemon, "tenant": f"layouts-{n}"}
                assert_converted(writer, reader, *write_then_read(extra, writer, reader, mla,
                                                                  restart=False))
    for change in ("page_size", "dtype", "model"):
        n += 1
        writer = pool_of("page_first_direct", False, seed=73 + n)
        reader = {"page_size": pool_of("page_first", False, page_size=8, heads=4),
                  "dtype": pool_of("page_first", False, dtype=torch.float16)
                  }.get(change, pool_of("page_first", False))
        fields = {"model_name": "org/other"} if change == "model" else {}
        extra = {"daemon": daemon, "tenant": f"layouts-{n}"}
        assert_missed(reader, *write_then_read(extra, writer, reader, False, reader=fields,
                                               restart=False))


@pytest.mark.parametrize("change", ["page_size", "dtype", "tp_size", "model"])
@pytest.mark.parametrize("read", ["page_first", "page_first_direct"])
def test_another_page_size_dtype_tp_size_or_model_is_a_miss(ssd_dir, change, read):
    # The same bytes per page each time (page_size 8 with twice the heads; float16 for
    # bfloat16), so that only the page's meaning differs.
    writer = pool_of("page_first", False, seed=74)
    reader = {"page_size": pool_of(read, False, page_size=8, heads=4),
              "dtype": pool_of(read, False, dtype=torch.float16)}.get(change, pool_of(read, False))
    fields = {"tp_size": {"tp_size": 2}, "model": {"model_name": "org/other"}}.get(change, {})
    assert_missed(reader, *write_then_read(embedded(ssd_dir), writer, reader, False,
                                           reader=fields))


def test_through_the_daemon_an_mla_page_survives_a_tp_change_and_an_mha_page_does_not(daemon):
    """MLA pages are the same on every rank: another TP size still hits (and converts). An MHA
    rank of another TP size holds other heads: a miss. (Embedded stores keep one pool per
    worker, so a TP change finds other pools anyway.)"""
    extra = {"daemon": daemon, "tenant": "tp"}
    writer, reader = pool_of("page_first", True, seed=75), pool_of("page_first_direct", True)
    assert_converted(writer, reader, *write_then_read(extra, writer, reader, True,
                                                      reader={"tp_size": 4}, restart=False))
    writer, reader = pool_of("page_first", False, seed=76), pool_of("page_first", False)
    assert_missed(reader, *write_then_read(dict(extra, tenant="tp-mha"), writer, reader, False,
                                           reader={"tp_size": 2}, restart=False))
