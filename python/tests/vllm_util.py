"""A vLLM engine in miniature, driving a KV connector (flatcake.vllm by default) the way vLLM
does (the stand-in's scheduler, executor aggregation and worker connector life cycle; see
vllm_standin/README.md), with a fake model whose KV is a known function of the prefix, so that
every restored byte can be checked.

The fake model's "attention" for layer l first checks, for every scheduled request, that every
position before this step's tokens that the layer reads (all of them; a sliding-window layer
only those in its window) holds the KV the model would have computed there (these came from
vLLM's prefix cache, from the connector, or from earlier steps), then writes this step's
positions. A position the connector should have restored and did not, or restored wrongly, or
had not yet restored when wait_for_layer_load(l) returned, is a mismatch.

KV cache forms (`shape`), as vLLM hands them to register_kv_caches:
- newest main (layout standardization): one buffer per KV cache group, each layer a strided 4D
  view [num_blocks, num_kv_heads, block_size, 2 * head_size] (K then V in the last dimension),
  MLA [num_blocks, 1, block_size, latent], laid out by a KVCacheLayout name: PACKED lists
  "LBNHC" (vLLM's default), "LBHNC", "BLHNC", "BLNHC" (also "LHBNC", "BHLNC"); "mla_<layout>"
  for MLA;
- vLLM 003df296 and before: one tensor per layer, SHAPES: "mha" (FlashAttention
  (2, num_blocks, block_size, heads, head_size), NHD), "mha_hnd" (the HND stride order),
  "mha_flashinfer" ((num_blocks, 2, block_size, heads, head_size)), "mla"
  ((num_blocks, block_size, latent)).
"""

import dataclasses
import hashlib
import os
from typing import Optional

import pytest
import torch
from vllm.config import (CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig,
                         SchedulerConfig, VllmConfig)
from vllm.distributed import parallel_state
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator, copy_kv_blocks
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.forward_context import set_forward_context
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec,
                                        KVCacheTensor, MLAAttentionSpec, SlidingWindowSpec,
                                        create_kv_cache_views, kv_cache_tensor_for_group)
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin

from flatcake import _shared_stores

KV_TRANSFER = {"kv_connector": "FlatCakeConnector", "kv_connector_module_path": "flatcake.vllm"}
SHAPES = ("mha", "mha_hnd", "mha_flashinfer", "mla")  # vLLM 003df296 and before
PACKED = ("LBNHC", "LBHNC", "BLHNC", "BLNHC")  # newest main; LBNHC is vLLM's default
LEGACY_SHAPES = SHAPES


def is_mla(shape: str) -> bool:
    return shape.startswith("mla")


def layout_of(shape: str) -> Optional[str]:
    """The KVCacheLayout name of a packed form, None for a 003df296-era shape."""
    name = shape[4:] if shape.startswith("mla_") else shape
    return name if name in KVCacheLayout.__members__ else None


def vllm_config(extra_config, *, role="kv_both", mla=False, block_size=16, tp=1, pp=1, dp=1,
                rank=0, model="org/test-model", prefix_caching=True, max_batched_tokens=2048,
                layout: Optional[str] = "LBNHC", load_failure_policy="fail", hma=False,
                v2=False, kv_transfer=None):
    """A VllmConfig for the stand-in. layout: cache_config.kv_cache_layout (None: a vLLM from
    before the layout standardization); hma: the hybrid KV cache manager on; kv_transfer:
    kv_connector and kv_connector_module_path (default FlatCake)."""
    return VllmConfig(
        model_config=ModelConfig(model=model, use_mla=mla),
        cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching,
                                 kv_cache_layout=layout),
        parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                       data_parallel_size=dp, rank=rank),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_batched_tokens,
                                         disable_hybrid_kv_cache_manager=not hma),
        kv_transfer_config=KVTransferConfig(kv_role=role, kv_connector_extra_config=extra_config,
                                            kv_load_failure_policy=load_failure_policy,
                                            **(kv_transfer or KV_TRANSFER)),
        use_v2_model_runner=v2)


