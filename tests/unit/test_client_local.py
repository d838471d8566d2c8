"""The embedded cluster's pure parts: port layout, percentiles, the shipped LogHub sample."""

from __future__ import annotations

from pathlib import Path

from rocket.local import PACKAGE_ROOT, LocalCluster, loghub_logs, ports_for
from rocket.percentiles import percentile


def test_port_layout_matches_rocketmq_defaults() -> None:
    masters = {
        "namesrv-1": (9876, 9886),
        "namesrv-2": (9877, 9887),
        "broker-a": (10911, 10915),
        "broker-b": (10921, 10925),
    }
    assert ports_for(9876, slaves=False) == masters
    assert ports_for(9876) == {**masters, "broker-a-slave": (10931, 10935), "broker-b-slave": (10941, 10945)}


def test_plan_runs_nameservers_first_with_the_cli(tmp_path: Path) -> None:
    plan = LocalCluster(tmp_path, 9876, failover="manual").plan()
    assert [p.name for p in plan] == ["namesrv-1", "namesrv-2", "broker-a", "broker-b", "broker-a-slave",
                                      "broker-b-slave"]
    broker = plan[2].argv
    assert broker[1:4] == ["-m", "rocket.cli", "broker"]
    assert broker[broker.index("--namesrv") + 1] == "127.0.0.1:9876;127.0.0.1:9877"
    assert broker[broker.index("--store-dir") + 1] == str(tmp_path.resolve() / "broker-a")
    assert broker[broker.index("--broker-id") + 1] == "0"
    slave = plan[4].argv
    assert slave[slave.index("--name") + 1] == "broker-a"  # the same group
    assert slave[slave.index("--broker-id") + 1] == "1" and slave[slave.index("--role") + 1] == "SLAVE"
    assert slave[slave.index("--store-dir") + 1] == str(tmp_path.resolve() / "broker-a-slave")
    assert [p.name for p in LocalCluster(tmp_path, 9876, slaves=False).plan()][2:] == ["broker-a", "broker-b"]


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile([], 50) == 0.0
    assert percentile([7.0], 99.9) == 7.0


def test_the_loghub_sample_ships_with_the_package() -> None:
    folder = PACKAGE_ROOT / "data" / "loghub"
    logs = loghub_logs(folder)
    assert len(logs) == 12 and all(len(lines) == 200 for lines in logs.values())
    assert (folder / "LICENSE").read_text().startswith("LICENSE OF LOGHUB")
    assert "ISSRE" in (folder / "README.md").read_text()


def test_plan_in_controller_mode_runs_three_controllers_before_the_brokers(tmp_path: Path) -> None:
    plan = LocalCluster(tmp_path, 9876).plan()
    assert [p.name for p in plan][:5] == ["namesrv-1", "namesrv-2", "controller-1", "controller-2", "controller-3"]
    ctl = plan[2].argv
    assert ctl[ctl.index("--controller-peers") + 1] == "127.0.0.1:9896/9898,127.0.0.1:9906/9908,127.0.0.1:9916/9918"
    assert ctl[ctl.index("--secret-file") + 1] == str(tmp_path.resolve() / "controller-secret")
    broker = plan[5].argv
    assert "enableControllerMode=true" in broker and "allAckInSyncStateSet=true" in broker
    assert "controllerAddr=127.0.0.1:9896;127.0.0.1:9906;127.0.0.1:9916" in broker
    # without slaves there is nothing to fail over to: no controllers
    assert not [p for p in LocalCluster(tmp_path, 9876, slaves=False).plan() if p.kind == "controller"]


def test_free_base_port_keeps_the_layout_below_the_ephemeral_ports() -> None:
    # an outgoing connection takes its port from the ephemeral range: a layout there can lose a
    # port between the check and the bind (a slave once failed with EADDRINUSE)
    from rocket.local import _all_ports, ephemeral_port_range, find_free_base_port

    low = ephemeral_port_range()[0]
    for _ in range(20):
        base = find_free_base_port()
        assert 20000 <= base and max(_all_ports(base)) < low
