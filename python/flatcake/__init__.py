"""FlatCake: a KV-cache store with host DRAM and SSD as peer media behind one address space.

This package wraps the C++ store (``flatcake._core``):

    import flatcake
    store = flatcake.open({"ssd_dirs": ["/nvme0/fc"], "ssd_bytes": "64GiB", "dram_bytes": "8GiB"})
    layout = flatcake.KvLayout(num_layers=32, num_planes=2, slice_bytes=64 * 1024)
    store.put(["page-0", "page-1"], layout, tensor)     # CPU tensor of 2 * layout.block_bytes
    store.exists(["page-0", "page-1", "page-2"])         # -> 2 (leading keys present)
    store.get(["page-0", "page-1"], layout, out_tensor)  # -> GetResult, found == [True, True]
    store.close()

Buffers are either CPU torch tensors (their memory is used in place, never copied by Python) or
raw integer addresses together with an explicit ``kind`` (see ``BUFFER_KINDS``). The GIL is
released while the store copies data or waits for I/O, so several Python threads can keep the
store busy. ``flatcake.sglang.FlatCakeStorage`` is the SGLang HiCache storage backend.

Errors: bad arguments raise ``ValueError``/``TypeError``; store failures (no space, I/O errors,
closed store) raise ``flatcake.Error`` whose ``code`` attribute names the status ("NoSpace", ...).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

from . import _core
from ._core import Error, GetResult, KvLayout, LookupResult, PutResult

__all__ = [
    "BUFFER_KINDS",
    "Error",
    "GetResult",
    "GpuPath",
    "GpuRestore",
    "KvLayout",
    "LookupResult",
    "PutResult",
    "RestoreHandle",
    "Store",
    "__version__",
    "build_info",
    "connect",
    "default_options",
    "gpu_probe",
    "key_hex",
    "normalize_config",
    "open",
    "option_names",
    "option_specs",
    "parse_size",
]

# How a batch's memory is arranged (include/flatcake/layout.h, BufferKind):
#   block_contiguous   one pointer per block, slices in [layer][plane] order
#   block_plane_major  one pointer per block, slices in [plane][layer] order
#   plane_pointers     one pointer per (block, plane); that plane's layers contiguous
#   slice_pointers     one pointer per (block, layer, plane)
BUFFER_KINDS = ("block_contiguous", "block_plane_major", "plane_pointers", "slice_pointers")

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any, name: str = "size") -> int:
    """Bytes from an int or a string such as "64GiB", "512M", "1.5G" or "4000MB".

    K/M/G/T and KiB/MiB/GiB/TiB are binary (powers of 1024); KB/MB/GB/TB are decimal.
    """
    if isinstance(value, bool):
        raise TypeError(f"option '{name}' must be a size, got a bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"option '{name}' must not be negative, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise TypeError(f"option '{name}' must be an int or a size string, got {type(value).__name__}")
    m = _SIZE_RE.match(value)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _SIZE_UNITS:
        raise ValueError(f"option '{name}': cannot parse size {value!r} (e.g. 4096, 512MiB, 64GiB)")
    number = float(m.group(1)) * _SIZE_UNITS[unit]
    if not number.is_integer():
        raise ValueError(f"option '{name}': {value!r} is not a whole number of bytes")
    return int(number)


def build_info() -> dict:
    """What this build of the extension has, as ``flatcake info`` prints it: ``version``,
    ``io_uring``, ``cuda_kernels``, ``serve`` (``connect``), ``cluster``, ``metrics`` (booleans)
    and ``gpu_kernels``, the kernels library a GPU would load (empty without the kernels)."""
    return dict(_core.build_info())


__version__ = _core.build_info()["version"]


def option_names() -> list:
    """Every store option (StoreOptions field) accepted by ``open``."""
    return list(_core.option_names())


def option_specs() -> list:
    """The option table, one dict per option: name, flag (the CLI's), kind ("size", "count",
    "ratio", "bool", "enum", "path_list"), default (as text; ``default_options()`` has the
    values), range, help, and by kind choices / min, max, multiple / flag_clears. The same rows
    the CLI's flags and ``flatcake options --json`` come from."""
    return json.loads(_core.option_table_json())


_OPTION_KINDS = {row["name"]: row["kind"] for row in option_specs()}


def default_options() -> dict:
    """The defaults a store starts with, keyed by option name."""
    return dict(_core.default_options())