def attention_spec(shape, block_size, heads, head_dim, dtype=torch.float16, sliding_window=None):
    """The KV cache spec of a layer of this form (MLA: one head slot, head_dim the latent)."""
    if is_mla(shape):
        return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_dim,
                                dtype=dtype)
    if sliding_window is not None:
        return SlidingWindowSpec(block_size=block_size, num_kv_heads=heads, head_size=head_dim,
                                 dtype=dtype, sliding_window=sliding_window)
    return FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=head_dim,
                             dtype=dtype)


def _unfilled(t: torch.Tensor) -> torch.Tensor:
    t.view(torch.uint8).fill_(0xEE)  # what a fresh (or reused) block holds: not the KV
    return t


def paged_cache(shape, num_blocks, block_size, heads, head_dim, dtype=torch.float16):
    """One layer's KV cache as vLLM 003df296's attention backends allocated it."""
    if shape == "mha":  # FlashAttention, NHD
        t = torch.empty(2, num_blocks, block_size, heads, head_dim, dtype=dtype)
    elif shape == "mha_hnd":  # FlashAttention with the HND stride order: a permuted view
        t = torch.empty(2, num_blocks, heads, block_size, head_dim, dtype=dtype)
        t = t.permute(0, 1, 3, 2, 4)
    elif shape == "mha_flashinfer":
        t = torch.empty(num_blocks, 2, block_size, heads, head_dim, dtype=dtype)
    elif shape == "mla":
        t = torch.empty(num_blocks, block_size, head_dim, dtype=dtype)
    else:
        raise ValueError(shape)
    return _unfilled(t)


def packed_kv_caches(layout: str, spec, layer_names, num_blocks):
    """One KV cache group as vLLM main allocates it: one buffer, each layer a strided
    [num_blocks, H, block_size, C] view of it in the physical order of `layout`. Returns
    ({layer: view}, KVCacheTensor, the buffer)."""
    order = KVCacheLayout[layout]
    tensor = kv_cache_tensor_for_group(spec, num_blocks, layer_names, order)
    raw = torch.empty(tensor.size, dtype=torch.uint8).fill_(0xEE)
    views = create_kv_cache_views(raw, spec, num_blocks, order, tensor)
    return dict(zip(layer_names, views)), tensor, raw


def kv_caches(shape, spec, layer_names, num_blocks):
    """A group's KV caches in this form: ({layer: tensor}, [KVCacheTensor])."""
    layout = layout_of(shape)
    if layout is not None:
        caches, tensor, _raw = packed_kv_caches(layout, spec, layer_names, num_blocks)
        return caches, [tensor]
    caches = {n: paged_cache(shape, num_blocks, spec.block_size, spec.num_kv_heads,
                             spec.head_size, spec.dtype) for n in layer_names}
    page = spec.page_size_bytes
    return caches, [KVCacheTensor(size=num_blocks * page, layers=[n], layer_stride=0,
                                  block_stride=page) for n in layer_names]


def slot(t, shape, plane, block, offset):
    """The KV of one token of one plane (K 0, V 1; MLA only 0) in a layer's cache, as bytes."""
    if layout_of(shape) is not None:
        if is_mla(shape):
            s = t[block, 0, offset]
        else:
            half = t.shape[-1] // 2
            s = t[block, :, offset, plane * half:(plane + 1) * half]
    elif shape == "mla":
        s = t[block, offset]
    elif shape == "mha_flashinfer":
        s = t[block, plane, offset]
    else:
        s = t[plane, block, offset]
    return s.view(torch.uint8)


@dataclasses.dataclass
class ModelShape:
    """The fake model: layers, which of them slide (a second KV cache group), head geometry."""

    num_layers: int = 4
    heads: int = 2
    head_dim: int = 16
    sliding_window: Optional[int] = None  # odd layers slide when set
    swa_block_size: Optional[int] = None  # their block size (default the full layers')

    def layer_names(self):
        return [f"model.layers.{i}.self_attn.attn" for i in range(self.num_layers)]

    def kv_cache_config(self, shape, num_blocks, block_size, layout=None) -> KVCacheConfig:
        names = self.layer_names()
        full = attention_spec(shape, block_size, self.heads, self.head_dim)
        if self.sliding_window is None:
            groups = [KVCacheGroupSpec(names, full)]
        else:
            swa = attention_spec(shape, self.swa_block_size or block_size, self.heads,
                                 self.head_dim, sliding_window=self.sliding_window)
            groups = [KVCacheGroupSpec(names[0::2], full), KVCacheGroupSpec(names[1::2], swa)]
        return KVCacheConfig(num_blocks=num_blocks, kv_cache_groups=groups,
                             kv_cache_layout=layout)


