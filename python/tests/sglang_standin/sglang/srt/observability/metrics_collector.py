"""Stand-in of sglang.srt.observability.metrics_collector at SGLang 8905cbd: the storage metrics
class and the check SGLang's collector makes on every scheduler step with --enable-metrics."""

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class StorageMetrics:
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


def log_storage_metrics(storage_metrics: Optional[StorageMetrics] = None) -> int:
    """What StorageMetricsCollector.log_storage_metrics does, minus Prometheus: returns the
    number of figures it would log."""
    if storage_metrics is None:
        return 0
    assert isinstance(storage_metrics, StorageMetrics)
    return (len(storage_metrics.prefetch_pgs) + len(storage_metrics.backup_pgs) +
            len(storage_metrics.prefetch_bandwidth) + len(storage_metrics.backup_bandwidth))
