"""The vLLM stand-in's connector interface (vllm_standin/.../v1/base.py, vLLM 00f4240e) against
flatcake._vllm_iface, the base flatcake.vllm subclasses when vLLM is absent: the same members,
signatures and defaults, and FlatCake's connector built on the fallback still has every member
vLLM's scheduler and workers call."""

import dataclasses
import inspect
from types import SimpleNamespace as NS

import pytest

from flatcake import _vllm_iface
from isolated import run_without
from vllm.distributed.kv_transfer.kv_connector.utils import copy_kv_blocks
from vllm.distributed.kv_transfer.kv_connector.v1 import base as vllm_base

BASE_MODULE_NAMES = ("KVConnectorTransferResults", "SupportsHMA", "supports_hma",
                     "KVConnectorRole", "KVConnectorHandshakeMetadata", "KVConnectorMetadata",
                     "KVConnectorWorkerMetadata", "CopyBlocksOp", "KVConnectorBase_V1")
GONE_SINCE_003DF296 = ("prefer_cross_layer_blocks", "register_cross_layers_kv_cache",
                       "supports_eagle_prefix_cache_hashing", "set_eagle_prefix_cache_hashing")


def public_members(cls) -> set:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_fallback_interface_has_every_member_of_vllms_with_its_signature():
    ours, theirs = _vllm_iface.KVConnectorBase_V1, vllm_base.KVConnectorBase_V1
    for name in BASE_MODULE_NAMES:
        assert hasattr(vllm_base, name) and hasattr(_vllm_iface, name), name
    assert public_members(theirs) - public_members(ours) == set()
    assert public_members(ours) - public_members(theirs) == set()
    for name in public_members(theirs) | {"_get_connector_metadata", "__init__"}:
        a, b = inspect.getattr_static(theirs, name), inspect.getattr_static(ours, name)
        assert type(a) is type(b), name  # property, classmethod or function alike
        if not isinstance(a, property):
            fa, fb = getattr(theirs, name), getattr(ours, name)
            assert list(inspect.signature(fa).parameters) == list(
                inspect.signature(fb).parameters), name
    assert theirs.__abstractmethods__ == ours.__abstractmethods__
    for name in GONE_SINCE_003DF296:
        assert not hasattr(theirs, name) and not hasattr(ours, name), name
    fields = [f.name for f in dataclasses.fields(vllm_base.KVConnectorTransferResults)]
    assert fields == [f.name for f in dataclasses.fields(_vllm_iface.KVConnectorTransferResults)]
    assert vllm_base.SupportsHMA.__abstractmethods__ == _vllm_iface.SupportsHMA.__abstractmethods__


def _concrete(base_module, finished=(None, None)):
    """A connector class of that module's base with the abstract methods filled in."""
    bound = []

    class Concrete(base_module.KVConnectorBase_V1):
        def start_load_kv(self, forward_context, **kwargs): ...
        def wait_for_layer_load(self, layer_name): ...
        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs): ...
        def wait_for_save(self): ...
        def get_num_new_matched_tokens(self, request, num_computed_tokens): return 0, False
        def update_state_after_alloc(self, request, blocks, num_external_tokens): ...
        def build_connector_meta(self, scheduler_output): return None

        def get_finished(self, finished_req_ids):
            return finished

        def bind_gpu_block_pool(self, gpu_block_pool):
            bound.append(gpu_block_pool)

    return Concrete, bound


def _defaults(base_module, producer: bool, finished) -> dict:
    cls, bound = _concrete(base_module, finished)
    kv = NS(is_kv_producer=producer, is_kv_consumer=not producer)
    c = cls(NS(kv_transfer_config=kv), base_module.KVConnectorRole.SCHEDULER, None)
    manager = NS(block_pool="the pool")
    out = {n: getattr(c, n) for n in ("supports_divergent_local_hybrid_hits",
                                      "requires_kv_delivery", "role", "_kv_cache_manager")}
    for name, args in [("get_mem_pool_context", ()), ("finish_forward", ()),
                       ("reset_capture_state", ()), ("register_kv_caches", ({},)),
                       ("set_host_xfer_buffer_ops", (copy_kv_blocks,)), ("get_finished", ({"x"},)),
                       ("get_block_ids_with_load_errors", ()), ("get_kv_connector_stats", ()),
                       ("get_kv_connector_kv_cache_events", ()), ("get_handshake_metadata", ()),
                       ("build_connector_worker_meta", ()), ("on_new_request", (None,)),
                       ("update_connector_output", (None,)),
                       ("can_load_prefix_replay_checkpoint", (None, 0, 16)),
                       ("consume_prefix_replay_checkpoint", (None, 16)),
                       ("request_finished", (None, [1])),
                       ("register_finished_partial_tail", (None, ([1],), [(0, 1, 2)])),
                       ("has_pending_block_frees", ()), ("has_pending_push_work", ()),
                       ("get_finished_count", ()), ("build_kv_connector_stats", ({},)),
                       ("build_prom_metrics", (None, {}, [], {})), ("reset_cache", ()),
                       ("set_xfer_handshake_metadata", ({},)),
                       ("get_required_kvcache_layout", (None,)),
                       ("requires_piecewise_for_cudagraph", ({},))]:
        out[name] = getattr(c, name)(*args)
    out["take_events"] = list(c.take_events())
    out["get_transfer_results"] = dataclasses.asdict(c.get_transfer_results({"x"}))
    c.bind_kv_cache_manager(manager)
    out["bound"] = (c._kv_cache_manager is manager, bound)
    c.bind_connector_metadata("meta")
    out["bound_meta"] = (c.has_connector_metadata(), c._get_connector_metadata())
    c.clear_connector_metadata()
    out["cleared"] = c.has_connector_metadata()
    with pytest.raises(TypeError):
        base_module.KVConnectorBase_V1.get_required_kvcache_layout(None)
    with pytest.raises(ValueError, match="pp_rank > 0"):
        c.set_xfer_handshake_metadata_pp_aware({(1, 0): None})
    with pytest.raises(ValueError, match="kv_transfer_config"):
        cls(NS(kv_transfer_config=None), base_module.KVConnectorRole.WORKER, None)
    return out


@pytest.mark.parametrize("producer", [True, False], ids=["kv_both", "kv_consumer"])
@pytest.mark.parametrize("finished", [(None, None), ({"s"}, {"r"})], ids=["none", "some"])
def test_the_fallback_interface_has_vllms_defaults(producer, finished):
    ours = _defaults(_vllm_iface, producer, finished)
    theirs = _defaults(vllm_base, producer, finished)
    ours["role"], theirs["role"] = ours["role"].name, theirs["role"].name
    assert ours == theirs
    assert theirs["requires_kv_delivery"] is producer  # vLLM: the producer role
    assert theirs["get_transfer_results"] == {
        "finished_sending": set(finished[0] or ()), "finished_recving": set(finished[1] or ()),
        "failed_recving": set(), "prefix_replay_checkpoints": {}}
    assert theirs["has_pending_block_frees"] is False and theirs["bound"] == (True, ["the pool"])


def test_without_vllm_flatcake_subclasses_a_base_with_every_member_of_vllms():
    names = sorted(public_members(vllm_base.KVConnectorBase_V1))
    run_without("vllm_standin", f"""
        import flatcake.vllm as fv
        from flatcake import _vllm_iface
        assert fv.KVConnectorBase_V1 is _vllm_iface.KVConnectorBase_V1
        missing = [n for n in {names!r} if not hasattr(fv.FlatCakeConnector, n)]
        assert not missing, missing
        print("ok")
    """)
