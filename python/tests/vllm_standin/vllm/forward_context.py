"""Stand-in of vllm/forward_context.py at vLLM 01fb6e2f (see ../README.md): the per-step
ForwardContext (attention metadata per layer name, None in a step without a forward) and
set_forward_context / get_forward_context."""

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ForwardContext:
    no_compile_layers: dict[str, Any]
    attn_metadata: Any  # dict[layer name, AttentionMetadata] or None
    slot_mapping: dict = field(default_factory=dict)
    virtual_engine: int = 0


_forward_context: Optional[ForwardContext] = None


def get_forward_context() -> ForwardContext:
    assert _forward_context is not None, (
        "Forward context is not set. "
        "Please use `set_forward_context` to set the forward context.")
    return _forward_context


def is_forward_context_available() -> bool:
    return _forward_context is not None


@contextmanager
def set_forward_context(attn_metadata: Any, vllm_config, virtual_engine: int = 0,
                        slot_mapping: Optional[dict] = None, no_compile_layers=None):
    global _forward_context
    prev = _forward_context
    _forward_context = ForwardContext(no_compile_layers=no_compile_layers or {},
                                      attn_metadata=attn_metadata,
                                      slot_mapping=slot_mapping or {},
                                      virtual_engine=virtual_engine)
    try:
        yield
    finally:
        _forward_context = prev
