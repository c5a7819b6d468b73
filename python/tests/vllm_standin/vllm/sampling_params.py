"""Stand-in of the SamplingParams fields the engine stand-in reads (vllm/sampling_params.py)."""

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class SamplingParams:
    max_tokens: int = 16
    extra_args: Optional[dict[str, Any]] = None  # "kv_transfer_params" goes to the connector
    skip_reading_prefix_cache: Optional[bool] = None
