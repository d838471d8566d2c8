"""Metric names the chart's dashboards and alert rules may use although no running process exports
them yet. Every entry says why; everything else must appear in a live scrape of the embedded
cluster (or be a series Prometheus makes itself, see ``promql.SYNTHETIC``)."""

from __future__ import annotations

NOT_YET_EXPORTED: dict[str, str] = {
    # Master -> slave CommitLog replication is not implemented yet. These are the names (and
    # labels: cluster, broker, slave) its master-side metrics are to use; the alerts
    # RocketMQReplicationLagHigh and RocketMQSlaveOutOfSync are unit-tested with promtool meanwhile.
    "rocketmq_broker_replication_lag_bytes": "replication not implemented yet",
    "rocketmq_broker_replication_slave_in_sync": "replication not implemented yet",
}
