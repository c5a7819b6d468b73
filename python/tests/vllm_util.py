"""A vLLM engine in miniature, driving flatcake.vllm the way vLLM does (the stand-in's scheduler,
executor aggregation and worker connector life cycle; see vllm_standin/README.md), with a fake
model whose KV is a known function of the prefix, so that every restored byte can be checked.

The fake model's "attention" for layer l first checks, for every scheduled request, that every
position before this step's tokens holds the KV the model would have computed there (these came
from vLLM's prefix cache, from FlatCake, or from earlier steps), then writes this step's
positions. A position FlatCake should have restored and did not, or restored wrongly, or had not
yet restored when wait_for_layer_load(l) returned, is a mismatch.
"""

import dataclasses
import hashlib

import torch

from vllm.config import (CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig,
                         SchedulerConfig, VllmConfig)
from vllm.distributed import parallel_state
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.forward_context import set_forward_context
from vllm.sampling_params import SamplingParams
from vllm.v1.core.kv_cache_utils import get_request_block_hasher
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin

KV_TRANSFER = {"kv_connector": "FlatCakeConnector", "kv_connector_module_path": "flatcake.vllm"}
SHAPES = ("mha", "mha_hnd", "mha_flashinfer", "mla")


def vllm_config(extra_config, *, role="kv_both", mla=False, block_size=16, tp=1, pp=1, dp=1,
                rank=0, model="org/test-model", prefix_caching=True, max_batched_tokens=2048):
    return VllmConfig(
        model_config=ModelConfig(model=model, use_mla=mla),
        cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching),
        parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                       data_parallel_size=dp, rank=rank),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_batched_tokens,
                                         disable_hybrid_kv_cache_manager=True),
        kv_transfer_config=KVTransferConfig(kv_role=role, kv_connector_extra_config=extra_config,
                                            **KV_TRANSFER))


def paged_cache(shape, num_blocks, block_size, heads, head_dim, dtype=torch.float16):
    """One layer's KV cache as vLLM's attention backends allocate it."""
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
    t.view(torch.uint8).fill_(0xEE)  # what a fresh (or reused) block holds: not the KV
    return t


def slot(t, shape, plane, block, offset):
    """The KV of one token of one plane in a layer's cache, as bytes."""
    if shape == "mla":
        s = t[block, offset]
    elif shape == "mha_flashinfer":
        s = t[block, plane, offset]
    else:
        s = t[plane, block, offset]
    return s.view(torch.uint8)


class FakeWorker(KVConnectorModelRunnerMixin):
    """One worker (one TP rank) of the engine: its KV caches, its connector, the fake model."""

    def __init__(self, config, kv_cache_config, shape, tokens_of, *, num_layers=4, heads=2,
                 head_dim=16, staged=False):
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
        self.block_size = config.cache_config.block_size
        self.planes = 1 if shape == "mla" else 2
        self.layer_names = [f"model.layers.{i}.self_attn.attn" for i in range(num_layers)]
        self.kv_caches = {n: paged_cache(shape, kv_cache_config.num_blocks, self.block_size,
                                         heads, head_dim) for n in self.layer_names}
        self.slot_bytes = slot(self.kv_caches[self.layer_names[0]], shape, 0, 0, 0).numel()
        self.connector.register_kv_caches(self.kv_caches)
        if staged:  # the CUDA path's copies, on CPU tensors
            self.connector.TEST_stage_through_host()
        self.tokens_of = tokens_of
        self.block_ids: dict[str, list[int]] = {}
        self.digests: dict[str, list[bytes]] = {}
        self.layer_waits: list[str] = []  # wait_for_layer_load calls, in order
        self.mismatches: list[tuple] = []  # (request, layer, position)
        self.events: list[tuple] = []  # ("attention", layer) as each layer's attention runs
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
        rank = 0 if self.shape == "mla" else self.rank
        seed = self._digest(req_id, pos) + bytes([rank, layer, plane])
        return torch.frombuffer(bytearray(hashlib.shake_128(seed).digest(self.slot_bytes)),
                                dtype=torch.uint8)

    def _slot(self, layer, req_id, plane, pos):
        cache = self.kv_caches[self.layer_names[layer]]
        block = self.block_ids[req_id][pos // self.block_size]
        return slot(cache, self.shape, plane, block, pos % self.block_size)

    def _attention(self, layer, work):
        for req_id, start, n in work:
            for pos in range(start):
                for p in range(self.planes):
                    self.checked_slots += 1
                    got = self._slot(layer, req_id, p, pos).reshape(-1)
                    if not torch.equal(got, self.expected(req_id, layer, p, pos)):
                        self.mismatches.append((req_id, layer, pos))
            for pos in range(start, start + n):
                for p in range(self.planes):
                    self._slot(layer, req_id, p, pos).copy_(
                        self.expected(req_id, layer, p, pos).view(
                            self._slot(layer, req_id, p, pos).shape))

    def execute_model(self, so) -> ModelRunnerOutput:
        for rid in so.finished_req_ids:
            self.block_ids.pop(rid, None)
            self.digests.pop(rid, None)
        work = []
        for new in so.scheduled_new_reqs:
            self.block_ids[new.req_id] = list(new.block_ids[0])
            work.append((new.req_id, new.num_computed_tokens, so.num_scheduled_tokens[new.req_id]))
        cached = so.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            ids = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                self.block_ids[rid] = list(ids[0])
            elif ids is not None:
                self.block_ids[rid].extend(ids[0])
            work.append((rid, cached.num_computed_tokens[i], so.num_scheduled_tokens[rid]))
        if not so.total_num_scheduled_tokens:
            return self.kv_connector_no_forward(self.connector, so, self.config)
        attn_metadata = {n: object() for n in self.layer_names}
        with set_forward_context(attn_metadata, self.config), \
                self._get_kv_connector_output(self.connector, so) as kv_out:
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
    """A scheduler, an executor with `tp` workers and the loop between them."""

    def __init__(self, extra_config, *, shape="mha", tp=1, num_blocks=64, block_size=16,
                 num_layers=4, role="kv_both", model="org/test-model", prefix_caching=True,
                 max_batched_tokens=2048, staged=False):
        mla = shape == "mla"
        self.config = vllm_config(extra_config, role=role, mla=mla, block_size=block_size, tp=tp,
                                  model=model, prefix_caching=prefix_caching,
                                  max_batched_tokens=max_batched_tokens)
        kv_cache_config = KVCacheConfig(num_blocks=num_blocks)
        self.scheduler = Scheduler(self.config, kv_cache_config)
        self.connector = self.scheduler.connector
        self.block_size = block_size
        self.workers = []
        for rank in range(tp):
            cfg = dataclasses.replace(self.config, parallel_config=dataclasses.replace(
                self.config.parallel_config, rank=rank))
            self.workers.append(FakeWorker(cfg, kv_cache_config, shape, self._tokens,
                                           num_layers=num_layers, staged=staged))
        self.aggregator = KVOutputAggregator(tp)
        self.hasher = get_request_block_hasher(block_size)
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
        self.connector.shutdown()


def prompt(n, seed=0, vocab=5000):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (n,), generator=g).tolist()
