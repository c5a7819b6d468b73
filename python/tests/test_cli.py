"""The `flatcake` command line: each benchmark's table and JSON contract, the replay on a small
built-in workload, trace statistics on a shared trace, and the exit statuses and messages of bad
input (2 for a command-line error, 1 for a failure).

The benchmarks run with tiny sizes: these tests check what the commands print and that every
byte they restore is verified, not how fast they are (the figures of this shared machine are
noise at these sizes).
"""

import json
import math
import os
import subprocess

import pytest
from conftest import flatcake_bin

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRACES = os.path.join(REPO, "..", "shared", "traces")


def run(*args, timeout=300):
    return subprocess.run(
        [flatcake_bin(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def last_json(proc):
    """The JSON object on the last line of stdout (the benches' --json contract)."""
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) >= 2, "a table is printed before the JSON line"
    return json.loads(lines[-1])


def test_top_level_help_lists_the_subcommands():
    p = run("--help")
    assert p.returncode == 0
    for sub in ("info", "trace", "replay", "bench"):
        assert sub in p.stdout


def test_bench_restore_json_fields_and_every_byte_verified(tmp_path):
    p = run("bench", "restore", "--bytes", "64M", "--turns", "4", "--reps", "1",
            "--dir", str(tmp_path), "--json")
    j = last_json(p)
    for field in ("raw_seq_gbps", "flat_gbps", "scattered_gbps", "flat_vs_raw",
                  "flat_vs_scattered", "raw_vs_scattered", "first_layer_ms_flat",
                  "first_layer_ms_scattered", "first_layer_ms_scattered_object",
                  "raw_window_gbps", "flat_vs_raw_window", "raw_window_vs_raw",
                  "flat_direct_gbps", "flat_direct_vs_raw", "flat_vs_flat_direct",
                  "flat_direct_vs_scattered"):
        assert isinstance(j[field], float) and j[field] > 0, field
    # 64 MiB of 1 MiB blocks (32 layers x 2 planes x 16 KiB).
    assert j["blocks"] == 64 and j["block_bytes"] == 1 << 20
    assert j["mismatches"] == 0 and j["raw_slots_mismatches"] == 0
    # Every restore is compared byte for byte: flat, scattered, scattered-object, raw-slots and
    # flat-direct (raw and raw-window read into one plain buffer), one repetition each.
    assert j["bytes_verified"] == 5 * 64 * (1 << 20)
    # flat-direct's destination lines up with the file: every read lands in place; flat's 16 KiB
    # block-contiguous slots are staged and copied.
    assert j["reads_in_place_flat_direct"] == j["reads_issued_flat_direct"] > 0
    assert j["reads_in_place_flat"] == 0
    # The layer-by-layer eviction-ordered restore reads once per block per layer; the flat one
    # coalesces into O(segments x layers) reads.
    assert j["reads_issued_scattered"] == 64 * 32
    assert 0 < j["reads_issued_flat"] <= j["segments_x_layers"] * 2
    assert j["flat_vs_raw"] == pytest.approx(j["flat_gbps"] / j["raw_seq_gbps"], rel=1e-9)
    assert j["raw_vs_scattered"] == pytest.approx(
        j["raw_seq_gbps"] / j["scattered_gbps"], rel=1e-9)
    assert "raw / scattered = " in p.stdout
    # raw-window reads raw's bytes with the window (default 128 MiB) as its in-flight budget.
    assert j["window_bytes"] == 128 << 20
    assert j["flat_vs_raw_window"] == pytest.approx(
        j["flat_gbps"] / j["raw_window_gbps"], rel=1e-9)
    assert "flat / raw-window = " in p.stdout


def test_bench_restore_subset_reports_missing_figures_as_null(tmp_path):
    p = run("bench", "restore", "--bytes", "16M", "--turns", "2", "--reps", "1",
            "--variants", "flat", "--dir", str(tmp_path), "--json")
    j = last_json(p)
    assert j["flat_gbps"] > 0
    for field in ("raw_seq_gbps", "flat_vs_raw", "flat_vs_scattered", "raw_vs_scattered",
                  "raw_window_gbps", "flat_vs_raw_window"):
        assert j[field] is None, field
    assert "n/a" in p.stdout


def test_bench_index_checks_every_answer():
    j = last_json(run("bench", "index", "--capacity", "4096", "--seconds", "0.01",
                      "--rounds", "1", "--json"))
    assert j["correct"] is True
    for field in ("flat_lookup_mops", "mutex_map_lookup_mops", "tbb_lookup_mops",
                  "flat_vs_mutex", "flat_vs_tbb"):
        assert j[field] > 0, field
    # Two loads x two thread counts x five structure rows.
    assert len(j["matrix"]) == 20 and all(c["correct"] for c in j["matrix"])


def test_bench_coalesce_json():
    j = last_json(run("bench", "coalesce", "--descs", "20000", "--descs-small", "2000",
                      "--repeat", "1", "--json"))
    assert j["descs"] == 20000
    assert j["plan_ms"] > 0
    # 20000 slices of 16 KiB (1% holes bridged) in reads of at most 4 MiB.
    assert j["bytes_read"] / (4 << 20) <= j["reads_out"] < j["descs"]


def test_bench_vllm_json_and_bad_input(tmp_path):
    """The connector's load path against the store's restore, tiny: the JSON contract and every
    byte verified (the figures of this shared machine are noise at these sizes)."""
    j = last_json(run("bench", "vllm", "--bytes", "8M", "--first-layer-bytes", "8M", "--reps", "1",
                      "--layers", "4", "--ssd-dir", str(tmp_path), "--json"))
    assert j["mismatches"] == 0
    for m in ("dram", "ssd"):
        assert j[m]["bytes"] == 8 << 20
        assert j[m]["connector_gbps"] > 0 and j[m]["store_gbps"] > 0
        assert j[m]["connector_vs_store"] > 0
    assert j["connector_vs_store"] == min(j["dram"]["connector_vs_store"],
                                          j["ssd"]["connector_vs_store"])
    assert 0 < j["first_layer_ms"] <= j["sync_load_ms"]
    assert j["first_layer_bytes"] == 8 << 20 and j["first_layer_medium"] == "ssd"
    assert 0 < j["step_ms_async"] and 0 < j["step_ms_sync"] and j["async_load_ms"] > 0
    # The GPU-path variant (--device cuda on a GPU) on the fake device: the connector and the
    # store's side both through GpuPath, every byte compared. The pool of the run above is
    # reused: the bench's keys are its own.
    f = last_json(run("bench", "vllm", "--bytes", "8M", "--first-layer-bytes", "8M", "--reps",
                      "1", "--layers", "4", "--ssd-dir", str(tmp_path), "--device", "fake",
                      "--json"))
    assert f["mismatches"] == 0 and f["device"] == "fake" and f["gpu_path"]["mode"] == "fake"
    assert f["dram"]["connector_vs_store"] > 0 and f["ssd"]["connector_vs_store"] > 0
    bad = run("bench", "vllm", "--media", "tape")
    assert bad.returncode == 2 and "--media" in bad.stderr
    assert run("bench", "vllm", "--reps", "0").returncode == 2
    assert "connector_vs_store" in run("bench", "vllm", "--help").stdout


def test_bench_sched_dram_requests_do_not_wait_behind_ssd_ones():
    j = last_json(run("bench", "sched", "--requests", "300", "--virtual", "--json"))
    assert j["requests"] == 300
    assert 0 < j["mas_dram_p99_ms"] < j["fcfs_dram_p99_ms"]


def test_bench_sched_serves_its_stream_through_a_real_store():
    # Small: the contract (a real store's restores, every request served, the JSON fields), not
    # the latency ratio, which `bench sched` itself prints and which a timed test cannot check.
    j = last_json(run("bench", "sched", "--requests", "120", "--rate", "1000", "--ssd-max-mib", "2",
                      "--json"))
    assert j["service"] == "store" and j["requests"] == 120
    for policy in ("mas", "fcfs"):
        for field in ("dram_p50_ms", "dram_p99_ms", "ssd_p99_ms", "makespan_ms",
                      "peak_inflight_mib", "ssd_read_gbps"):
            assert j[f"{policy}_{field}"] >= 0, field
        assert j[f"{policy}_dram_p99_ms"] > 0
    assert j["fcfs_vs_mas_dram_p99"] > 0


def test_bench_recover_rebuilds_every_block_from_a_fraction_of_the_pool(tmp_path):
    p = run("bench", "recover", "--blocks", "20000", "--dir", str(tmp_path), "--json")
    j = last_json(p)
    assert j["bench"] == "recover"
    assert j["blocks"] == j["blocks_written"] >= 20000
    assert j["mismatches"] == 0 and j["misses"] == 0 and j["skipped_records"] == 0
    assert 0 < j["bytes_read_fraction"] < 0.01  # the journal, not the data
    assert j["recovery_s"] > 0


def test_info_json_reports_a_recovered_pool(tmp_path):
    first = run("info", "--ssd-dir", str(tmp_path), "--ssd-bytes", "64M", "--ssd-file-bytes",
                "16M", "--dram-bytes", "16M", "--json")
    assert first.returncode == 0, first.stderr
    j = json.loads(first.stdout.strip().splitlines()[-1])
    assert j["ssd_durable"] and not j["recovered"] and j["sync"] == "interval"
    again = run("info", "--ssd-dir", str(tmp_path), "--ssd-bytes", "64M", "--ssd-file-bytes",
                "16M", "--dram-bytes", "16M", "--json")
    assert json.loads(again.stdout.strip().splitlines()[-1])["recovered"]
    # Another geometry is refused as a bad option (exit 2), naming the difference and the way out.
    other = run("info", "--ssd-dir", str(tmp_path), "--ssd-bytes", "64M", "--ssd-file-bytes",
                "32M", "--dram-bytes", "16M")
    assert other.returncode == 2
    assert "ssd_file_bytes 16777216" in other.stderr and "--wipe" in other.stderr
    wiped = run("info", "--ssd-dir", str(tmp_path), "--ssd-bytes", "64M", "--ssd-file-bytes",
                "32M", "--dram-bytes", "16M", "--wipe", "--json")
    assert wiped.returncode == 0, wiped.stderr


def test_bench_paths_json_rows_and_every_get_verified(tmp_path):
    # Blocks of 8 layers x 2 planes: 64 KiB (4 KiB slices) and 1 MiB (64 KiB slices).
    p = run("bench", "paths", "--bytes", "1M", "--slices", "4K,64K", "--layers", "8",
            "--batch-bytes", "512K", "--reps", "1", "--dir", str(tmp_path), "--json")
    j = last_json(p)
    rows = j["rows"]
    paths = ("dram_put", "dram_get", "ssd_put", "ssd_get")
    kinds = ("block_contiguous", "plane_pointers", "slice_pointers")
    # One row per path, slice size and buffer kind.
    assert sorted((r["path"], r["slice_bytes"], r["buffer_kind"]) for r in rows) == sorted(
        (p_, s, k) for p_ in paths for s in (4096, 65536) for k in kinds)
    for r in rows:
        for field in ("store_gbps", "limit_gbps", "ratio"):
            assert isinstance(r[field], float) and math.isfinite(r[field]) and r[field] > 0, field
        # One repetition: the ratio is that repetition's store / limit.
        assert r["ratio"] == pytest.approx(r["store_gbps"] / r["limit_gbps"], rel=1e-9)
        assert r["limit"] == {"dram_put": "memcpy", "dram_get": "memcpy",
                              "ssd_put": "o_direct_write", "ssd_get": "o_direct_read"}[r["path"]]
    assert j["mismatches"] == 0 and j["misses"] == 0
    # Every get (DRAM and SSD, 2 slice sizes x 3 kinds) compared byte for byte: 1 MiB each.
    assert j["bytes_verified"] == 2 * 2 * 3 * (1 << 20)
    assert "limit GB/s" in p.stdout


def test_replay_small_workload_loses_no_bytes():
    p = run("replay", "--workload", "agentic", "--requests", "40", "--scale", "0.05",
            "--qps", "40", "--json", "--no-progress")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.strip().splitlines()]
    assert [r["policy"] for r in rows] == ["flat", "tiered", "dram-only"]
    for r in rows:
        assert r["requests"] == 40
        assert r["mismatches"] == 0 and r["errors"] == 0
        assert 0 < r["hit_rate_pct"] <= 100


def test_trace_stats_on_the_shared_conversation_trace():
    path = os.path.join(TRACES, "mooncake_conversation_trace.jsonl")
    p = run("trace", "stats", path, "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout.strip().splitlines()[-1])
    assert j["requests"] == 12031  # the file's line count, as its README says


@pytest.mark.parametrize(
    "args,message",
    [
        (["bench", "restore", "--layers", "0"], "--layers"),
        (["bench", "restore", "--variants", "flat,bogus"], "bogus"),
        (["bench", "index", "--batch", "0"], "--batch"),
        (["bench", "coalesce", "--descs", "0"], "--descs"),
        (["bench", "sched", "--consumers", "0"], "--consumers"),
        (["bench", "paths", "--kinds", "block_contiguous,bogus"], "--kinds"),
        (["bench", "paths", "--slices", "0"], "--slices"),
        (["bench", "restore", "--no-such-flag"], "--no-such-flag"),
        (["replay", "--policy", "lru"], "lru"),
        (["replay", "--workload", "chat"], "chat"),
        (["replay", "--trace", "x.jsonl", "--format", "csv"], "csv"),
        (["replay", "--qps", "-1"], "--qps"),
        (["info", "--io-engine", "bogus"], "bogus"),
        (["trace", "gen", "--kind", "bogus"], "bogus"),
    ],
)
def test_command_line_errors_exit_2_and_name_the_flag(args, message):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert message in p.stderr


def test_malformed_trace_exits_1_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                   '{"timestamp": oops\n')
    p = run("trace", "stats", str(bad))
    assert p.returncode == 1
    assert f"{bad}:2:" in p.stderr


def test_missing_trace_exits_1_and_says_so(tmp_path):
    p = run("trace", "stats", str(tmp_path / "absent.jsonl"))
    assert p.returncode == 1
    assert "No such file" in p.stderr


# fsck: a pool of three sessions of four SSD blocks each, written through the Python module
# (session s0's segment is the first extent of file 0), then damaged by hand.
FSCK_CONFIG = {"ssd_bytes": "16MiB", "ssd_file_bytes": "4MiB", "dram_bytes": "16MiB",
               "sync": "none"}


def write_fsck_pool(ssd_dir):
    import flatcake
    import torch

    layout = flatcake.KvLayout(num_layers=4, num_planes=2, slice_bytes=8192)
    data = {}
    with flatcake.open({"ssd_dirs": [ssd_dir], **FSCK_CONFIG}) as store:
        for s in range(3):
            keys = [f"s{s}-{b}" for b in range(4)]
            g = torch.Generator().manual_seed(s)
            blob = torch.randint(0, 256, (4 * layout.block_bytes,), dtype=torch.uint8, generator=g)
            assert store.put(keys, layout, blob, force_medium="ssd", session=f"s{s}").written == 4
            data[s] = (keys, blob)
    return layout, data


def fsck_json(*args):
    p = run("fsck", "--json", *args)
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1]), p


