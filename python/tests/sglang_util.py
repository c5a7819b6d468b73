"""Helpers that drive flatcake.sglang the way SGLang's HiCache controller does."""

import dataclasses
import hashlib
import importlib

from flatcake.sglang import HiCacheStorage, HiCacheStorageConfig

LOADER_CONFIG = {
    "backend_name": "flatcake",
    "module_path": "flatcake.sglang",
    "class_name": "FlatCakeStorage",
    "interface_v1": 1,
}


def storage_config(extra_config, **fields):
    """A HiCacheStorageConfig with every field SGLang fills, whatever its version has."""
    base = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                is_mla_model=False, enable_storage_metrics=True, is_page_first_layout=False,
                model_name="org/test-model", extra_config=extra_config)
    base.update(fields)
    names = {f.name for f in dataclasses.fields(HiCacheStorageConfig)}
    return HiCacheStorageConfig(**{k: v for k, v in base.items() if k in names})


def load_backend(extra_config, **fields):
    """What `--hicache-storage-backend dynamic` does: import module_path, check the class,
    then build it as cls(storage_config, kwargs)."""
    config = storage_config(dict(LOADER_CONFIG, **extra_config), **fields)
    module = importlib.import_module(config.extra_config["module_path"])
    cls = getattr(module, config.extra_config["class_name"])
    assert issubclass(cls, HiCacheStorage)
    return cls(config, {})


def page_hashes(n, seed=0, prior=None):
    """SGLang-style chained 64-hex page hashes."""
    out = []
    prev = prior
    for i in range(n):
        h = hashlib.sha256()
        if prev:
            h.update(bytes.fromhex(prev))
        h.update(f"tokens-{seed}-{i}".encode())
        prev = h.hexdigest()
        out.append(prev)
    return out
