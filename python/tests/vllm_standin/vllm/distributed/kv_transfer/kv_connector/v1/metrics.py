"""Stand-in of vllm/distributed/kv_transfer/kv_connector/v1/metrics.py (the newest copy read,
commit unknown; the one 00f4240e's scheduler needs, with KVConnectorStats.to_dict): the stats a
connector returns from get_kv_connector_stats (workers and scheduler) and rebuilds with
build_kv_connector_stats in the logger process, and the Prometheus base class
build_prom_metrics returns. prometheus_client is not installed here: metric_types maps the
stand-in's Gauge / Counter / Histogram placeholders to whatever classes the caller passes."""

from dataclasses import dataclass, field
from typing import Any


class Gauge:  # placeholders for prometheus_client's classes (the keys of metric_types)
    pass


class Counter:
    pass


class Histogram:
    pass


@dataclass
class KVConnectorStats:
    """Serializable transfer telemetry (plain data in `data`); subclasses fold workers' objects
    with aggregate() and summarize with reduce()."""

    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def reset(self):
        raise NotImplementedError

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        raise NotImplementedError

    def reduce(self) -> dict[str, int | float]:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError


class KVConnectorLogging:
    """The logger process: each step's stats dict rebuilt by the connector class, accumulated,
    reduced into one log line per interval (here: appended to `lines`)."""

    def __init__(self, connector_cls) -> None:
        self.connector_cls = connector_cls
        self.lines: list[str] = []
        self.reset()

    def reset(self) -> None:
        self.transfer_stats_accumulator = None

    def observe(self, transfer_stats_data: dict[str, Any]) -> None:
        stats = self.connector_cls.build_kv_connector_stats(transfer_stats_data)
        if stats is None:  # vLLM warns once and drops the stats
            return
        if self.transfer_stats_accumulator is None:
            self.transfer_stats_accumulator = stats
        else:
            self.transfer_stats_accumulator = self.transfer_stats_accumulator.aggregate(stats)

    def log(self) -> None:
        acc = self.transfer_stats_accumulator
        if acc is not None and not acc.is_empty():
            self.lines.append("KV Transfer metrics: " + ", ".join(
                f"{k}={v}" for k, v in acc.reduce().items()))
            self.reset()


class KVConnectorPromMetrics:
    """Base of a connector's Prometheus metrics (build_prom_metrics returns a subclass)."""

    def __init__(self, vllm_config, metric_types: dict, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]) -> None:
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._gauge_cls = metric_types[Gauge]
        self._counter_cls = metric_types[Counter]
        self._histogram_cls = metric_types[Histogram]
        self._labelnames = labelnames
        self.per_engine_labelvalues = per_engine_labelvalues

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        raise NotImplementedError