class FakeWorker(KVConnectorModelRunnerMixin):
    """One worker (one TP rank) of the engine: its KV caches, its connector, the fake model."""

    def __init__(self, config, kv_cache_config, shape, tokens_of, *, staged=False):
        par = config.parallel_config
        # The worker's process groups (vLLM: initialised once per worker process).
        parallel_state.init_distributed_environment(par.world_size, par.rank)
        parallel_state.initialize_model_parallel(par.tensor_parallel_size,
                                                 par.pipeline_parallel_size)
        try:
            self.connector = KVConnectorFactory.create_connector(
                config, KVConnectorRole.WORKER, kv_cache_config)
        finally:
            parallel_state.destroy_model_parallel()
        self.config, self.shape, self.rank = config, shape, par.rank
        self.groups = kv_cache_config.kv_cache_groups
        self.layer_names = [n for g in self.groups for n in g.layer_names]
        self.layer_names.sort(key=lambda n: int(n.split(".")[2]))
        self.group_of = {n: i for i, g in enumerate(self.groups) for n in g.layer_names}
        self.planes = 1 if is_mla(shape) else 2
        self.kv_caches = {}
        self.kv_cache_tensors = []
        for g in self.groups:
            caches, tensors = kv_caches(shape, g.kv_cache_spec, g.layer_names,
                                        kv_cache_config.num_blocks)
            self.kv_caches.update(caches)
            self.kv_cache_tensors += tensors
        self.slot_bytes = slot(self.kv_caches[self.layer_names[0]], shape, 0, 0, 0).numel()
        try:
            self.connector.register_kv_caches(self.kv_caches)
        except Exception:
            self.connector.shutdown()  # as vLLM's worker process ends, its store goes
            raise
        self.connector.set_host_xfer_buffer_ops(copy_kv_blocks)
        if staged:  # the CUDA path's copies, on CPU tensors
            self.connector.TEST_stage_through_host()
        self.tokens_of = tokens_of
        self.block_ids: dict[str, list[list[int]]] = {}  # per request, per group
        self.digests: dict[str, list[bytes]] = {}
        self.layer_waits: list[str] = []  # wait_for_layer_load calls, in order
        self.mismatches: list[tuple] = []  # (request, layer, position)
        self.events: list[tuple] = []  # ("attention", layer) as each layer's attention runs
        self.forwards: list[set] = []  # per step with a forward: the requests it computed
        self.checked_slots = 0

    # The fake model: KV of a position is a function of the prefix up to it, the rank (MHA ranks
    # hold other heads; MLA ranks the same latent), the layer and the plane.
    def _digest(self, req_id, pos):
        tokens, chain = self.tokens_of(req_id), self.digests.setdefault(req_id, [])
        while len(chain) <= pos:
            prev = chain[-1] if chain else b"start"
            chain.append(hashlib.blake2b(prev + tokens[len(chain)].to_bytes(4, "little"),
                                         digest_size=16).digest())
        return chain[pos]

    def expected(self, req_id, layer, plane, pos):
        rank = 0 if is_mla(self.shape) else self.rank
        seed = self._digest(req_id, pos) + bytes([rank, layer, plane])
        return torch.frombuffer(bytearray(hashlib.shake_128(seed).digest(self.slot_bytes)),
                                dtype=torch.uint8)

    def _spec(self, layer):
        return self.groups[self.group_of[self.layer_names[layer]]].kv_cache_spec

    def _slot_in(self, layer, block_ids, plane, pos):
        """The slot of position pos of a request whose block table (per group) is block_ids."""
        name = self.layer_names[layer]
        block_size = self._spec(layer).block_size
        block = block_ids[self.group_of[name]][pos // block_size]
        return slot(self.kv_caches[name], self.shape, plane, block, pos % block_size)

    def _window_start(self, layer, start):
        """The first position a query at `start` reads in this layer."""
        spec = self._spec(layer)
        if not isinstance(spec, SlidingWindowSpec):
            return 0
        return max(start - spec.sliding_window + 1, 0)

    def fill_kv(self, req_id, block_ids, start, end):
        """Writes the model's KV of positions [start, end) of a request into its blocks (one
        list per group), every layer: what a connector's load delivers (for test connectors)."""
        for layer in range(len(self.layer_names)):
            for pos in range(max(start, self._window_start(layer, end)), end):
                for p in range(self.planes):
                    dst = self._slot_in(layer, block_ids, p, pos)
                    dst.copy_(self.expected(req_id, layer, p, pos).view(dst.shape))

    def _attention(self, layer, work):
        for req_id, start, n in work:
            table = self.block_ids[req_id]
            for pos in range(self._window_start(layer, start), start):
                for p in range(self.planes):
                    self.checked_slots += 1
                    got = self._slot_in(layer, table, p, pos).reshape(-1)
                    if not torch.equal(got, self.expected(req_id, layer, p, pos)):
                        self.mismatches.append((req_id, layer, pos))
            for pos in range(start, start + n):
                for p in range(self.planes):
                    dst = self._slot_in(layer, table, p, pos)
                    dst.copy_(self.expected(req_id, layer, p, pos).view(dst.shape))

    def execute_model(self, so) -> ModelRunnerOutput:
        for rid in so.finished_req_ids:
            self.block_ids.pop(rid, None)
            self.digests.pop(rid, None)
        work = []
        for new in so.scheduled_new_reqs:
            self.block_ids[new.req_id] = [list(g) for g in new.block_ids]
            work.append((new.req_id, new.num_computed_tokens, so.num_scheduled_tokens[new.req_id]))
        cached = so.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            ids = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                self.block_ids[rid] = [list(g) for g in ids]
            elif ids is not None:
                for table, more in zip(self.block_ids[rid], ids):
                    table.extend(more)
            work.append((rid, cached.num_computed_tokens[i], so.num_scheduled_tokens[rid]))
        if not so.total_num_scheduled_tokens:
            return self.kv_connector_no_forward(self.connector, so, self.config)
        self.forwards.append({rid for rid, _, _ in work})
        attn_metadata = {n: object() for n in self.layer_names}
        with set_forward_context(attn_metadata, self.config), \
                self._get_kv_connector_output(self.connector, so, self.config) as kv_out:
            for layer, name in enumerate(self.layer_names):
                # maybe_transfer_kv_layer: wait on entry, attention, save on exit.
                if self.connector.has_connector_metadata():
                    self.connector.wait_for_layer_load(name)
                    self.layer_waits.append(name)
                self._attention(layer, work)
                self.events.append(("attention", layer))
                if self.connector.has_connector_metadata():
                    self.connector.save_kv_layer(name, self.kv_caches[name], attn_metadata[name])
        req_ids, sampled = [], []
        for rid, start, n in work:
            tokens = self.tokens_of(rid)
            req_ids.append(rid)
            done = start + n >= len(tokens)
            sampled.append([int.from_bytes(self._digest(rid, len(tokens) - 1)[:2], "little")
                            % 5000 + 1] if done else [])
        return ModelRunnerOutput(req_ids, sampled, kv_out)


class Engine:
    """A scheduler, an executor with `tp` workers and the loop between them.

    shape: the KV cache form (module docstring); load_failure_policy: vLLM's
    kv_load_failure_policy ("fail" is vLLM's default); model: a ModelShape (sliding_window set:
    two KV cache groups, which needs hma=True and a SupportsHMA connector); kv_transfer: another
    connector ({"kv_connector": class name, "kv_connector_module_path": module}); v2: the V2
    model runner."""

    def __init__(self, extra_config, *, shape="mha", tp=1, num_blocks=64, block_size=16,
                 num_layers=4, role="kv_both", model="org/test-model", prefix_caching=True,
                 max_batched_tokens=2048, staged=False, load_failure_policy="fail", hma=False,
                 v2=False, kv_transfer=None, model_shape: Optional[ModelShape] = None):
        # Before vLLM's layout standardization, HND was chosen with VLLM_KV_CACHE_LAYOUT (which
        # the connector reads to name the byte order in its keys): set while the engine starts.
        saved = os.environ.get("VLLM_KV_CACHE_LAYOUT")
        if shape == "mha_hnd":
            os.environ["VLLM_KV_CACHE_LAYOUT"] = "HND"
        self.workers = []
        self.connector = None
        try:
            self._start(extra_config, shape, tp, num_blocks, block_size, num_layers, role, model,
                        prefix_caching, max_batched_tokens, staged, load_failure_policy, hma, v2,
                        kv_transfer, model_shape)
        except Exception:
            self.close()  # what started goes, as the engine's processes would
            raise
        finally:
            if shape == "mha_hnd":
                if saved is None:
                    del os.environ["VLLM_KV_CACHE_LAYOUT"]
                else:
                    os.environ["VLLM_KV_CACHE_LAYOUT"] = saved

    def _start(self, extra_config, shape, tp, num_blocks, block_size, num_layers, role, model,
               prefix_caching, max_batched_tokens, staged, load_failure_policy, hma, v2,
               kv_transfer, model_shape):
        self.model_shape = model_shape or ModelShape(num_layers=num_layers)
        layout = layout_of(shape)
        self.config = vllm_config(extra_config, role=role, mla=is_mla(shape),
                                  block_size=block_size, tp=tp, model=model,
                                  prefix_caching=prefix_caching,
                                  max_batched_tokens=max_batched_tokens, layout=layout,
                                  load_failure_policy=load_failure_policy, hma=hma, v2=v2,
                                  kv_transfer=kv_transfer)
        self.kv_cache_config = self.model_shape.kv_cache_config(shape, num_blocks, block_size,
                                                                layout)
        self.scheduler = Scheduler(self.config, self.kv_cache_config)
        self.connector = self.scheduler.connector
        self.block_size = self.scheduler.block_size
        self.workers = []
        for rank in range(tp):
            cfg = dataclasses.replace(self.config, parallel_config=dataclasses.replace(
                self.config.parallel_config, rank=rank))
            self.workers.append(FakeWorker(cfg, self.kv_cache_config, shape, self._tokens,
                                           staged=staged))
        self.aggregator = KVOutputAggregator.from_connector(self.workers[0].connector, tp)
        self.hasher = get_request_block_hasher(self.scheduler.hash_block_size)
        self.outputs: dict[str, list[int]] = {}
        self._reqs: dict[str, Request] = {}

    def _tokens(self, req_id):
        return self._reqs[req_id].all_token_ids

    def add(self, req_id, prompt, max_tokens=4, kv_transfer_params=None):
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        req = Request(req_id, list(prompt), SamplingParams(max_tokens=max_tokens,
                                                           extra_args=extra), self.hasher)
        self._reqs[req_id] = req
        self.scheduler.add_request(req)
        return req

    def serve(self, req_id, prompt, max_tokens=4, kv_transfer_params=None):
        """Adds a request and runs the engine until it has nothing left; the request's output."""
        self.add(req_id, prompt, max_tokens, kv_transfer_params)
        return self.run()[req_id]

    def step(self):
        so = self.scheduler.schedule()
        out = self.aggregator.aggregate([w.execute_model(so) for w in self.workers])
        for rid in self.scheduler.update_from_output(so, out):
            self.outputs[rid] = list(self._reqs[rid].output_token_ids)
        return so

    def run(self, max_steps=500):
        for _ in range(max_steps):
            if not self.scheduler.has_requests():
                return self.outputs
            self.step()
        raise AssertionError("the engine did not finish its requests")

    @property
    def mismatches(self):
        return [m for w in self.workers for m in w.mismatches]

    def close(self):
        for w in self.workers:
            w.connector.shutdown()
        if self.connector is not None:
            self.connector.shutdown()


def prompt(n, seed=0, vocab=5000):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (n,), generator=g).tolist()


@pytest.fixture(autouse=True)
def no_store_outlives_its_test():
    """Autouse in every test module that imports it. Engines of one test share a store (same
    configuration, one process); a failed test must not leave its store to the next."""
    yield
    leaked = list(_shared_stores._stores)
    for fingerprint in leaked:
        while fingerprint in _shared_stores._stores:
            _shared_stores.release(fingerprint)
    assert not leaked, "a test left a store open"