def normalize_config(config: Optional[Mapping[str, Any]] = None, **overrides: Any) -> dict:
    """Copies ``config`` with ``overrides`` applied, sizes parsed and ``ssd_dirs`` as a list.

    Raises ValueError on unknown option names or out-of-range values, before anything is opened.
    """
    merged = dict(config or {})
    merged.update(overrides)
    out = {}
    for name, value in merged.items():
        kind = _OPTION_KINDS.get(name)
        if kind == "size":
            value = parse_size(value, name)
        elif kind == "path_list":
            if isinstance(value, str):
                value = [d.strip() for d in value.split(",") if d.strip()]
            elif isinstance(value, (list, tuple)):
                value = [str(d) for d in value]
        out[name] = value
    return dict(_core.validate_options(out))


def key_hex(key: str) -> str:
    """The 128-bit store key a string key folds to, as 32 hex digits."""
    return _core.key_hex(key)


def _torch():
    import torch  # imported lazily: the package works with raw addresses alone

    return torch


def _is_tensor(obj: Any) -> bool:
    try:
        return isinstance(obj, _torch().Tensor)
    except ImportError:
        return False


def _tensor_span(t: Any, what: str) -> tuple:
    """(address, nbytes) of a CPU tensor whose memory can be used in place."""
    if t.device.type != "cpu":
        raise ValueError(f"{what} must be a CPU tensor, got device {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{what} must be contiguous (its bytes are read and written in place)")
    return t.data_ptr(), t.numel() * t.element_size()


def _expected_bytes(kind: str, layout: KvLayout) -> int:
    if kind in ("block_contiguous", "block_plane_major"):
        return layout.block_bytes
    if kind == "plane_pointers":
        return layout.num_layers * layout.slice_bytes
    if kind == "slice_pointers":
        return layout.slice_bytes
    raise ValueError(f"unknown buffer kind {kind!r} (one of {', '.join(BUFFER_KINDS)})")


def _resolve_buffers(buffers: Any, layout: KvLayout, n: int, kind: Optional[str]) -> tuple:
    """Returns (kind, pointers) for a batch of n blocks, checking every tensor's size."""
    if not isinstance(layout, KvLayout):
        raise TypeError(f"layout must be a flatcake.KvLayout, got {type(layout).__name__}")
    layout.validate()
    if _is_tensor(buffers):
        # One tensor holding the whole batch, block after block.
        kind = kind or "block_contiguous"
        if kind not in ("block_contiguous", "block_plane_major"):
            raise ValueError(f"a single tensor holds whole blocks; kind {kind!r} needs a list")
        addr, nbytes = _tensor_span(buffers, "buffer tensor")
        if nbytes != n * layout.block_bytes:
            raise ValueError(
                f"buffer tensor has {nbytes} bytes; {n} blocks of {layout!r} need "
                f"{n * layout.block_bytes}")
        return kind, [addr + i * layout.block_bytes for i in range(n)]
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise TypeError("buffers must be a CPU tensor, a list of CPU tensors or a list of int "
                        f"addresses, got {type(buffers).__name__}")
    items = list(buffers)
    if kind is None:
        per_block = len(items) // n if n and len(items) % n == 0 else 0
        guesses = {1: "block_contiguous", layout.num_planes: "plane_pointers",
                   layout.num_layers * layout.num_planes: "slice_pointers"}
        if per_block not in guesses:
            raise ValueError(f"cannot infer the buffer kind from {len(items)} buffers for {n} "
                             f"blocks of {layout!r}; pass kind= explicitly")
        # Checked in this order so that an ambiguous count (one plane) picks whole blocks.
        for count in (1, layout.num_planes, layout.num_layers * layout.num_planes):
            if per_block == count:
                kind = guesses[count]
                break
    want_count = _core.pointers_per_block(kind, layout) * n
    if len(items) != want_count:
        raise ValueError(f"buffer kind {kind} needs {want_count} buffers for {n} blocks of "
                         f"{layout!r}, got {len(items)}")
    want_bytes = _expected_bytes(kind, layout)
    ptrs = []
    for i, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool):
            ptrs.append(item)
        elif _is_tensor(item):
            addr, nbytes = _tensor_span(item, f"buffer {i}")
            if nbytes != want_bytes:
                raise ValueError(f"buffer {i} has {nbytes} bytes; kind {kind} with {layout!r} "
                                 f"needs {want_bytes}")
            ptrs.append(addr)
        else:
            raise TypeError(f"buffer {i} must be a CPU tensor or an int address, "
                            f"got {type(item).__name__}")
    return kind, ptrs


