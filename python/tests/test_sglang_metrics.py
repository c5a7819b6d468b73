"""SGLang's storage metrics: get_stats() returns SGLang's own StorageMetrics class (which moved to
sglang.srt.observability.metrics_collector in February 2026), and per-call figures stay bounded
when SGLang never asks for them."""

import os
import subprocess
import sys
import textwrap

import flatcake.sglang as fs
from conftest import flatcake_bin
from host_pool import EmulatedHostPool
from sglang_util import load_backend, page_hashes

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "sglang_standin")


def pool(seed):
    p = EmulatedHostPool(mla=False, layout="layer_first", layer_num=4, page_size=16, page_num=32,
                         heads=2, head_dim=64)
    p.fill_random(seed)
    return p


def store_config(ssd_dir):
    return {"ssd_dirs": [ssd_dir], "ssd_bytes": "64MiB", "ssd_file_bytes": "16MiB",
            "dram_bytes": "32MiB"}


def test_get_stats_returns_sglangs_class_from_its_current_module(ssd_dir):
    """Against the stand-in SGLang (commit 8905cbd: only the observability module exists), the
    collector's isinstance assertion holds, as it does with --enable-metrics."""
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{STANDIN!r}, {HERE!r}]
        from sglang.srt.observability import metrics_collector as mc
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig
        import flatcake.sglang as fs
        from host_pool import EmulatedHostPool
        from sglang_util import load_backend, page_hashes
        assert fs.HiCacheStorage is HiCacheStorage, "flatcake.sglang did not bind the stand-in"
        assert "dp_rank" not in HiCacheStorageConfig.__dataclass_fields__
        p = EmulatedHostPool(mla=False, layout="layer_first", layer_num=4, page_size=16,
                             page_num=32, heads=2, head_dim=64)
        p.fill_random(3)
        b = load_backend({store_config(ssd_dir)!r}, is_mla_model=False)
        b.register_mem_pool_host(p)
        keys = page_hashes(4, seed=9)
        assert all(b.batch_set_v1(keys, p.page_indices(range(4))))
        assert all(b.batch_get_v1(keys, p.page_indices(range(4, 8))))
        m = b.get_stats()
        assert type(m) is mc.StorageMetrics, type(m)
        assert mc.log_storage_metrics(m) == 4  # pages and GB/s of one backup and one prefetch
        assert mc.log_storage_metrics(b.get_stats()) == 0
        b.close()
        print("ok")
    """)
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith("ok")


def test_metrics_off_records_nothing_and_on_is_bounded(ssd_dir):
    p = pool(5)
    keys = page_hashes(1, seed=4)
    off = load_backend(store_config(ssd_dir), is_mla_model=False, enable_storage_metrics=False)
    off.register_mem_pool_host(p)
    assert all(off.batch_set_v1(keys, p.page_indices([0])))
    for _ in range(3000):  # SGLang with metrics off never calls get_stats()
        off.batch_get_v1(keys, p.page_indices([1]))
    m = off.get_stats()
    assert m.prefetch_pgs == [] and m.prefetch_bandwidth == [] and m.backup_pgs == []
    off.close()

    on = load_backend(store_config(ssd_dir), is_mla_model=False, enable_storage_metrics=True)
    on.register_mem_pool_host(p)
    for _ in range(fs.METRICS_MAX_ENTRIES + 500):
        on.batch_get_v1(keys, p.page_indices([1]))
    m = on.get_stats()
    assert len(m.prefetch_pgs) == fs.METRICS_MAX_ENTRIES  # the newest, never more
    assert len(m.prefetch_bandwidth) <= fs.METRICS_MAX_ENTRIES
    assert on.get_stats().prefetch_pgs == []
    on.close()


def test_documented_sglang_command_lines_use_only_real_flags():
    """Every --flag of the README's and docs/sglang.md's SGLang command lines is a ServerArgs
    field of SGLang 8905cbd (the stand-in lists them), with a valid choice where it has choices;
    every --flag of their `flatcake serve` lines is one `flatcake serve --help` lists."""
    import re
    sys.path.insert(0, STANDIN)
    try:
        from sglang.srt import server_args
    finally:
        sys.path.remove(STANDIN)
    serve_help = subprocess.run([flatcake_bin(), "serve", "--help"], capture_output=True,
                                text=True, timeout=60).stdout
    root = os.path.dirname(os.path.dirname(HERE))
    seen = served = 0
    for doc in ("README.md", os.path.join("docs", "sglang.md")):
        text = open(os.path.join(root, doc)).read()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            # Commands: lines joined where they end in a backslash.
            for command in block.replace("\\\n", " ").split("\n"):
                if "flatcake serve" in command:
                    for flag in re.findall(r"--([a-z0-9-]+)", command.split("flatcake serve")[1]):
                        assert f"--{flag}" in serve_help, f"{doc}: flatcake serve --{flag}"
                        served += 1
                if "sglang.launch_server" not in command:
                    continue
                command = command.split("sglang.launch_server", 1)[1]
                for flag, value in re.findall(r"--([a-z0-9-]+)(?:[ =]([^\s\\]+))?", command):
                    field = flag.replace("-", "_")
                    assert field in server_args.FIELDS, f"{doc}: --{flag} is not an SGLang flag"
                    choices = server_args.FIELDS[field]
                    if choices:
                        assert value in choices, f"{doc}: --{flag} {value} not in {choices}"
                    seen += 1
    assert seen >= 14 and served >= 4
