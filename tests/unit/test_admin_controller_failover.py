"""``Admin.controller_failover`` (``rocket cluster failover`` in controller mode) against a real
remoting server standing in for a controller that is still electing its leader."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from rocket.client.admin import Admin
from rocket.remoting import RemotingCommand, RemotingConnectError, RemotingConnection, RemotingServer, RequestCode


class ElectingController:
    """Answers CONTROLLER_GET_METADATA_INFO without ``controllerLeaderAddress`` until
    ``leader_after`` seconds have passed, then names itself; ELECT_MASTER makes the broker master."""

    def __init__(self, leader_after: float, broker: FakeBroker) -> None:
        self.server = RemotingServer(host="127.0.0.1")
        self.leader_after = leader_after
        self.started = time.monotonic()
        self.broker = broker
        self.elections: list[dict[str, str]] = []

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        self.server.register(RequestCode.CONTROLLER_GET_METADATA_INFO, self._metadata)
        self.server.register(RequestCode.CONTROLLER_ELECT_MASTER, self._elect)
        await self.server.start()
        self.started = time.monotonic()

    def _metadata(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        if time.monotonic() - self.started < self.leader_after:
            return request.response(ext_fields={"isLeader": "false"})
        return request.response(ext_fields={"isLeader": "true", "controllerLeaderAddress": self.addr})

    def _elect(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.elections.append(dict(request.ext_fields))
        self.broker.role = "SYNC_MASTER"
        return request.response()


class FakeBroker:
    """Answers GET_BROKER_HA_STATUS (907) with ``role``."""

    def __init__(self) -> None:
        self.server = RemotingServer(host="127.0.0.1")
        self.role = "SLAVE"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        self.server.register(RequestCode.GET_BROKER_HA_STATUS, self._status)
        await self.server.start()

    def _status(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return request.response(body=orjson.dumps({"brokerRole": self.role}))


def statuses(controller: ElectingController, slave: FakeBroker) -> dict[str, dict[str, Any]]:
    mode = {"controllerAddr": controller.addr, "syncStateSet": [1, 2], "syncStateSetEpoch": 3}
    return {"127.0.0.1:1": {"brokerRole": "SYNC_MASTER", "clusterName": "c",
                            "controllerMode": {**mode, "controllerBrokerId": 1}},
            slave.addr: {"brokerRole": "SLAVE", "clusterName": "c",
                         "controllerMode": {**mode, "controllerBrokerId": 2}}}


@contextlib.asynccontextmanager
async def electing(leader_after: float) -> AsyncIterator[tuple[Admin, ElectingController, FakeBroker]]:
    """A started slave, a controller naming a leader after ``leader_after`` s and an Admin; all closed on exit."""
    slave = FakeBroker()
    await slave.start()
    controller = ElectingController(leader_after, slave)
    await controller.start()
    admin = Admin("127.0.0.1:1")
    try:
        yield admin, controller, slave
    finally:
        await admin.close()
        await controller.server.stop()
        await slave.server.stop()


async def test_it_waits_through_a_controller_election_longer_than_a_few_passes() -> None:
    async with electing(4.0) as (admin, controller, slave):
        st = await admin.controller_failover("b", statuses(controller, slave), wait=10.0)
        assert st["brokerRole"] == "SYNC_MASTER"
        assert [e["brokerId"] for e in controller.elections] == ["2"]
        assert controller.elections[0]["designateElect"] == "true"


async def test_no_leader_within_wait_is_a_clear_error() -> None:
    async with electing(3600.0) as (admin, controller, slave):
        began = time.monotonic()
        with pytest.raises(RemotingConnectError, match=r"no controller leader .* within 1\.5 s"):
            await admin.controller_failover("b", statuses(controller, slave), wait=1.5)
        assert 1.5 <= time.monotonic() - began < 5.0
        assert controller.elections == []