class RestoreHandle:
    """A restore in progress (:meth:`Store.restore`). Waits release the GIL.

    ``wait(timeout=None)`` -> True once done (False when the timeout passed first);
    ``wait_layer(l)`` blocks until layer ``l`` of every block is in the buffers (raises
    :class:`flatcake.Error` if the restore failed); ``done()``; ``cancel()``; ``result``: the
    :class:`GetResult` of a finished restore (raises ``flatcake.Error``, code "Aborted", when it
    was cancelled, and code "Busy" while it is still running). Dropping an unfinished handle
    cancels the restore and waits for its reads.
    """

    def __init__(self, core: Any, buffers: Any):
        self._core = core
        self._buffers = buffers  # the destination stays alive while reads may land in it

    def wait(self, timeout: Optional[float] = None) -> bool:
        done = self._core.wait(timeout)
        if done:
            self._buffers = None
        return done

    def wait_layer(self, layer: int) -> None:
        self._core.wait_layer(layer)

    def done(self) -> bool:
        return self._core.done()

    def cancel(self) -> None:
        self._core.cancel()

    @property
    def result(self) -> GetResult:
        return self._core.result

    def __repr__(self) -> str:
        return f"RestoreHandle(done={self.done()})"


def gpu_probe(mode: str = "auto") -> dict:
    """The GPU mode this machine runs the device path in ("gds", "cufile-compat", "bounce",
    "none"; or "fake" when asked for), with the reason and the device; docs/gpu.md."""
    return dict(_core.gpu_probe(mode))


def _device_target(layout: KvLayout, k_buffers: Any, v_buffers: Any, pages: Any,
                   fake: bool) -> tuple:
    """(bases, pages, page_bytes) of an engine's paged pool: per layer a K buffer (and a V buffer
    unless the layout has one plane), each [num_pages, ...] with one page per slot of
    layout.slice_bytes or more; ``pages`` one page index per key (a list or an integer tensor).
    CUDA tensors, or CPU tensors on the fake device."""
    layout.validate()
    planes = [list(k_buffers)] + ([list(v_buffers)] if v_buffers is not None else [])
    if len(planes) != layout.num_planes:
        raise ValueError(f"{len(planes)} buffer lists (K, V) for {layout.num_planes} planes")
    for plane in planes:
        if len(plane) != layout.num_layers:
            raise ValueError(f"{len(plane)} per-layer buffers for {layout.num_layers} layers")
    want = "cpu" if fake else "cuda"
    page_bytes = None
    bases = []
    for l in range(layout.num_layers):
        for plane in planes:
            t = plane[l]
            if not _is_tensor(t):
                raise TypeError(f"per-layer buffers must be tensors, got {type(t).__name__}")
            if t.device.type != want:
                raise ValueError(f"per-layer buffers must be {want} tensors here, got {t.device}")
            # Pages along dim 0, each one dense run of memory; the page stride may exceed the
            # page (a layer's view into a buffer whose blocks span every layer).
            if t.dim() < 1 or t.shape[0] == 0 or not t[0].is_contiguous():
                raise ValueError("per-layer buffers must have pages along dim 0, each page one "
                                 "dense range of memory")
            stride = t.stride(0) * t.element_size()
            if page_bytes is None:
                page_bytes = stride
            if stride != page_bytes or t[0].numel() * t.element_size() < layout.slice_bytes:
                raise ValueError(f"every page must be the same size, at least {layout.slice_bytes}"
                                 f" bytes (got {stride})")
            bases.append(t.data_ptr())
    if _is_tensor(pages):
        pages = pages.tolist()
    pages = [int(p) for p in pages]
    npages = planes[0][0].shape[0]
    for p in pages:
        if not 0 <= p < npages:
            raise ValueError(f"page index {p} out of range ({npages} pages)")
    return bases, pages, page_bytes


class GpuRestore:
    """A restore into device memory (:meth:`GpuPath.restore`).

    ``wait()`` -> :class:`GetResult` once every layer is in its pages; ``wait_layer(l)`` blocks
    the host until layer ``l`` is; ``stream_wait_layer(l, stream)`` makes a CUDA stream
    (``torch.cuda.Stream`` or an int ``cudaStream_t``) wait for layer ``l`` without blocking the
    host beyond the layer's copies being queued; ``layer_event(l)``: its ``cudaEvent_t`` as an int.
    The buffers are kept alive until the restore is done.
    """

    def __init__(self, core: Any, buffers: Any):
        self._core = core
        self._buffers = buffers

    def wait(self) -> GetResult:
        result = self._core.wait()
        self._buffers = None
        return result

    def wait_layer(self, layer: int) -> None:
        self._core.wait_layer(layer)

    def stream_wait_layer(self, layer: int, stream: Any) -> None:
        handle = getattr(stream, "cuda_stream", stream)
        self._core.stream_wait_layer(layer, int(handle))

    def layer_event(self, layer: int) -> int:
        return self._core.layer_event(layer)

    def done(self) -> bool:
        return self._core.done()

    def cancel(self) -> None:
        self._core.cancel()


