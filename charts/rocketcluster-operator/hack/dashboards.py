#!/usr/bin/env python3
"""Generate the chart's Grafana dashboards (dashboards/*.json) from one compact description.

    python charts/rocketcluster-operator/hack/dashboards.py          # rewrite the JSON files
    python charts/rocketcluster-operator/hack/dashboards.py --check  # exit 1 if they are stale

The JSON files are what the chart ships (and what the tests parse); this script keeps their layout,
variables and datasource references uniform. Metric names are those the services export
(``rocketmq_nameserver_*``, ``rocketmq_broker_*``, the RocketMQ exporter's ``rocketmq_group_diff``,
``rocketmq_group_get_latency_by_storetime`` ..., ``rocket_operator_*``)
plus Prometheus's own ``up`` and ``ALERTS``; the tests check every one against a live scrape.
Jobs and target labels (``job``, ``namespace``, ``cluster``, ``broker``) are set by the chart's
PodMonitors/ServiceMonitor.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"

NS = 'namespace=~"$namespace"'
CL = 'cluster=~"$cluster"'
SEL = f"{NS}, {CL}"
NSJOB = f'job="rocketmq-nameserver", {SEL}'
BRJOB = f'job="rocketmq-broker", {SEL}, broker=~"$broker"'
OPJOB = 'job="rocketcluster-operator"'


@dataclass
class Panel:
    title: str
    exprs: list[tuple[str, str]]  # (expr, legend)
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    thresholds: list[tuple[float, str]] = field(default_factory=list)
    instant: bool = False
    stack: bool = False


def var_query(name: str, label: str, query: str, include_all: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-var"},
        "refresh": 2,
        "includeAll": include_all,
        "allValue": ".*",
        "multi": True,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
        "options": [],
    }


def datasource_var() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "hide": 0,
        "current": {},
        "options": [],
    }


def common_vars() -> list[dict[str, Any]]:
    return [
        datasource_var(),
        var_query("namespace", "Namespace", 'label_values(up{job=~"rocketmq-.*"}, namespace)'),
        var_query("cluster", "Cluster", 'label_values(up{job=~"rocketmq-.*", namespace=~"$namespace"}, cluster)'),
    ]


def render_panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    steps = [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in panel.thresholds]
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if panel.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if panel.stack else "none", "group": "A"},
        }
        if panel.thresholds:
            defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    out: dict[str, Any] = {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {
                "datasource": DS,
                "expr": expr,
                "legendFormat": legend,
                "refId": chr(ord("A") + i),
                "instant": panel.instant,
                "range": not panel.instant,
                **({"format": "table"} if panel.kind == "table" else {}),
            }
            for i, (expr, legend) in enumerate(panel.exprs)
        ],
    }
    if panel.kind == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    elif panel.kind == "timeseries":
        out["options"] = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "table":
        out["options"] = {"showHeader": True}
        out["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return out


def dashboard(uid: str, title: str, description: str, rows: list[tuple[str, list[Panel]]],
              variables: list[dict[str, Any]], tags: list[str]) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, row_panels in rows:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid += 1
        y += 1
        x, row_h = 0, 0
        for panel in row_panels:
            if x + panel.width > 24:
                x, y = 0, y + row_h
                row_h = 0
            panels.append(render_panel(panel, pid, x, y))
            pid += 1
            x += panel.width
            row_h = max(row_h, panel.height)
        y += row_h
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["rocketcluster", "rocketmq", *tags],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "links": [{"type": "dashboards", "tags": ["rocketcluster"], "asDropdown": True, "title": "RocketCluster",
                   "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": panels,
    }


def overview() -> dict[str, Any]:
    stats = [
        Panel("NameServers up", [(f"sum(up{{{NSJOB}}})", "")], kind="stat", width=4, height=4),
        Panel("Brokers up", [(f'sum(up{{job="rocketmq-broker", {SEL}}})', "")], kind="stat", width=4, height=4),
        Panel("Broker groups registered", [(f"max(rocketmq_nameserver_broker_groups{{{NSJOB}}})", "")],
              kind="stat", width=4, height=4,
              description="Broker names with at least one live address, as the NameServers see them."),
        Panel("Topics", [(f"max(rocketmq_nameserver_topics{{{NSJOB}}})", "")], kind="stat", width=4, height=4),
        Panel("Total consumer lag", [(f"sum(rocketmq_group_diff{{{SEL}}})", "")], kind="stat", width=4, height=4,
              thresholds=[(10000, "orange"), (100000, "red")]),
        Panel("Fullest store disk", [(f'max(rocketmq_broker_disk_usage_ratio{{job="rocketmq-broker", {SEL}}})', "")],
              kind="stat", unit="percentunit", width=4, height=4, thresholds=[(0.75, "orange"), (0.85, "red")]),
    ]
    traffic = [
        Panel("Messages in by topic", [(
            f'sum by (topic) (rate(rocketmq_broker_messages_in_total{{job="rocketmq-broker", {SEL}}}[{RATE}]))',
            "{{topic}}")], unit="ops", stack=True,
            description="Messages stored per second (producer TPS; the brokers also export the RocketMQ "
                        "exporter's last-minute rocketmq_producer_tps)."),
        Panel("Messages out by consumer group", [(
            f'sum by (group) (rate(rocketmq_broker_messages_out_total{{job="rocketmq-broker", {SEL}}}[{RATE}]))',
            "{{group}}")], unit="ops", stack=True,
            description="Messages returned to pulls per second (consumer TPS; also exported as "
                        "rocketmq_consumer_tps)."),
        Panel("Bytes in / out", [
            (f'sum(rate(rocketmq_broker_in_bytes_total{{job="rocketmq-broker", {SEL}}}[{RATE}]))', "in"),
            (f'sum(rate(rocketmq_broker_out_bytes_total{{job="rocketmq-broker", {SEL}}}[{RATE}]))', "out"),
        ], unit="Bps"),
        Panel("Consumer lag by group", [(f"sum by (group) (rocketmq_group_diff{{{SEL}}})", "{{group}}")],
              description="Messages not yet consumed (rocketmq_group_diff, summed over brokers and topics)."),
    ]
    control = [
        Panel("Broker addresses registered, per NameServer",
              [(f"rocketmq_nameserver_brokers{{{NSJOB}}}", "{{instance}}")],
              description="Every NameServer should see the same number; a difference means a broker "
                          "cannot reach one of them."),
        Panel("Route lookups and broker evictions", [
            (f"sum by (result) (rate(rocketmq_nameserver_route_lookups_total{{{NSJOB}}}[{RATE}]))",
             "lookups {{result}}"),
            (f"sum by (reason) (rate(rocketmq_nameserver_broker_evictions_total{{{NSJOB}}}[{RATE}]))",
             "evictions {{reason}}"),
        ], unit="ops"),
        Panel("NameServer request latency (p99)", [(
            f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_nameserver_request_duration_seconds_bucket"
            f"{{{NSJOB}}}[{RATE}])))", "p99")], unit="s"),
        Panel("Firing alerts", [(
            'sort_desc(count by (alertname, severity) (ALERTS{alertstate="firing", '
            'alertname=~"RocketMQ.*|RocketCluster.*"}))', "")],
            kind="table", instant=True),
    ]
    return dashboard(
        "rocketcluster-overview", "RocketCluster / Cluster overview",
        "NameServers, brokers, traffic and lag of RocketCluster clusters.",
        [("Health", stats), ("Traffic", traffic), ("NameServers", control)],
        common_vars(), ["overview"],
    )


def broker_vars() -> list[dict[str, Any]]:
    return [*common_vars(), var_query(
        "broker", "Broker group",
        'label_values(rocketmq_broker_up{namespace=~"$namespace", cluster=~"$cluster"}, broker)')]


def broker() -> dict[str, Any]:
    throughput = [
        Panel("Messages in by broker", [(
            f"sum by (broker, instance) (rate(rocketmq_broker_messages_in_total{{{BRJOB}}}[{RATE}]))",
            "{{broker}} {{instance}}")], unit="ops",
            description="Broker put TPS (also exported as the RocketMQ exporter's rocketmq_broker_tps)."),
        Panel("Messages out by broker", [(
            f"sum by (broker, instance) (rate(rocketmq_broker_messages_out_total{{{BRJOB}}}[{RATE}]))",
            "{{broker}} {{instance}}")], unit="ops",
            description="Messages returned to pulls (also exported as the RocketMQ exporter's rocketmq_broker_qps)."),
        Panel("Bytes in by topic", [(
            f"sum by (topic) (rate(rocketmq_broker_in_bytes_total{{{BRJOB}}}[{RATE}]))", "{{topic}}")],
            unit="Bps", stack=True),
        Panel("Requests by code", [(
            f"sum by (request_code) (rate(rocketmq_broker_requests_total{{{BRJOB}}}[{RATE}]))",
            "{{request_code}}")], unit="reqps", stack=True),
    ]
    latency = [
        Panel("Send latency", [
            (f"histogram_quantile(0.5, sum by (le) (rate(rocketmq_broker_send_latency_seconds_bucket{{{BRJOB}}}"
             f"[{RATE}])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_broker_send_latency_seconds_bucket{{{BRJOB}}}"
             f"[{RATE}])))", "p99"),
        ], unit="s", width=8),
        Panel("Pull latency (excluding long-poll parking)", [
            (f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_broker_pull_latency_seconds_bucket{{{BRJOB}}}"
             f"[{RATE}])))", "p99"),
        ], unit="s", width=8),
        Panel("CommitLog flush latency", [
            (f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_broker_flush_latency_seconds_bucket{{{BRJOB}}}"
             f"[{RATE}])))", "p99"),
        ], unit="s", width=8),
        Panel("Error responses", [(
            f'sum by (request_code, response_code) (rate(rocketmq_broker_requests_total{{{BRJOB}, '
            f'response_code!~"0|none"}}[{RATE}]))', "{{request_code}} -> {{response_code}}")], unit="reqps"),
        Panel("Sends rejected (SYSTEM_BUSY)", [(
            f"sum by (broker, reason) (rate(rocketmq_broker_send_rejected_total{{{BRJOB}}}[{RATE}]))",
            "{{broker}} {{reason}}")], unit="reqps"),
    ]
    store = [
        Panel("Store disk usage", [(f"rocketmq_broker_disk_usage_ratio{{{BRJOB}}}", "{{broker}} {{instance}}")],
              unit="percentunit", thresholds=[(0.85, "orange"), (0.9, "red")],
              description="At 85 % the broker deletes CommitLog files early; at 90 % it refuses writes."),
        Panel("CommitLog retained and written", [
            (f"rocketmq_broker_commitlog_max_offset_bytes{{{BRJOB}}}"
             f" - rocketmq_broker_commitlog_min_offset_bytes{{{BRJOB}}}", "retained {{instance}}"),
        ], unit="bytes"),
        Panel("CommitLog write rate", [
            (f"deriv(rocketmq_broker_commitlog_max_offset_bytes{{{BRJOB}}}[{RATE}])", "{{instance}}"),
        ], unit="Bps", width=8),
        Panel("Connections and parked pulls", [
            (f"rocketmq_broker_client_connections{{{BRJOB}}}", "connections {{instance}}"),
            (f"rocketmq_broker_parked_pulls{{{BRJOB}}}", "parked pulls {{instance}}"),
        ], width=8),
        Panel("Sends in flight", [(f"rocketmq_broker_in_flight_sends{{{BRJOB}}}", "{{instance}}")], width=8),
    ]
    replication = [
        Panel("Replication lag per slave", [(
            f"rocketmq_broker_ha_slave_lag_bytes{{{BRJOB}}}", "{{broker}} -> {{slave}}")], unit="bytes",
            thresholds=[(64 * 1024 * 1024, "orange"), (256 * 1024 * 1024, "red")],
            description="Bytes of CommitLog the master has that the slave has not acknowledged."),
        Panel("Slaves in sync", [(
            f"sum by (broker) (rocketmq_broker_ha_slave_in_sync{{{BRJOB}}})", "{{broker}}")],
            description="Slaves within haSlaveFallbehindMax of their master (counted for sync replication)."),
    ]
    timer = [
        Panel("Timer delivery lag", [
            (f"histogram_quantile(0.5, sum by (le) (rate(rocketmq_broker_timer_delivery_lag_seconds_bucket{{{BRJOB}}}"
             f"[{RATE}])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(rocketmq_broker_timer_delivery_lag_seconds_bucket"
             f"{{{BRJOB}}}[{RATE}])))", "p99"),
        ], unit="s", width=8, thresholds=[(5, "orange"), (30, "red")],
            description="Delivery time of timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC) minus the end of "
                        "their timer-wheel slot: how late the wheel delivers."),
        Panel("Pending and due timers", [
            (f"rocketmq_broker_timer_pending{{{BRJOB}}}", "pending {{instance}}"),
            (f"rocketmq_broker_timer_due_undelivered{{{BRJOB}}}", "due, not delivered {{instance}}"),
        ], width=8, description="Timer messages waiting in the wheel (or not yet enqueued), and those whose "
                                "time has come that the master has not delivered yet."),
        Panel("Timer deliveries and refusals", [
            (f"sum by (broker) (rate(rocketmq_broker_timer_delivered_total{{{BRJOB}}}[{RATE}]))",
             "delivered {{broker}}"),
            (f"sum by (broker) (rate(rocketmq_broker_timer_past_due_total{{{BRJOB}}}[{RATE}]))",
             "past due at send {{broker}}"),
            (f"sum by (broker, reason) (rate(rocketmq_broker_timer_refused_total{{{BRJOB}}}[{RATE}]))",
             "refused {{reason}} {{broker}}"),
        ], unit="ops", width=8),
    ]
    process = [
        Panel("Broker CPU", [(f"rate(process_cpu_seconds_total{{{BRJOB}}}[{RATE}])", "{{broker}} {{instance}}")],
              unit="short", width=8, description="CPU cores used by each broker process (process_cpu_seconds_total)."),
        Panel("Broker resident memory", [(f"process_resident_memory_bytes{{{BRJOB}}}", "{{broker}} {{instance}}")],
              unit="bytes", width=8,
              description="Resident set of each broker process; mapped CommitLog pages are counted while resident."),
        Panel("Broker open file descriptors", [
            (f"process_open_fds{{{BRJOB}}}", "open {{instance}}"),
            (f"process_max_fds{{{BRJOB}}}", "limit {{instance}}"),
        ], width=8),
    ]
    return dashboard(
        "rocketcluster-broker", "RocketCluster / Broker",
        "Throughput, latency, store, replication and process figures of RocketCluster brokers.",
        [("Throughput", throughput), ("Latency and errors", latency), ("Store", store),
         ("Replication", replication), ("Timer messages", timer), ("Process", process)],
        broker_vars(), ["broker"],
    )


def consumer_groups() -> dict[str, Any]:
    variables = [
        *common_vars(),
        var_query("group", "Consumer group",
                  'label_values(rocketmq_group_diff{namespace=~"$namespace", cluster=~"$cluster"}, group)'),
        var_query("topic", "Topic",
                  'label_values(rocketmq_group_diff{namespace=~"$namespace", cluster=~"$cluster", '
                  'group=~"$group"}, topic)'),
    ]
    g = f'{SEL}, group=~"$group", topic=~"$topic"'
    lag = [
        Panel("Lag by group and topic", [(f"sum by (group, topic) (rocketmq_group_diff{{{g}}})",
                                          "{{group}} / {{topic}}")],
              description="Messages not yet consumed, summed over broker groups (rocketmq_group_diff)."),
        Panel("Lag by store time", [(
            f"max by (group, topic) (rocketmq_group_get_latency_by_storetime{{{g}}})", "{{group}} / {{topic}}")],
            unit="ms",
            description="How old the oldest unconsumed message is (now minus its store time, worst queue and "
                        "broker group; 0 when caught up): rocketmq_group_get_latency_by_storetime, the "
                        "RocketMQ exporter's name and unit."),
        Panel("Lag growth", [(f"sum by (group, topic) (deriv(rocketmq_group_diff{{{g}}}[10m]))",
                              "{{group}} / {{topic}}")], unit="ops",
              description="Positive: the group falls further behind (what RocketMQConsumerLagGrowing alerts on)."),
        Panel("Lag per queue", [(
            f'rocketmq_broker_consumer_lag{{job="rocketmq-broker", {g}}}',
            "{{group}} {{topic}} {{broker}}:{{queue_id}}")],
            description="One slow or unassigned queue shows up here before it moves the total."),
        Panel("Time to catch up at the current rate", [(
            f"sum by (group, topic) (rocketmq_group_diff{{{g}}}) / "
            f'sum by (group, topic) (rate(rocketmq_broker_messages_out_total{{job="rocketmq-broker", {g}}}'
            f"[{RATE}]))", "{{group}} / {{topic}}")], unit="s", width=24),
    ]
    rates = [
        Panel("Consume rate", [(
            f'sum by (group, topic) (rate(rocketmq_broker_messages_out_total{{job="rocketmq-broker", {g}}}[{RATE}]))',
            "{{group}} / {{topic}}")], unit="ops",
            description="Consumer TPS per group (also exported as the RocketMQ exporter's rocketmq_consumer_tps)."),
        Panel("Produce rate of the same topics", [(
            f'sum by (topic) (rate(rocketmq_broker_messages_in_total{{job="rocketmq-broker", {SEL}, '
            f'topic=~"$topic"}}[{RATE}]))', "{{topic}}")], unit="ops"),
        Panel("Groups: online consumers and message model", [(
            f"sum by (group, topic, countOfOnlineConsumers, msgModel) (rocketmq_group_diff{{{g}}})", "")],
            kind="table", instant=True, width=24,
            description="Value: current lag. A group with lag and 0 online consumers is not being consumed."),
    ]
    return dashboard(
        "rocketcluster-consumer-groups", "RocketCluster / Consumer groups and lag",
        "Lag, consume rate and catch-up time of every consumer group.",
        [("Lag", lag), ("Rates", rates)], variables, ["consumers"],
    )


def operator() -> dict[str, Any]:
    variables = [
        datasource_var(),
        var_query("namespace", "Namespace", f"label_values(rocket_operator_cluster_phase{{{OPJOB}}}, namespace)"),
        var_query("cluster", "Cluster",
                  f'label_values(rocket_operator_cluster_phase{{{OPJOB}, namespace=~"$namespace"}}, cluster)'),
    ]
    c = f"{OPJOB}, {SEL}"
    health = [
        Panel("Operator up", [(f"sum(up{{{OPJOB}}})", "")], kind="stat", width=6, height=4,
              thresholds=[(0, "red"), (1, "green")]),
        Panel("RocketClusters served", [(f"max(rocket_operator_clusters{{{OPJOB}}})", "")],
              kind="stat", width=6, height=4),
        Panel("Degraded clusters", [(
            f'count(rocket_operator_cluster_phase{{{c}, rocket_operator_cluster_phase="Degraded"}} == 1) or vector(0)',
            "")], kind="stat", width=6, height=4, thresholds=[(1, "red")]),
        Panel("Reconcile errors (1h)", [(
            f"sum(increase(rocket_operator_reconcile_errors_total{{{OPJOB}}}[1h])) or vector(0)", "")],
            kind="stat", width=6, height=4, thresholds=[(1, "orange")]),
        Panel("Cluster phases", [(
            f"rocket_operator_cluster_phase{{{c}}} == 1", "")], kind="table", instant=True, width=24, height=6,
            description="The phase each RocketCluster reports in its status."),
    ]
    reconcile = [
        Panel("Reconciliation passes by result", [(
            f"sum by (result) (rate(rocket_operator_reconciles_total{{{OPJOB}}}[{RATE}]))", "{{result}}")],
            unit="ops", stack=True),
        Panel("Reconcile errors by kind", [(
            f"sum by (kind) (rate(rocket_operator_reconcile_errors_total{{{OPJOB}}}[{RATE}]))", "{{kind}}")],
            unit="ops"),
        Panel("Reconcile duration", [
            (f"histogram_quantile(0.5, sum by (le) (rate(rocket_operator_reconcile_duration_seconds_bucket"
             f"{{{OPJOB}}}[{RATE}])))", "p50"),
            (f"histogram_quantile(0.99, sum by (le) (rate(rocket_operator_reconcile_duration_seconds_bucket"
             f"{{{OPJOB}}}[{RATE}])))", "p99"),
        ], unit="s"),
        Panel("Rolling restarts (pods rolled per hour)", [(
            f"sum by (namespace, cluster) (increase(rocket_operator_rolling_restarts_total{{{c}}}[1h]))",
            "{{namespace}}/{{cluster}}")]),
        Panel("Operator CPU", [(f"rate(process_cpu_seconds_total{{{OPJOB}}}[{RATE}])", "{{instance}}")],
              description="CPU cores used by the operator process."),
        Panel("Operator resident memory", [(f"process_resident_memory_bytes{{{OPJOB}}}", "{{instance}}")],
              unit="bytes"),
    ]
    drains = [
        Panel("Messages pending on draining broker groups", [(
            f"rocket_operator_drain_pending_messages{{{c}}}", "{{namespace}}/{{cluster}} {{broker}}")], width=24,
            description="Scale-in waits for these to reach zero (RocketClusterDrainStuck fires when they stop "
                        "going down for 30 minutes)."),
    ]
    return dashboard(
        "rocketcluster-operator", "RocketCluster / Operator",
        "The RocketCluster operator: health, reconciliation, phases and drains.",
        [("Health", health), ("Reconciliation", reconcile), ("Scale-in drains", drains)],
        variables, ["operator"],
    )


DASHBOARDS = {
    "cluster-overview.json": overview,
    "broker.json": broker,
    "consumer-groups.json": consumer_groups,
    "operator.json": operator,
}


def render() -> dict[str, str]:
    return {name: json.dumps(make(), indent=2, ensure_ascii=False) + "\n" for name, make in DASHBOARDS.items()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, text in render().items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run {Path(__file__).name}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