def test_fsck_names_an_overwritten_block_and_repair_drops_its_segment(ssd_dir):
    import flatcake
    import torch

    layout, data = write_fsck_pool(ssd_dir)
    rc, j, p = fsck_json("--deep", ssd_dir)
    assert rc == 0, p.stderr
    assert j["clean"] and j["damaged"] == []
    assert (j["files"], j["records"], j["skipped_records"]) == (4, 4, 0)
    assert (j["live_segments"], j["live_blocks"], j["blocks_checked"]) == (3, 12, 12)
    text = run("fsck", ssd_dir)
    assert text.returncode == 0 and "result      : clean" in text.stdout

    # Bytes of s0's block 1, slice (layer 0, plane 1), overwritten past the 4 KiB superblock.
    run_bytes = 4 * 8192
    pool0 = os.path.join(ssd_dir, "flatcake-pool-0.dat")
    with open(pool0, "r+b") as f:
        f.seek(4096 + run_bytes + 8192 + 64)
        f.write(b"overwritten by hand")
    assert run("fsck", ssd_dir).returncode == 0  # the journal and extents are intact
    rc, j, _ = fsck_json("--deep", ssd_dir)
    assert rc == 1 and not j["clean"] and j["bad_blocks"] == 1
    (d,) = j["damaged"]
    assert (d["what"], d["file"], d["offset"]) == ("block", pool0, 4096 + 8192)
    assert len(d["key"]) == 32 and d["key"] in d["detail"] and "session 's0'" in d["detail"]
    text = run("fsck", "--deep", ssd_dir)
    assert text.returncode == 1 and "DAMAGED" in text.stdout and d["key"] in text.stdout

    rc, j, _ = fsck_json("--deep", "--repair", ssd_dir)
    assert rc == 0 and j["repaired"] and len(j["dropped"]) == 1
    rc, j, _ = fsck_json("--deep", ssd_dir)
    assert rc == 0 and j["clean"] and j["live_segments"] == 2
    with flatcake.open({"ssd_dirs": [ssd_dir], **FSCK_CONFIG}) as store:
        assert store.info()["skipped_records"] == 0
        for s, (keys, blob) in data.items():
            out = torch.zeros_like(blob)
            got = store.get(keys, layout, out)
            if s == 0:
                assert got.hits == 0
            else:
                assert got.hits == 4 and torch.equal(out, blob)