class GpuPath:
    """The store's GPU data path on one CUDA stream (:meth:`Store.gpu`; docs/gpu.md): restores
    into, and puts from, an engine's paged KV pool in device memory, through a bounded window."""

    def __init__(self, core: Any):
        self._core = core
        self._fake = core.info()["mode"] == "fake"

    def restore(self, keys: Sequence[str], layout: KvLayout, k_buffers: Any, v_buffers: Any = None,
                *, pages: Any, arrival_ns: Optional[int] = None) -> GpuRestore:
        """Starts restoring ``keys`` into the pages ``pages[i]`` of the per-layer ``k_buffers`` and
        ``v_buffers`` (one tensor per layer each; ``v_buffers`` None for a one-plane layout)."""
        keys = list(keys)
        bases, pages, page_bytes = _device_target(layout, k_buffers, v_buffers, pages, self._fake)
        if len(pages) != len(keys):
            raise ValueError(f"{len(pages)} page indices for {len(keys)} keys")
        core = self._core.restore(keys, layout, bases=bases, pages=pages, page_bytes=page_bytes,
                                  arrival_ns=arrival_ns)
        return GpuRestore(core, (k_buffers, v_buffers))

    def put(self, keys: Sequence[str], layout: KvLayout, k_buffers: Any, v_buffers: Any = None, *,
            pages: Any, prefix_tail: Optional[str] = None,
            force_medium: Optional[str] = None) -> PutResult:
        """Writes ``keys`` from their pages of the per-layer buffers; returns once stored."""
        keys = list(keys)
        bases, pages, page_bytes = _device_target(layout, k_buffers, v_buffers, pages, self._fake)
        if len(pages) != len(keys):
            raise ValueError(f"{len(pages)} page indices for {len(keys)} keys")
        return self._core.put(keys, layout, bases=bases, pages=pages, page_bytes=page_bytes,
                              prefix_tail=prefix_tail, force_medium=force_medium)

    def info(self) -> dict:
        return dict(self._core.info())

    def stats(self) -> dict:
        return dict(self._core.stats())

    def close(self) -> None:
        self._core.close()


