"""Process-wide sharing of stores between the engine adapters (``flatcake.sglang``,
``flatcake.vllm``).

Several adapter objects of one process that name the same store configuration (SGLang workers
living in one process, a vLLM engine whose scheduler-side and worker-side connectors share its
process) share one store: a second ``flatcake.open`` of the same SSD directories would fail, and
the scheduler must see what the worker wrote. Thread-safe.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Dict, List

import flatcake

_lock = threading.Lock()
_stores: Dict[str, List[Any]] = {}  # config fingerprint -> [flatcake.Store, refcount]


def acquire(fingerprint: str, open_fn: Callable[[], flatcake.Store]) -> flatcake.Store:
    """The live store opened for ``fingerprint``, or a new one from ``open_fn()``; each call
    takes a reference that :func:`release` returns."""
    with _lock:
        entry = _stores.get(fingerprint)
        if entry is not None and not entry[0].closed:
            entry[1] += 1
            return entry[0]
        store = open_fn()
        _stores[fingerprint] = [store, 1]
        return store


def release(fingerprint: str) -> None:
    """Returns a reference; the last one closes the store."""
    with _lock:
        entry = _stores.get(fingerprint)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _stores[fingerprint]
            entry[0].close()


def tenant_name(model: str) -> str:
    """A daemon tenant named after ``model``: characters outside [A-Za-z0-9._-] become '_',
    at most 64 of them ('default' for an empty name)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model or "default")[:64] or "default"
