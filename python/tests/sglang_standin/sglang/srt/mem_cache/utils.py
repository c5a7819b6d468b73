"""Stand-in of get_hash_str from sglang.srt.mem_cache.utils at SGLang 8905cbd (see
../../../README.md): the page keys HiCache gives storage backends."""

from __future__ import annotations

import hashlib
import struct
from typing import List, Optional, Sequence, Union


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}I", *tokens)  # each token id as a little-endian uint32


def get_hash_str(token_ids: Sequence[int], prior_hash: Optional[str] = None,
                 page_size: Optional[int] = None) -> Union[str, List[str]]:
    """Chained SHA-256 keys (64 hex characters). With page_size: one key per page of page_size
    tokens (a short last page included), each the digest of the previous key's 32 bytes (or of
    prior_hash, if given, for the first page) followed by the page's token ids. Without: one key
    for all the tokens."""
    tokens = list(token_ids)
    prior = bytes.fromhex(prior_hash) if prior_hash else None
    if page_size is None:
        return hashlib.sha256((prior or b"") + _token_bytes(tokens)).hexdigest()
    if page_size <= 0:
        raise ValueError("page_size must be positive")
    keys = []
    for start in range(0, len(tokens), page_size):
        digest = hashlib.sha256((prior or b"") + _token_bytes(tokens[start:start + page_size]))
        prior = digest.digest()
        keys.append(digest.hexdigest())
    return keys