class Store:
    """A FlatCake store. Thread-safe; every method may be called from any thread.

    Keys are strings (or bytes), folded to 128-bit digests by the store. Stored blocks are
    write-once: putting a key that is present skips it and counts it as ``already_present``.
    """

    def __init__(self, core: Any):
        self._core = core

    # --- data path -----------------------------------------------------------------------------
    def put(self, keys: Sequence[str], layout: KvLayout, buffers: Any, *, kind: Optional[str] = None,
            session: str = "", prefix_tail: Optional[str] = None, turn: int = 0,
            prior_reply_tokens: Optional[int] = None, context_tokens: Optional[int] = None,
            shared_prefix: bool = False, force_medium: Optional[str] = None) -> PutResult:
        """Writes ``keys`` from ``buffers``. Hints (all optional) steer placement:

        session: caller's session id ("" = inferred from ``prefix_tail``); prefix_tail: the key of
        the block just before keys[0] in the caller's chain; turn; prior_reply_tokens;
        context_tokens (tokens before keys[0]); shared_prefix; force_medium ("dram" or "ssd").
        """
        keys = list(keys)
        kind, ptrs = _resolve_buffers(buffers, layout, len(keys), kind)
        return self._core.put(keys, layout, kind, ptrs, session=session, prefix_tail=prefix_tail,
                              turn=turn, prior_reply_tokens=prior_reply_tokens,
                              context_tokens=context_tokens, shared_prefix=shared_prefix,
                              force_medium=force_medium)

    def get(self, keys: Sequence[str], layout: KvLayout, buffers: Any, *,
            kind: Optional[str] = None) -> GetResult:
        """Reads ``keys`` into ``buffers``; ``result.found[i]`` tells which blocks arrived."""
        keys = list(keys)
        kind, ptrs = _resolve_buffers(buffers, layout, len(keys), kind)
        return self._core.get(keys, layout, kind, ptrs)

    def exists(self, keys: Iterable[str]) -> int:
        """Number of leading keys present."""
        return self._core.exists(list(keys))

    def lookup(self, keys: Iterable[str]) -> LookupResult:
        """The leading keys present: ``leading_hits``, ``slowest_medium`` ("dram" or "ssd"; what
        a restore of them waits for) and ``dram_bytes`` / ``ssd_bytes``."""
        return self._core.lookup(list(keys))

    def restore(self, keys: Sequence[str], layout: KvLayout, buffers: Any, *,
                kind: Optional[str] = None, arrival_ns: Optional[int] = None) -> "RestoreHandle":
        """Starts restoring ``keys`` into ``buffers`` and returns a :class:`RestoreHandle` at once.

        The store's FC-MAS scheduler serves a request whose hits are all in DRAM before this
        returns, and queues one that needs SSD for its read window, ordered by response ratio.
        ``arrival_ns``: when the request arrived, on ``time.monotonic_ns()``'s clock (default:
        now). ``buffers`` must not be touched until the handle is done; the handle keeps them
        alive until then.
        """
        keys = list(keys)
        kind, ptrs = _resolve_buffers(buffers, layout, len(keys), kind)
        return RestoreHandle(self._core.restore(keys, layout, kind, ptrs, arrival_ns), buffers)

    # --- management ----------------------------------------------------------------------------
    def reclaim(self, medium: str, target_fraction: float) -> int:
        """Frees whole unpinned scopes of ``medium`` down to ``target_fraction``; returns bytes."""
        return self._core.reclaim(medium, target_fraction)

    def clear(self) -> None:
        """Drops every stored block."""
        self._core.clear()

    def stats(self) -> dict:
        return self._core.stats()

    def info(self) -> dict:
        return self._core.info()

    def options(self) -> dict:
        return self._core.options()

    def gpu(self, mode: str = "auto", *, slot_bytes: Any = 32 << 20, slots: int = 2,
            verify: bool = True) -> GpuPath:
        """A GPU data path on this store (docs/gpu.md): ``mode`` "auto" (or FLATCAKE_GPU_MODE),
        "gds", "cufile-compat", "bounce", or "fake" (host memory, for tests). Its window is
        ``slots`` slots of ``slot_bytes``. On a client of the node's daemon the path runs in this
        process over the daemon's read leases (its pins, its FC-MAS admission, this process's
        mapping of the arena); close it before the store. Raises :class:`flatcake.Error` (code
        "Unsupported", with the reason) where no GPU can be used, or on a cluster member's
        client (the path reads this node's media only)."""
        return GpuPath(self._core.gpu(mode, parse_size(slot_bytes, "slot_bytes"), slots, verify))

    def close(self) -> None:
        """Waits for in-flight calls, then releases the store's memory, files and threads."""
        self._core.close()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "flatcake.Store(closed)" if self.closed else f"flatcake.Store({self.info()})"


def open(config: Optional[Mapping[str, Any]] = None, *, policy: str = "flat",  # noqa: A001
         **overrides: Any) -> Store:
    """Opens a store. ``config`` maps option names (see ``option_names()``) to values; sizes may be
    strings like "64GiB"; ``ssd_dirs`` a list or a comma-separated string. The SSD directories
    must exist and be writable; the pool files are created and pre-allocated inside them.

    ``policy``: "flat" (FlatCake, the default) or "tiered" (the Mooncake-style tiered baseline
    behind the same interface, for side-by-side runs: every write enters DRAM, LRU evicts to SSD
    buckets, SSD hits are staged and promoted; its ``restore`` completes before it returns)."""
    return Store(_core.open(normalize_config(config, **overrides), policy))


def connect(address: str, *, tenant: str, client_name: str = "",
            timeout: float = 0.0) -> Store:
    """Connects to the node's daemon, ``flatcake serve`` (docs/serve.md), at ``address``
    ("unix:///path/to/socket" or a socket path) as ``tenant`` (1-64 characters of
    [A-Za-z0-9._-]; a tenant never sees another tenant's blocks). The store returned has the
    embedded store's methods (put, exists, lookup, get, restore, stats, close). Its data path is
    direct: this process maps the daemon's DRAM arena and opens its pool files itself, so no byte
    passes through the daemon. When the daemon restarts, calls in flight fail with
    :class:`flatcake.Error` (or miss) and the next call reconnects by itself. ``timeout``:
    seconds to wait for the daemon at each connection attempt (0: the client's default)."""
    if not getattr(_core, "has_daemon_client", False):
        err = Error("Unsupported: this flatcake was built without the daemon client (install "
                    "libprotobuf-dev, protobuf-compiler and libtomlplusplus-dev, and rebuild)")
        err.code = "Unsupported"
        raise err
    return Store(_core.connect(address, tenant, client_name, timeout))
