"""flatcake.connect and the SGLang backend in daemon mode, against a real `flatcake serve`.

The deployment docs/sglang.md documents: one daemon per node, every TP worker process a client.
SGLang (commit 8905cbd4, python/sglang/srt/managers/cache_controller.py, `backup_skip`) backs up
an MLA model's pages from TP rank 0 only and every rank loads them; here rank 0 and rank 1 are
separate processes, as SGLang's TP workers are, so rank 1 can only hit through the daemon.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import flatcake

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(not getattr(flatcake._core, "has_daemon_client", False),
                                reason="built without the daemon")


def test_connect_has_the_embedded_methods_and_keeps_tenants_apart(daemon):
    layout = flatcake.KvLayout(4, 2, 4096)
    keys = [f"page-{i}" for i in range(6)]
    src = [torch.randint(0, 256, (layout.block_bytes,), dtype=torch.uint8) for _ in keys]
    with flatcake.connect("unix://" + daemon, tenant="alpha") as a, \
            flatcake.connect(daemon, tenant="beta") as b:
        put = a.put(keys, layout, src)
        assert put.written == len(keys)
        assert a.exists(keys) == len(keys)
        assert a.lookup(keys).leading_hits == len(keys)
        dst = [torch.zeros(layout.block_bytes, dtype=torch.uint8) for _ in keys]
        got = a.get(keys, layout, dst)
        assert got.hits == len(keys)
        assert all(torch.equal(x, y) for x, y in zip(src, dst))
        h = a.restore(keys[:3], layout, dst[:3])
        assert h.wait(30)
        assert h.result.hits == 3
        assert a.stats()["puts"] >= 1
        # Another tenant never sees alpha's blocks, even under the same key names.
        assert b.exists(keys) == 0
        assert b.put(keys[:2], layout, src[:2]).written == 2
    with pytest.raises(flatcake.Error):
        flatcake.connect(daemon + ".missing", tenant="alpha", timeout=0.5)
    with pytest.raises((flatcake.Error, ValueError)):
        flatcake.connect(daemon, tenant="no spaces allowed")


# One TP rank of an SGLang server: its own process, its own emulated host pool, the backend
# loaded as SGLang's dynamic loader does, in daemon mode.
RANK = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {here!r})
    sys.path.insert(0, {standin!r})
    from host_pool import EmulatedHostPool
    from sglang_util import load_backend, page_hashes
    rank, mla, op = int(sys.argv[1]), sys.argv[2] == "mla", sys.argv[3]
    pool = EmulatedHostPool(mla=mla, layout="page_first_direct", layer_num=4, page_size=16,
                            page_num=16, heads=2, head_dim=64)
    b = load_backend({{"daemon": {sock!r}}}, is_mla_model=mla, tp_rank=rank, tp_size=2)
    b.register_mem_pool_host(pool)
    keys = page_hashes(5, seed=11)
    out = {{}}
    if op == "write":
        pool.fill_random(100 + rank)  # each rank's heads differ (MHA); MLA pages are identical
        if mla and rank != 0:
            pass  # SGLang's backup_skip: only rank 0 backs up MLA pages
        else:
            out["set"] = b.batch_set_v1(keys, pool.page_indices([1, 2, 3, 4, 5]))
        out["pages"] = [pool.page_bytes(p).hex() for p in [1, 2, 3, 4, 5]]
    else:
        out["exists"] = b.batch_exists(keys)
        out["got"] = b.batch_get_v1(keys, pool.page_indices([6, 7, 8, 9, 10]))
        out["pages"] = [pool.page_bytes(p).hex() for p in [6, 7, 8, 9, 10]]
    b.close()
    print(json.dumps(out))
""")


def run_rank(daemon, tmp_path, rank, model, op):
    script = tmp_path / "rank.py"
    script.write_text(RANK.format(here=HERE, standin=os.path.join(HERE, "sglang_standin"),
                                  sock=daemon))
    env = dict(os.environ)
    res = subprocess.run([sys.executable, str(script), str(rank), model, op], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    import json
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_mla_rank1_hits_rank0_pages_through_the_daemon(daemon, tmp_path):
    w = run_rank(daemon, tmp_path, 0, "mla", "write")
    assert w["set"] == [True] * 5
    r = run_rank(daemon, tmp_path, 1, "mla", "read")  # another process: only the daemon shares
    assert r["exists"] == 5
    assert r["got"] == [True] * 5
    assert r["pages"] == w["pages"]  # every byte rank 0 wrote


def test_mha_ranks_keep_their_own_heads_through_the_daemon(daemon, tmp_path):
    w0 = run_rank(daemon, tmp_path, 0, "mha", "write")
    assert w0["set"] == [True] * 5
    r1 = run_rank(daemon, tmp_path, 1, "mha", "read")
    assert r1["exists"] == 0  # rank 1's heads were never written
    w1 = run_rank(daemon, tmp_path, 1, "mha", "write")
    r1 = run_rank(daemon, tmp_path, 1, "mha", "read")
    assert r1["got"] == [True] * 5 and r1["pages"] == w1["pages"]
    r0 = run_rank(daemon, tmp_path, 0, "mha", "read")
    assert r0["pages"] == w0["pages"]


def test_daemon_mode_refuses_store_options(daemon):
    from sglang_util import load_backend
    with pytest.raises(ValueError, match="daemon"):
        load_backend({"daemon": daemon, "dram_bytes": "1GiB"}, is_mla_model=True)
    with pytest.raises(ValueError, match="daemon"):
        load_backend({"tenant": "x"}, is_mla_model=True)
