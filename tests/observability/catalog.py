"""Metric names the chart's dashboards and alert rules may use although no running process exports
them yet. Every entry says why; everything else must appear in a live scrape of the embedded
cluster (or be a series Prometheus makes itself, see ``promql.SYNTHETIC``)."""

from __future__ import annotations

NOT_YET_EXPORTED: dict[str, str] = {
    # (replication landed: rocketmq_broker_ha_slave_lag_bytes / _slave_in_sync are exported by
    # masters with a connected slave, which `rocket local up` now starts for every group)
}