def test_fsck_names_a_damaged_journal_record_and_repairs_it(ssd_dir):
    write_fsck_pool(ssd_dir)
    journal = os.path.join(ssd_dir, "flatcake-journal.log")
    with open(journal, "r+b") as f:
        f.seek(56 + 32 + 20)  # the payload of the first commit record, after the 56-byte header
        f.write(b"\xff\xff")
    rc, j, _ = fsck_json(ssd_dir)
    assert rc == 1 and j["skipped_records"] == 1
    (d,) = j["damaged"]
    assert (d["what"], d["file"], d["offset"]) == ("record", journal, 56)
    assert "segment record" in d["detail"]
    rc, j, _ = fsck_json("--repair", ssd_dir)
    assert rc == 0 and j["repaired"]
    rc, j, _ = fsck_json("--deep", ssd_dir)
    assert rc == 0 and j["clean"] and j["live_blocks"] == 8


def test_fsck_refuses_a_pool_in_use_and_what_is_not_a_pool(ssd_dir, tmp_path):
    import flatcake

    write_fsck_pool(ssd_dir)
    with flatcake.open({"ssd_dirs": [ssd_dir], **FSCK_CONFIG}):
        p = run("fsck", ssd_dir)
        assert p.returncode == 2 and "in use" in p.stderr, p.stderr
    assert run("fsck", ssd_dir).returncode == 0
    p = run("fsck", str(tmp_path))
    assert p.returncode == 2 and "not a FlatCake SSD pool" in p.stderr
    assert run("fsck", str(tmp_path / "absent")).returncode == 2
    assert run("fsck").returncode == 2
    h = run("fsck", "--help")
    assert h.returncode == 0
    for flag in ("--deep", "--repair", "--json"):
        assert flag in h.stdout


def test_bench_daemon_json_fields_and_every_byte_verified(tmp_path):
    p = run("bench", "daemon", "--bytes", "4M", "--layers", "4", "--reps", "1", "--clients", "2",
            "--keys", "16", "--duration-ms", "100", "--ssd-dir", str(tmp_path), "--json")
    j = last_json(p)
    for field in ("daemon_vs_embedded", "embedded_gbps", "daemon_gbps", "lookup_p50_us",
                  "lookup_p99_us"):
        assert isinstance(j[field], float) and j[field] > 0, field
    assert j["clients"] == 2 and j["keys_per_lookup"] == 16
    assert j["mismatches"] == 0 and j["misses"] == 0
