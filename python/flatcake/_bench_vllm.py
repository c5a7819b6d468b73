"""`flatcake bench vllm`: the vLLM connector's load path against the store's own restore.

Run by the `flatcake` tool (``flatcake bench vllm [--json] ...`` executes
``python -m flatcake._bench_vllm``) or directly. It builds a FlatCakeConnector worker as vLLM
does (its configuration duck-typed, so vLLM need not be installed), registers paged KV caches in
vLLM main's layout (one buffer, a strided ``[num_blocks, heads, block_size, K|V]`` view per layer,
LBNHC), writes N requests' blocks to the store on one medium, and then, in alternating rounds:

- connector: the requests' loads as one step's metadata, ``start_load_kv`` then
  ``wait_for_layer_load`` for every layer in order, as vLLM's forward does;
- store: ``Store.restore`` of the same blocks into the same memory, every layer waited for.

Every restored byte is compared with what was written (``mismatches``). Reported per medium:
GB/s of each and ``connector_vs_store`` (medians; the target is at least 0.9), and, for one
request of ``--first-layer-bytes``, the time to its first layer through the connector
(``first_layer_ms``), and the step time a synchronous SSD load holds against the one an
asynchronous load holds (its ``start_load_kv``; the load then finishes off the step).

``--device cuda`` puts the paged KV caches on the GPU: the connector then restores through the
store's GPU path (``GpuPath``) and the store's side is ``GpuPath.restore`` of the same blocks into
the same pages; every layer the connector reports is read by a kernel on a compute stream right
after ``wait_for_layer_load`` (which only makes that stream wait), and its sum compared with the
written bytes' (``layer_mismatches``). ``--device fake`` runs the same GPU-path code on the
store's fake device (CPU tensors), as the tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Dict, List, Tuple

import torch

import flatcake
from flatcake import vllm as fv

GiB = 1 << 30
MiB = 1 << 20


def _parse(argv: List[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="flatcake bench vllm",
        description="The vLLM connector's loads (start_load_kv + wait_for_layer_load) against "
                    "the store's own restore of the same blocks into the same memory, per "
                    "medium (connector_vs_store, target >= 0.9); the time to first layer of one "
                    "large SSD load (first_layer_ms) and the step time it holds synchronously "
                    "against asynchronously (step_ms_sync, step_ms_async); every byte verified "
                    "(mismatches; exit 1 on any).")
    ap.add_argument("--bytes", type=flatcake.parse_size, default=256 * MiB,
                    help="bytes loaded per round, over all requests (default 256MiB)")
    ap.add_argument("--requests", type=int, default=8, help="requests per round (default 8)")
    ap.add_argument("--layers", type=int, default=32, help="attention layers (default 32)")
    ap.add_argument("--heads", type=int, default=8, help="KV heads (default 8)")
    ap.add_argument("--head-size", type=int, default=128, help="head size (default 128)")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    ap.add_argument("--reps", type=int, default=5, help="rounds of each (default 5)")
    ap.add_argument("--media", default="dram,ssd", help="dram, ssd or both (default dram,ssd)")
    ap.add_argument("--first-layer-bytes", type=flatcake.parse_size, default=2 * GiB,
                    help="the one request of the first-layer and step-time runs (default 2GiB)")
    ap.add_argument("--ssd-dir", default="", help="pool directory (default: a temporary one)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "fake"),
                    help="where the KV caches are: cpu (in place, default), cuda (the GPU path; "
                         "needs torch with CUDA), fake (the GPU path on the fake device)")
    ap.add_argument("--json", action="store_true",
                    help="after the table, one JSON object on the last line")
    a = ap.parse_args(argv)
    media = [m for m in a.media.split(",") if m]
    if not media or any(m not in ("dram", "ssd") for m in media):
        ap.error(f"--media takes dram, ssd or both, not {a.media!r}")
    if min(a.requests, a.layers, a.heads, a.head_size, a.block_size, a.reps) < 1:
        ap.error("--requests, --layers, --heads, --head-size, --block-size, --reps must be >= 1")
    a.media = media
    a.run_id = f"{os.getpid()}-{time.monotonic_ns()}"  # keys of their own in a reused --ssd-dir
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this torch has no usable CUDA device")
    return a


class Bench:
    """One connector worker over packed KV caches, and the store it opened."""

    def __init__(self, a: argparse.Namespace, num_blocks: int, ssd_dir: str):
        self.a = a
        dtype = torch.float16
        cell = 2 * a.head_size  # K and V packed: vLLM's content dimension
        self.device = torch.device("cuda" if a.device == "cuda" else "cpu")
        self.buffer = torch.zeros((a.layers, num_blocks, a.block_size, a.heads, cell), dtype=dtype,
                                  device=self.device)
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(a.layers)]
        views = {n: self.buffer[i].permute(0, 2, 1, 3) for i, n in enumerate(self.names)}
        block_bytes = a.layers * a.block_size * a.heads * cell * 2
        store_bytes = num_blocks * block_bytes + 64 * MiB
        extra = {"dram_bytes": store_bytes, "ssd_dirs": [ssd_dir], "ssd_bytes": store_bytes,
                 "ssd_file_bytes": 1 * GiB if store_bytes > GiB else 64 * MiB,
                 "gpu_path": {"cpu": "none", "cuda": "auto", "fake": "fake"}[a.device]}
        config = SimpleNamespace(
            model_config=SimpleNamespace(model="bench/model", use_mla=False),
            cache_config=SimpleNamespace(block_size=a.block_size),
            parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1,
                                            data_parallel_size=1, rank=0),
            kv_transfer_config=SimpleNamespace(kv_role="kv_both", kv_connector_extra_config=extra,
                                               kv_load_failure_policy="recompute",
                                               is_kv_producer=True, is_kv_consumer=True))
        self.conn = fv.FlatCakeConnector(config, fv.KVConnectorRole.WORKER, None)
        self.conn.register_kv_caches(views)
        self.store = self.conn._store
        self.layout = flatcake.KvLayout(a.layers, 1, a.block_size * a.heads * cell * 2)
        self.block_bytes = block_bytes
        self.gpu = self.conn._gpu  # the store's GPU path (cuda, fake), or None
        if a.device != "cpu" and self.gpu is None:
            raise RuntimeError(f"--device {a.device}: the store has no GPU path here")
        self.compute = torch.cuda.Stream() if a.device == "cuda" else None
        self.layer_sums: Dict[int, torch.Tensor] = {}  # block -> the written bytes' sum per layer
        self.layer_mismatches = 0

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def block_view(self, block: int) -> torch.Tensor:
        """Block ``block`` of every layer: [layers, bytes of one layer's block]."""
        return self.buffer[:, block].reshape(self.a.layers, -1).view(torch.uint8)

    def pointers(self, blocks: List[int]) -> List[int]:
        """slice_pointers of the blocks, computed from the tensor (not the connector's)."""
        return [self.buffer[l, b].data_ptr() for b in blocks for l in range(self.a.layers)]

    def fill(self, blocks: List[int], seed: int) -> List[torch.Tensor]:
        """Random bytes for the blocks, in host memory (what put writes) and in the caches."""
        g = torch.Generator().manual_seed(seed)
        want = []
        for b in blocks:
            src = torch.randint(0, 256, (self.a.layers, self.layout.slice_bytes),
                                dtype=torch.uint8, generator=g)
            self.block_view(b).copy_(src)
            want.append(src)
            self.layer_sums[b] = src.sum(dim=1, dtype=torch.int64).to(self.device)
        self.sync()
        return want

    def clear(self, blocks: List[int]) -> None:
        for b in blocks:
            self.block_view(b).zero_()
        self.sync()

    def mismatches(self, blocks: List[int], want: List[torch.Tensor]) -> int:
        self.sync()
        return sum(int((self.block_view(b).cpu() != w).any()) for b, w in zip(blocks, want))

    def stored(self, keys: List[str]) -> List[str]:
        """The store's keys: the connector adds its worker suffix to the scheduler's."""
        return [k + self.conn._suffix for k in keys]

    def put(self, keys: List[str], blocks: List[int], want: List[torch.Tensor],
            medium: str) -> None:
        """Writes the blocks' bytes from host memory (``want``, fill's)."""
        keys = self.stored(keys)
        ptrs = [w[l].data_ptr() for w in want for l in range(self.a.layers)]
        r = self.store.put(keys, self.layout, ptrs, kind="slice_pointers", session=keys[0],
                           force_medium=medium)
        if r.written != len(keys):
            raise RuntimeError(f"put wrote {r.written} of {len(keys)} blocks")

    def connector_load(self, runs: List[Tuple[List[str], List[int]]], asynchronous=False
                       ) -> Dict[str, float]:
        meta = fv.FlatCakeConnectorMetadata()
        meta.loads = [fv._BlockRun(f"r{i}", keys, blocks, asynchronous=asynchronous)
                      for i, (keys, blocks) in enumerate(runs)]
        self.conn.bind_connector_metadata(meta)
        t0 = time.perf_counter()
        self.conn.start_load_kv(None)
        first = None
        if not asynchronous:
            first = self._wait_layers(runs)
        errors = self.conn.get_block_ids_with_load_errors()
        step = time.perf_counter()
        self.conn.clear_connector_metadata()
        if asynchronous:
            pending = {f"r{i}" for i in range(len(runs))}
            while pending:
                _, done = self.conn.get_finished(set())
                pending -= done or set()
                errors |= self.conn.get_block_ids_with_load_errors()
        self.sync()
        end = time.perf_counter()
        if errors:
            raise RuntimeError(f"the connector did not deliver blocks {sorted(errors)[:8]}")
        return {"total_s": end - t0, "step_s": step - t0,
                "first_layer_s": (first or end) - t0}

    def _wait_layers(self, runs: List[Tuple[List[str], List[int]]]) -> float:
        """wait_for_layer_load of every layer in order, as vLLM's forward does; on CUDA on a
        compute stream, whose kernel then sums the layer's bytes of every block (checked against
        the written bytes' once the stream is done). When the first layer was usable."""
        if self.compute is None:
            first = None
            for name in self.names:
                self.conn.wait_for_layer_load(name)
                if first is None:
                    first = time.perf_counter()
            return first
        blocks = torch.tensor([b for _, bs in runs for b in bs], device=self.device)
        sums = []
        first = None
        with torch.cuda.stream(self.compute):
            for l, name in enumerate(self.names):
                self.conn.wait_for_layer_load(name)  # the stream waits; the host does not
                rows = self.buffer[l].index_select(0, blocks).reshape(len(blocks), -1)
                sums.append(rows.view(torch.uint8).sum(dim=1, dtype=torch.int64))
                if first is None:
                    self.compute.synchronize()
                    first = time.perf_counter()
        self.compute.synchronize()
        want = torch.stack([self.layer_sums[int(b)] for b in blocks.tolist()], dim=1)
        self.layer_mismatches += int((torch.stack(sums) != want).any(dim=1).sum())
        return first

    def store_load(self, runs: List[Tuple[List[str], List[int]]]) -> float:
        if self.gpu is not None:
            return self._store_gpu_load(runs)
        t0 = time.perf_counter()
        handles = [self.store.restore(self.stored(keys), self.layout, self.pointers(blocks),
                                      kind="slice_pointers") for keys, blocks in runs]
        for h in handles:
            for layer in range(self.a.layers):
                h.wait_layer(layer)
            h.wait()
            if h.result.hits != len(h.result.found):
                raise RuntimeError("the store did not deliver every block")
        return time.perf_counter() - t0

    def _store_gpu_load(self, runs: List[Tuple[List[str], List[int]]]) -> float:
        """The store's own GPU path restoring the same blocks into the same pages."""
        t0 = time.perf_counter()
        k_buffers = [self.buffer[l] for l in range(self.a.layers)]
        handles = [self.gpu.restore(self.stored(keys), self.layout, k_buffers, pages=blocks)
                   for keys, blocks in runs]
        for h in handles:
            for layer in range(self.a.layers):
                h.wait_layer(layer)
            r = h.wait()
            if r.hits != len(r.found):
                raise RuntimeError("the store's GPU path did not deliver every block")
        self.sync()
        return time.perf_counter() - t0


def _medium_round(bench: Bench, medium: str, a: argparse.Namespace, first_block: int,
                  per_request: int, out: Dict) -> int:
    blocks = list(range(first_block, first_block + per_request * a.requests))
    keys = [f"bench/{a.run_id}/{medium}/{b}" for b in blocks]
    want = bench.fill(blocks, seed=hash(medium) & 0xFFFF)
    bench.put(keys, blocks, want, medium)
    runs = [(keys[i * per_request:(i + 1) * per_request],
             blocks[i * per_request:(i + 1) * per_request]) for i in range(a.requests)]
    nbytes = len(blocks) * bench.block_bytes
    conn_s, store_s, bad = [], [], 0
    for _ in range(a.reps):
        bench.clear(blocks)
        conn_s.append(bench.connector_load(runs)["total_s"])
        bad += bench.mismatches(blocks, want)
        bench.clear(blocks)
        store_s.append(bench.store_load(runs))
        bad += bench.mismatches(blocks, want)
    c, s = statistics.median(conn_s), statistics.median(store_s)
    out[medium] = {"bytes": nbytes, "connector_gbps": round(nbytes / c / 1e9, 3),
                   "store_gbps": round(nbytes / s / 1e9, 3),
                   "connector_vs_store": round(s / c, 3)}
    return bad


def run(a: argparse.Namespace, ssd_dir: str) -> Dict:
    layer_block = a.block_size * a.heads * 2 * a.head_size * 2
    block_bytes = a.layers * layer_block
    per_request = max(1, a.bytes // (a.requests * block_bytes))
    big = max(1, a.first_layer_bytes // block_bytes)
    num_blocks = per_request * a.requests * len(a.media) + big
    bench = Bench(a, num_blocks, ssd_dir)
    out: Dict = {"layout": str(bench.layout), "requests": a.requests, "reps": a.reps,
                 "blocks_per_request": per_request, "device": a.device,
                 "path": {"cpu": "in place (CPU tensors)",
                          "cuda": f"the store's GPU path ({bench.gpu.info().get('mode')})"
                          if bench.gpu is not None else "",
                          "fake": "the store's GPU path on the fake device"}[a.device]}
    mismatches = 0
    first = 0
    for medium in a.media:
        mismatches += _medium_round(bench, medium, a, first, per_request, out)
        first += per_request * a.requests
    # One large request from SSD (the medium a large session lives on): its first layer through
    # the connector, and what a synchronous load holds of the step against an asynchronous one.
    blocks = list(range(first, first + big))
    keys = [f"bench/{a.run_id}/first/{b}" for b in blocks]
    want = bench.fill(blocks, seed=7)
    medium = "ssd" if "ssd" in a.media else "dram"
    bench.put(keys, blocks, want, medium)
    bench.clear(blocks)
    sync = bench.connector_load([(keys, blocks)])
    mismatches += bench.mismatches(blocks, want)
    bench.clear(blocks)
    asy = bench.connector_load([(keys, blocks)], asynchronous=True)
    mismatches += bench.mismatches(blocks, want)
    out.update({
        "first_layer_bytes": len(blocks) * block_bytes, "first_layer_medium": medium,
        "first_layer_ms": round(1e3 * sync["first_layer_s"], 3),
        "sync_load_ms": round(1e3 * sync["total_s"], 3),
        "step_ms_sync": round(1e3 * sync["step_s"], 3),
        "step_ms_async": round(1e3 * asy["step_s"], 3),
        "async_load_ms": round(1e3 * asy["total_s"], 3),
    })
    ratios = [out[m]["connector_vs_store"] for m in a.media]
    out["connector_vs_store"] = min(ratios)
    out["mismatches"] = mismatches + bench.layer_mismatches
    out["layer_mismatches"] = bench.layer_mismatches
    if bench.gpu is not None:
        out["gpu_path"] = {k: v for k, v in bench.gpu.info().items() if k != "stream"}
    bench.conn.shutdown()
    return out


def _print_table(out: Dict) -> None:
    print(f"flatcake bench vllm: {out['requests']} requests of {out['blocks_per_request']} "
          f"blocks ({out['layout']}), {out['reps']} rounds, {out['path']}")
    print(f"{'medium':<8}{'bytes':>14}{'connector GB/s':>16}{'store GB/s':>12}{'ratio':>8}")
    for m in ("dram", "ssd"):
        if m in out:
            r = out[m]
            print(f"{m:<8}{r['bytes']:>14}{r['connector_gbps']:>16}{r['store_gbps']:>12}"
                  f"{r['connector_vs_store']:>8}")
    print(f"one request of {out['first_layer_bytes']} bytes from {out['first_layer_medium']}: "
          f"first layer {out['first_layer_ms']} ms, all {out['sync_load_ms']} ms; the step holds "
          f"{out['step_ms_sync']} ms loading synchronously, {out['step_ms_async']} ms "
          f"asynchronously (loaded in {out['async_load_ms']} ms)")
    print(f"connector_vs_store {out['connector_vs_store']} (target >= 0.9), "
          f"mismatches {out['mismatches']}")


def main(argv: List[str]) -> int:
    a = _parse(argv)
    try:
        if a.ssd_dir:
            out = run(a, a.ssd_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="flatcake-bench-vllm-") as d:
                out = run(a, d)
    except (flatcake.Error, RuntimeError, ValueError) as e:
        print(f"flatcake bench vllm: {e}", file=sys.stderr)
        return 1
    _print_table(out)
    if a.json:  # the benches' contract: the table, then one JSON object on the last line
        print(json.dumps(out, sort_keys=True))
    return 1 if out["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
