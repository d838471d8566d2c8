"""The controller's Raft wrapper in-process: a one-peer pysyncobj group applies proposals, writes
its snapshot (log compaction) and journal, and a new member on the same data comes back with the
same state."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rocket.controller.config import ControllerConfig, parse_peers
from rocket.controller.raft import NotLeaderError, RaftNode
from rocket.controller.state import ReplicasInfoManager
from rocket.protocol.codes import ResponseCode
from tests.support import reserve_ports

pytestmark = pytest.mark.timeout(60)


def config(tmp_path: Path, port: int) -> ControllerConfig:
    return ControllerConfig(peers=parse_peers(f"127.0.0.1:{port}/{port + 1}"), self_address=f"127.0.0.1:{port}",
                            secret="unit-test-secret-0123456789", data_dir=str(tmp_path / "raft"))


async def wait_leader(node: RaftNode, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not node.is_leader:
        assert time.monotonic() < deadline, f"no leadership: {node.status()}"
        await asyncio.sleep(0.05)


async def test_state_survives_compaction_and_a_restart(tmp_path: Path) -> None:
    port = reserve_ports([0, 1])
    mgr = ReplicasInfoManager()
    node = RaftNode(config(tmp_path, port), mgr)
    await node.start()
    try:
        await wait_leader(node)
        for bid in (1, 2, 3):
            result = await node.propose([{"type": "APPLY_BROKER_ID", "clusterName": "C", "brokerName": "g",
                                          "brokerAddress": f"h:{bid}", "brokerId": bid,
                                          "registerCheckCode": f"h:{bid};1"}])
            assert result == [(ResponseCode.SUCCESS, None)]
        result = await node.propose([{"type": "ELECT_MASTER", "brokerName": "g", "newMasterBrokerId": 2,
                                      "masterEpoch": 0}])
        assert result == [(ResponseCode.SUCCESS, None)]
        # a refused event is reported with its code, and nothing after it in the entry is applied
        result = await node.propose([{"type": "ELECT_MASTER", "brokerName": "g", "newMasterBrokerId": 3,
                                      "masterEpoch": 0}, {"type": "CLEAN_BROKER_DATA", "brokerName": "g"}])
        assert result == [(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, "another election was committed first")]
        node._syncobj.forceLogCompaction()  # type: ignore[union-attr]
        dump = tmp_path / "raft" / "raft.dump"
        deadline = time.monotonic() + 10
        while not dump.exists():
            assert time.monotonic() < deadline, "no snapshot written"
            await asyncio.sleep(0.05)
        result = await node.propose([{"type": "UPDATE_BROKER_ADDRESS", "clusterName": "C", "brokerName": "g",
                                      "brokerAddress": "moved:1", "brokerId": 1}])  # after the snapshot
        assert result == [(ResponseCode.SUCCESS, None)]
        expected = mgr.to_json()
    finally:
        await node.stop()
    assert oct((tmp_path / "raft").stat().st_mode & 0o777) == "0o700"

    again = ReplicasInfoManager()
    node = RaftNode(config(tmp_path, port), again)
    await node.start()
    try:
        await wait_leader(node)
        assert again.to_json() == expected
        assert again.groups["g"].master_broker_id == 2 and again.groups["g"].address(1) == "moved:1"
    finally:
        await node.stop()
    with pytest.raises(NotLeaderError):
        await node.propose([{"type": "CLEAN_BROKER_DATA", "brokerName": "g"}])
